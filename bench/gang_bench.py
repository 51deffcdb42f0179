"""A gang attempt as kube-scheduler's pod-group cycle drives it: the cost of deciding for the group.

Run: .venv/bin/python -m bench.gang_bench [--nodes 1000] [--gang 64] [--placements 8] [--rounds 3] [--clock cpu]
     [--no-devices]

kube-scheduler schedules a PodGroup in one cycle (pkg/scheduler/schedule_one_podgroup.go): filter (and
prioritize) for each member in turn, every member assumed before the next, nothing bound until the whole group
is placed; with TopologyAwareWorkloadScheduling the cycle runs once per candidate placement (the nodes of one
topology domain), every member through the extender each time, and the best placement is bound. The benchmark
replays that over a generated cluster (testkit/clusters.py, 1-GPU pods, a queue that fits the gang): the
members' filter + prioritize calls through the service, no watch event in between, then the bindings' events
of one placement. Per round, each over a fresh cluster:

- gang: the members of a gang PodGroup (minCount N) with GenericWorkload on, over every node: the first call
  decides for the group (decisions/gang/quota.py: decide_quota a second time with the rest of the gang's
  charge) and makes the attempt's hold (service/gang_attempts.py); each later member is judged against what the
  hold already covers in its flavor (no second decide_quota);
- placements: the same gang evaluated once per placement (the nodes split into `--placements` domains), every
  member through filter + prioritize over its placement's nodes, the hold the most of every placement's;
- singles: the same N pods without a PodGroup (or with the gates off: the same path).

`--no-devices`: members with no claim, only a LocalQueue (the shape of scheduler_perf's GangScheduling and
TopologyAwareScheduling pods, which ask for cpu and memory alone; here they request nothing the generated queue
covers, so quota is decided and charges nothing); bound without a claim.

Figures: the median per call and the whole attempt (sum of its calls), medians over rounds, and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.loop_bench import CLOCKS, PrefilledSource, bind_events, bind_pod, choose
from bench.loop_bench import Burst as LoopBurst
from extender.service import SchedulingService
from extender.service.config import ExtenderConfig, parse_config
from extender.state.collector import freeze_loaded_state, tune_for_large_heap
from extender.state.core import parse_pod
from testkit import builders as b
from testkit.clusters import build_cluster

GATES_ON = {"features": {"GenericWorkload": True, "DRAWorkloadResourceClaims": True}}


def burst(nodes: int, config: ExtenderConfig, gang: int | None) -> LoopBurst:
    store = build_cluster(nodes, with_quota=True)
    if gang is not None:
        store.apply("PodGroup", "ADDED", b.pod_group("train", "bench", min_count=gang))
    service = SchedulingService(PrefilledSource(), config, store=store)
    service.start()
    freeze_loaded_state()
    snapshot = store.snapshot()
    free = {
        name: [d.name for d in snapshot.node_devices(name).devices if d.key not in snapshot.allocated]
        for name in snapshot.nodes
    }
    return LoopBurst(service, sorted(snapshot.nodes), free)


def attempt(
    run: LoopBurst, pods: int, grouped: bool, clock: object, placements: int = 1, devices: bool = True
) -> list[float]:
    """One cycle: per placement, filter + prioritize per member over the placement's nodes, all before any
    binding; then the bindings' events of the last placement."""
    tick = CLOCKS[str(clock)]
    service, costs = run.service, []
    templates = {"gpu": "one"} if devices else None
    members = [
        b.pod(f"w{index}", "bench", templates=templates, queue="q", pod_group="train" if grouped else "")
        for index in range(pods)
    ]
    for raw in members:  # kube-scheduler's pod-group cycle starts once minCount members exist
        service.store.apply("Pod", "ADDED", raw)
    domains = [run.names[index::placements] for index in range(placements)]
    chosen: list[tuple[dict[str, Any], str]] = []
    for names in domains:
        # what kube-scheduler's assumptions take within the placement (reverted after it)
        left = {name: len(run.free[name]) if devices else pods for name in names}
        chosen = []
        for index, raw in enumerate(members):
            pod = parse_pod(raw)
            started = tick()
            decision = service.filter(pod, names)
            passed = decision.passed
            ranking = service.prioritize(pod, passed) if passed else None
            costs.append(tick() - started)
            if not passed or ranking is None:
                raise SystemExit(f"member {index} found no node: {next(iter(decision.failures.items()), None)}")
            open_nodes = [name for name in passed if left.get(name, 0) > 0]
            scores = {name: (score.total if (score := ranking.score(name)) is not None else 0) for name in open_nodes}
            node = choose(open_nodes, scores)
            left[node] -= 1
            chosen.append((raw, node))
    if grouped and devices:  # claim-less members charge nothing the queue covers: their hold holds nothing
        hold = service.reservations.get("podgroup:bench/train")
        assert hold is not None and sum(hold.charges.values()) >= pods, "the attempt's hold lost the group"
    for raw, node in chosen:
        if devices:
            bind_events(run, raw, node)
        else:
            bind_pod(service.store, raw, node)
    if grouped:
        service.quota_view()
        assert service.reservations.get("podgroup:bench/train") is None, "the hold outlived the group's binding"
    return costs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gang", type=int, default=64)
    parser.add_argument("--placements", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    parser.add_argument("--no-devices", action="store_true", help="members with no claim, only a LocalQueue")
    args = parser.parse_args()
    tune_for_large_heap()
    results: dict[str, list[tuple[float, float, float]]] = {"gang": [], "placements": [], "singles": []}
    runs = (("gang", True, 1), ("placements", True, args.placements), ("singles", False, 1))
    for _ in range(args.rounds):
        for label, grouped, placements in runs:
            run = burst(args.nodes, parse_config(GATES_ON), args.gang if grouped else None)
            costs = attempt(run, args.gang, grouped, args.clock, placements, not args.no_devices)
            results[label].append((statistics.median(costs), costs[0], sum(costs[1:])))
    kind = "claim-less" if args.no_devices else "1-GPU"
    print(f"Gang attempt: {args.gang} {kind} members x filter + prioritize over {args.nodes} nodes, no event between;")
    each = args.nodes // args.placements
    print(f"placements: the same gang evaluated in {args.placements} placements of {each} nodes")
    print(f"({args.rounds} rounds, {args.clock} clock; medians over rounds)")
    print()
    print(f"{'':>8} {'per call ms':>12} {'first call ms':>14} {'other calls ms':>15}")
    medians = {}
    for label, rows in results.items():
        per_call, first, rest = (statistics.median(row[i] for row in rows) * 1000 for i in range(3))
        medians[label] = (per_call, rest)
        print(f"{label:>8} {per_call:12.3f} {first:14.1f} {rest:15.1f}")
    print()
    print(
        f"gang / singles: per call {medians['gang'][0] / medians['singles'][0]:.2f}x, "
        f"the attempt after its first call {medians['gang'][1] / medians['singles'][1]:.2f}x"
    )
    print(
        f"placements / gang: per call {medians['placements'][0] / medians['gang'][0]:.2f}x, "
        f"the attempt after its first call {medians['placements'][1] / medians['gang'][1]:.2f}x "
        f"({args.placements}x the calls)"
    )
    print("first call: the cluster's first decision (the service's memos start empty), the same for both.")
    print("gang: the first member decides for the group (decide_quota again with the rest of the gang) and makes the")
    print("attempt's hold; the others are judged against what it covers; placements: the same once per placement;")
    print("singles: the same pods, no PodGroup.")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"({time.perf_counter() - started:.0f} s)")
