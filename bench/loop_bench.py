"""The scheduling loop as kube-scheduler drives it, state changing between every two pods.

Run: .venv/bin/python -m bench.loop_bench [--nodes 200 1000] [--pods 400] [--rounds 3] [--shape partitionable]

Per pod: filter over every node, prioritize over the nodes that passed, then the watch events the binding
causes (the generated claim allocated and reserved for the pod, the pod bound), then the next pod. A static
cluster (what bench/allocator_bench.py replays) hides the work a changed snapshot causes: a new snapshot, the
usage index catching up, reservations reconciled, per-node caches retired for the node that changed.

Two measurements per round, each over a fresh cluster:
- the verbs as the service runs them (`service.filter`, `service.prioritize`) plus the wire answers
  (`wire.filter_result` encoded with orjson, `wire.host_priority_list`: what the server sends), per pod, with
  prioritize's answer made ahead between the two as the server makes it (`PrioritizeAhead`), timed apart;
- the same loop split into its steps, timed one by one through the same public functions the service calls:
  quota view (snapshot + reconcile + usage + ledger), decision (devices + quota), scoring, response building,
  watch events applied to the store.
Figures are medians over pods, then the median over rounds; these machines are noisy. `--clock cpu` times with
the thread's CPU clock instead of the wall clock: on a shared machine (load above the core count) wall times
mostly measure waiting for a core, CPU times what the loop itself costs.

`--cold` evicts the CPU caches (writes a buffer larger than any last-level cache), untimed, where other
processes run in a real burst: before filter, before prioritize (kube-scheduler scores in between) and before
the binding's watch events; in the split, before the view, the scoring and the events. Alone, this loop keeps
the extender's working set in cache from one pod to the next; in a real run kube-scheduler, the API server and
etcd evict it between two calls, and the same work costs more CPU. A 1000-node e2e run's filter took 2.4 ms of
CPU per call (about 420 nodes asked); the same calls replayed from that run's recorded watch frames cost 0.8 ms
warm and 1.65 ms evicted. Cold figures are closer to what the serial cycle pays; warm ones show the work itself.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Any

import orjson

from extender.decisions.ranking import score_nodes
from extender.decisions.scheduling import decide_pod
from extender.service import ExtenderConfig, SchedulingService
from extender.state.collector import freeze_loaded_state, tune_for_large_heap
from extender.state.core import parse_pod
from extender.state.sources import SourceHealth, SourceWithoutWatches
from extender.state.store import ClusterStore
from extender.transport.verb_answers import PrioritizeAhead
from extender.transport.wire import ExtenderArgs, filter_result, host_priority_list
from testkit import builders as b
from testkit.clusters import PARTITIONED_COUNT, PARTITIONED_TEMPLATE, build_cluster, partitioned_cluster

STEPS = ("view", "decide", "score", "respond", "events")
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = time.perf_counter  # set by --clock
# Larger than the last-level cache of any machine this runs on; written a byte per 64-byte line by --cold.
EVICTION_BYTES = 256 << 20
_eviction: bytearray | None = None  # set by --cold


def enable_cache_eviction() -> None:
    """From now on evict_caches evicts (--cold; bench/watch_replay.py's cold replays)."""
    global _eviction
    if _eviction is None:
        _eviction = bytearray(EVICTION_BYTES)


def evict_caches() -> None:
    """With --cold: push the loop's working set out of the CPU caches, as the neighbours of a real run do."""
    if _eviction is not None:
        _eviction[::64] = b"\1" * (len(_eviction) // 64)


class PrefilledSource(SourceWithoutWatches):
    """The store is filled by the benchmark itself; the service only needs a source that says ready."""

    description = "benchmark cluster"

    def start(self, store: ClusterStore) -> None:
        return None

    def stop(self) -> None:
        return None

    def health(self) -> SourceHealth:
        return SourceHealth(True, "benchmark cluster")


@dataclass
class Burst:
    service: SchedulingService
    names: list[str]
    free: dict[str, list[str]]  # node -> its free devices (what the benchmark's "in-tree plugin" allocates)
    template: str = "one"  # the claim template of the burst's pods (testkit/clusters.py)
    per_pod: int = 1  # the devices it asks for


# --shape: the cluster a burst runs on, and the template and device count of its pods
SHAPES = ("gpus", "partitionable")


def new_burst(nodes: int, shape: str = "gpus") -> Burst:
    tune_for_large_heap()
    if shape == "partitionable":
        return burst_over(partitioned_cluster(nodes, with_quota=True), PARTITIONED_TEMPLATE, PARTITIONED_COUNT)
    return burst_over(build_cluster(nodes, with_quota=True))


def burst_over(store: ClusterStore, template: str = "one", per_pod: int = 1) -> Burst:
    """The service over a filled store, asking about every node (bench/scaling_bench.py fills its own)."""
    service = SchedulingService(PrefilledSource(), ExtenderConfig(), store=store)
    service.start()
    freeze_loaded_state()
    snapshot = store.snapshot()
    free: dict[str, list[str]] = {}
    for name in snapshot.nodes:
        devices = snapshot.node_devices(name).devices
        free[name] = [d.name for d in devices if d.key not in snapshot.allocated]
    return Burst(service, sorted(snapshot.nodes), free, template, per_pod)


def pod_object(index: int, template: str = "one") -> dict[str, Any]:
    return b.pod(f"burst-{index}", "bench", templates={"gpu": template}, queue="q")


def bind_events(burst: Burst, raw_pod: dict[str, Any], node: str) -> None:
    """What the API server sends after kube-scheduler's PreBind and Bind: the claim, then the bound pod."""
    uid = raw_pod["metadata"]["uid"]
    taken = [burst.free[node].pop(0) for _ in range(burst.per_pod)]
    claim = b.claim(
        f"{raw_pod['metadata']['name']}-gpu",
        "bench",
        [b.exact_request("gpu", burst.per_pod)],
        allocated=[("gpu", node, device) for device in taken],
        allocated_node=node,
        reserved_for=[(raw_pod["metadata"]["name"], uid)],
        owner_uid=uid,
        owner_name=raw_pod["metadata"]["name"],  # as the ResourceClaim controller names the pod it made it for
        pod_claim_name="gpu",
    )
    burst.service.store.apply("ResourceClaim", "ADDED", claim)
    bind_pod(burst.service.store, raw_pod, node)


def bind_pod(store: ClusterStore, raw_pod: dict[str, Any], node: str) -> None:
    """The pod as the API server sends it once kube-scheduler's Bind set its node."""
    bound = {**raw_pod, "spec": {**raw_pod["spec"], "nodeName": node}, "status": {"phase": "Pending"}}
    store.apply("Pod", "MODIFIED", bound)


def choose(passed: list[str], scores: dict[str, int]) -> str:
    best = max(scores.get(name, 0) for name in passed)
    return next(name for name in passed if scores.get(name, 0) == best)


def run_verbs(nodes: int, pods: int, shape: str = "gpus") -> tuple[list[float], list[float]]:
    """Per-pod time of filter + prioritize through the service and the wire format (what kube-scheduler waits
    for), and of prioritize's answer made ahead once filter's is out (transport/verb_answers.py PrioritizeAhead, as the
    server runs it: while kube-scheduler runs its own score plugins); events not counted."""
    return run_burst(new_burst(nodes, shape), pods)


def run_burst(burst: Burst, pods: int) -> tuple[list[float], list[float]]:
    """run_verbs over a burst made elsewhere (bench/scaling_bench.py: other clusters, fewer nodes asked)."""
    service = burst.service
    ahead = PrioritizeAhead(service)
    costs, ahead_costs = [], []
    for index in range(pods):
        raw = pod_object(index, burst.template)
        pod = parse_pod(raw)
        evict_caches()
        started = clock()
        decision = service.filter(pod, burst.names)
        args = ExtenderArgs(pod, burst.names, None)
        orjson.dumps(filter_result(args, decision))
        filtered = clock() - started
        passed = decision.passed
        if not passed:
            raise SystemExit(f"pod {index} found no node: the cluster is too small for {pods} pods")
        started = clock()
        ahead.follow(decision)()
        ahead_costs.append(clock() - started)
        evict_caches()
        started = clock()
        ranking = service.prioritize(pod, passed)
        answer = ahead.answer(ranking) or host_priority_list(passed, ranking)
        costs.append(filtered + clock() - started)
        bind_events(burst, raw, choose(passed, {entry["Host"]: entry["Score"] for entry in orjson.loads(answer)}))
    return costs, ahead_costs


def run_steps(nodes: int, pods: int, shape: str = "gpus") -> dict[str, list[float]]:
    """The same loop, each step timed through the public pieces the service's verbs are made of."""
    burst = new_burst(nodes, shape)
    service = burst.service
    steps: dict[str, list[float]] = {step: [] for step in STEPS}
    weights = service.options.weights

    def begin() -> float:
        evict_caches()
        return clock()

    for index in range(pods):
        raw = pod_object(index, burst.template)
        pod = parse_pod(raw)
        started = begin()
        view = service.quota_view()
        steps["view"].append(clock() - started)
        started = clock()  # decide follows the view in the same call: nothing ran in between
        decision = decide_pod(
            view.snapshot,
            pod,
            burst.names,
            matcher=service.matcher,
            quota_context=view.context,
            ledger=view.ledger_excluding(pod.uid),
            options=service.options,
        )
        service.reservations.reserve(pod.uid, pod.key, decision.quota.cluster_queue, decision.reservation)
        steps["decide"].append(clock() - started)
        passed = decision.passed
        started = begin()
        # prioritize asked about the very list filter passed, as kube-scheduler asks (SchedulingService.prioritize)
        ranking = score_nodes(decision, passed, view.snapshot, service.caches, weights)
        steps["score"].append(clock() - started)
        started = clock()
        orjson.dumps(filter_result(ExtenderArgs(pod, burst.names, None), decision))
        answer = host_priority_list(passed, ranking)
        steps["respond"].append(clock() - started)
        chosen = choose(passed, {entry["Host"]: entry["Score"] for entry in orjson.loads(answer)})
        started = begin()
        bind_events(burst, raw, chosen)
        steps["events"].append(clock() - started)
    return steps


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    parser.add_argument("--cold", action="store_true", help="evict the CPU caches before each call and the events")
    parser.add_argument(
        "--shape",
        choices=SHAPES,
        default="gpus",
        help="gpus: 8 GPUs a node, 1-GPU pods; partitionable: scheduler_perf's Partitionable (two devices a node "
        "drawing on shared counters, 2-device pods)",
    )
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    if args.cold:
        enable_cache_eviction()
    print("Scheduling loop: filter over all nodes, prioritize over the passing ones, then the binding's watch events")
    pods_are = "1-GPU pods" if args.shape == "gpus" else "2-device pods on partitionable devices"
    print(f"({pods_are} with a LocalQueue, {args.pods} per round, {args.rounds} rounds;", end=" ")
    print(f"medians in ms per pod, {args.clock} clock{', caches evicted before each call' if args.cold else ''})")
    print()
    header = f"{'nodes':>6} {'verbs':>8} {'pods/s':>8} {'ahead':>8} " + " ".join(f"{step:>8}" for step in STEPS)
    print(header)
    for nodes in args.nodes:
        verbs, made_ahead = [], []
        split: dict[str, list[float]] = {step: [] for step in STEPS}
        for _ in range(args.rounds):
            costs, ahead_costs = run_verbs(nodes, args.pods, args.shape)
            verbs.append(median_ms(costs))
            made_ahead.append(median_ms(ahead_costs))
            for step, values in run_steps(nodes, args.pods, args.shape).items():
                split[step].append(median_ms(values))
        verb_ms = statistics.median(verbs)
        parts = " ".join(f"{statistics.median(split[step]):8.3f}" for step in STEPS)
        print(f"{nodes:>6} {verb_ms:8.3f} {1000 / verb_ms:8.0f} {statistics.median(made_ahead):8.3f} {parts}")
    print()
    print("verbs: filter + prioritize + wire answers through the service and the server's verbs, what kube-scheduler")
    print("waits for; ahead: prioritize's answer made once filter's is written (while kube-scheduler scores; not in")
    print("verbs). The columns after it split the loop into quota view, decision, scoring (all of it, as if made")
    print("inside prioritize), response building and watch events (store.apply x2).")


if __name__ == "__main__":
    main()
