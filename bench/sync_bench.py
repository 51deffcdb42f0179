"""A big cluster loaded through the same path as a live list, then what one watch event and one verb cost there.

Run: .venv/bin/python -m bench.sync_bench [--nodes 5000] [--pods 20000] [--events 300] [--verbs 200]
     [--sample 0.05] [--json]
(bench/scale_bench.py runs it at several sizes, one process each; `make bench-scale`.)

- time to ready: objects decoded from JSON bytes (as the live source receives them), parsed and indexed with
  store.replace per kind (decode and parse inside state/collector.py's bulk_load, as a watcher's list runs),
  the first snapshot, the quota context and usage: what the extender does before its first verdict. Peak RSS
  of the process, and what the loaded state adds to it (RSS after minus before, the generator's JSON freed),
  per node and per pod.
- one event: a ResourceClaim update (allocation moved on a node: the claim re-indexed, the node's allocation
  version stamped) and a Pod update (a pending pod bound to a node), each followed by the snapshot and the usage
  index catching up, as a watch event followed by the next verb: p50, p99 and max over `--events` of each.
- verbs: filter + prioritize through the service with their wire answers, for pods asking one GPU from a
  template under the ClusterQueue, each about `--sample` of the nodes taken as kube-scheduler takes them
  (percentageOfNodesToScore, about 5 % at 65,000 nodes, so ~3,250 names; each cycle starts where the last one
  stopped, its nextStartNodeIndex), the binding's watch events applied between two pods: p50 and p99 over
  `--verbs` pods. Filters over every node, a sample at a time, run first, untimed: a running extender has met
  every node before (selector verdicts, free lists), and a benchmark that starts cold measures its first minutes.

`--clock cpu` (the default) times events and verbs with the thread's CPU clock: on a shared machine (load above
the core count) wall times mostly measure waiting for a core, and p99 and max would carry other processes'
bursts; `--clock wall` times what a caller waits. Time to ready is always wall-clock.
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import statistics
import sys
import time
from typing import Any

import orjson

from extender.decisions.quota.attribution import pod_usage
from extender.decisions.quota.context import KueueConfigRef, build_quota_context
from extender.state.collector import bulk_load, freeze_loaded_state, tune_for_large_heap
from extender.state.core import parse_pod
from extender.state.indexes.usage import UsageIndex
from extender.state.store import ClusterStore
from testkit import builders as b
from testkit.clusters import cluster_objects

CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = time.thread_time  # set by --clock


def rss_mb() -> float:
    """Peak RSS of this process so far (ru_maxrss: KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize() / (1 << 20)
    except OSError:
        return rss_mb()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def summary_ms(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values) * 1000, 3),
        "p99": round(percentile(values, 0.99) * 1000, 3),
        "max": round(max(values) * 1000, 3),
    }


def load(nodes: int, pods: int) -> tuple[ClusterStore, dict[str, Any]]:
    objects = cluster_objects(nodes, pods=pods, with_quota=True)
    room_for_every_gpu(objects, nodes)
    payloads = {kind: orjson.dumps({"items": items}) for kind, items in objects.items()}
    del objects
    gc.collect()
    before = current_rss_mb()
    started = time.perf_counter()
    store = ClusterStore()
    for kind, payload in payloads.items():
        with bulk_load():  # as the live source's watchers list: decode and parse with the collector paused
            store.replace(kind, orjson.loads(payload)["items"])
    store.set_synced(True)
    snapshot = store.snapshot()
    context = build_quota_context(snapshot, None, KueueConfigRef())
    UsageIndex().totals(snapshot, context, lambda at, pod: pod_usage(at, pod, context))
    freeze_loaded_state()
    ready = time.perf_counter() - started
    del payloads
    gc.collect()
    state_mb = current_rss_mb() - before
    return store, {
        "nodes": nodes,
        "pods": len(snapshot.pods),
        "claims": len(snapshot.claims),
        "ready_s": round(ready, 2),
        "peak_rss_mb": round(rss_mb()),
        "state_mb": round(state_mb),
        "kb_per_node_with_its_pods": round(state_mb * 1024 / nodes, 1),
    }


def room_for_every_gpu(objects: dict[str, list[dict[str, Any]]], nodes: int) -> None:
    """The generated ClusterQueue's quota covers every GPU of the cluster, so the verbs measure the decisions, not
    a queue that is full (half the GPUs are held: 260,000 at 65,000 nodes)."""
    for queue in objects.get("ClusterQueue", ()):
        for group in queue["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                for quota in flavor["resources"]:
                    quota["nominalQuota"] = max(int(quota["nominalQuota"]), nodes * 8)


def claim_update(index: int, node: str, device: int) -> dict[str, Any]:
    claim = b.claim(
        f"held-{index}",
        "bench",
        [b.exact_request("gpu", 1)],
        allocated=[("gpu", node, f"gpu-{device}")],
        allocated_node=node,
        reserved_for=[(f"holder-{index}", f"uid-holder-{index}")],
    )
    parsed: dict[str, Any] = orjson.loads(orjson.dumps(claim))
    return parsed


def event_costs(store: ClusterStore, nodes: int, events: int, rng: random.Random) -> dict[str, dict[str, float]]:
    """apply + snapshot + usage delta per event, for claim updates and for pod bindings, interleaved."""
    snapshot = store.snapshot()
    context = build_quota_context(snapshot, None, KueueConfigRef())
    tracker = UsageIndex()
    attribute = lambda at, pod: pod_usage(at, pod, context)  # noqa: E731  # one closure for every call
    tracker.totals(snapshot, context, attribute)
    claim_costs: list[float] = []
    pod_costs: list[float] = []
    held = [int(key.rsplit("-", 1)[1]) for key in snapshot.claims if key.startswith("bench/held-")]
    rng.shuffle(held)
    for step in range(events):
        index = held[step % len(held)]
        raw_claim = claim_update(index, f"node-{index:05d}", step % 8)
        node = f"node-{rng.randrange(nodes):05d}"
        raw_pod = b.pod(f"event-{step}", "bench", node_name=node, phase="Running", queue="q")
        raw_pod = orjson.loads(orjson.dumps(raw_pod))
        for kind, raw, costs in (("ResourceClaim", raw_claim, claim_costs), ("Pod", raw_pod, pod_costs)):
            begin = clock()
            store.apply(kind, "MODIFIED" if kind == "ResourceClaim" else "ADDED", raw)
            tracker.totals(store.snapshot(), context, attribute)
            costs.append(clock() - begin)
    if tracker.full_recomputes != 1:
        raise SystemExit(f"usage recomputed {tracker.full_recomputes} times: the events were not incremental")
    return {"claim_update_ms": summary_ms(claim_costs), "pod_update_ms": summary_ms(pod_costs)}


def verb_costs(store: ClusterStore, verbs: int, sample: float, rng: random.Random) -> dict[str, Any]:
    """filter + prioritize through the service and the wire, each pod about a random sample of the nodes."""
    import bench.loop_bench as loop  # the service and the binding events of the loop benchmark
    from extender.transport.verb_answers import PrioritizeAhead
    from extender.transport.wire import ExtenderArgs, filter_result, host_priority_list

    burst = loop.burst_over(store)
    pauses = GcPauses()
    service = burst.service
    ahead = PrioritizeAhead(service)
    count = max(1, round(len(burst.names) * sample))
    warm = parse_pod(loop.pod_object(-1))  # every node met once, untimed, a sample at a time (the verbs' deadline)
    for first in range(0, len(burst.names), count):
        service.filter(warm, burst.names[first : first + count])
    start = rng.randrange(len(burst.names))
    filters: list[float] = []
    both: list[float] = []
    for index in range(verbs):
        raw = loop.pod_object(index)
        pod = parse_pod(raw)
        names = [burst.names[(start + offset) % len(burst.names)] for offset in range(count)]
        start = (start + count) % len(burst.names)
        started = clock()
        decision = service.filter(pod, names)
        orjson.dumps(filter_result(ExtenderArgs(pod, names, None), decision))
        filtered = clock() - started
        passed = decision.passed
        if not passed:
            raise SystemExit(f"pod {index} found no node among {count}")
        ahead.follow(decision)()
        started = clock()
        ranking = service.prioritize(pod, passed)
        answer = ahead.answer(ranking) or host_priority_list(passed, ranking)
        filters.append(filtered)
        both.append(filtered + clock() - started)
        scores = {entry["Host"]: entry["Score"] for entry in orjson.loads(answer)}
        loop.bind_events(burst, raw, loop.choose(passed, scores))
    service.stop()
    return {
        "candidates": count,
        "filter_ms": summary_ms(filters),
        "filter_prioritize_ms": summary_ms(both),
        "full_gc_during_verbs": pauses.stop(),
    }


class GcPauses:
    """Full (generation 2) collections while it runs, and their longest pause: the verbs' p99 and max include
    them (thread CPU time counts the collector's work on this thread)."""

    def __init__(self) -> None:
        self.count = 0
        self.longest = 0.0
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.count += 1
            self.longest = max(self.longest, time.perf_counter() - self._started)

    def stop(self) -> dict[str, float]:
        gc.callbacks.remove(self._callback)
        return {"count": self.count, "longest_ms": round(self.longest * 1000, 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--events", type=int, default=300, help="claim updates and pod bindings, each")
    parser.add_argument("--verbs", type=int, default=200, help="pods filtered and prioritized (0: none)")
    parser.add_argument("--sample", type=float, default=0.05, help="share of the nodes each filter asks about")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu", help="events' and verbs' clock")
    parser.add_argument("--json", action="store_true", help="one JSON line (bench/scale_bench.py reads it)")
    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    tune_for_large_heap()
    rng = random.Random(args.seed)
    store, result = load(args.nodes, args.pods)
    result.update(event_costs(store, args.nodes, args.events, rng))
    sys.stderr.write(orjson.dumps(result).decode() + "\n")  # kept should the verbs fail or run out of time
    sys.stderr.flush()
    if args.verbs:
        result.update(verb_costs(store, args.verbs, args.sample, rng))
    result["peak_rss_mb"] = round(rss_mb())
    result["clock"] = args.clock
    if args.json:
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return
    print(f"{result['nodes']} nodes x 8 devices, {result['pods']} pods, {result['claims']} claims")
    print(f"time to ready (decode + parse + index + first snapshot + usage): {result['ready_s']:.2f} s")
    print(
        f"state: {result['state_mb']} MB ({result['kb_per_node_with_its_pods']} KB per node with its pods);"
        f" peak RSS {result['peak_rss_mb']} MB"
    )
    for name in ("claim_update_ms", "pod_update_ms"):
        figures = result[name]
        print(f"{name} (apply + snapshot + usage): p50 {figures['p50']} p99 {figures['p99']} max {figures['max']}")
    if args.verbs:
        for name in ("filter_ms", "filter_prioritize_ms"):
            figures = result[name]
            print(f"{name} over {result['candidates']} candidate nodes: p50 {figures['p50']} p99 {figures['p99']}")
        pauses = result["full_gc_during_verbs"]
        print(f"full collections during the verbs: {pauses['count']}, longest {pauses['longest_ms']} ms (wall)")


if __name__ == "__main__":
    main()
