"""The filter cost of a pod that reaches the preemption oracle, beside one that fits as it stands.

Run: .venv/bin/python -m bench.preemption_bench [--nodes 1000] [--pods 200] [--rounds 3] [--clock cpu]

The cluster is testkit/clusters.py's (8 GPUs per node, about half held by running pods of the ClusterQueue, two
flavors). Three queues over it, each filter asking about every node:

- fits: nominal quota far above usage; the walk never asks the oracle (the common path);
- preempt: each flavor's nominal quota exactly what its running pods hold, the queue may preempt lower
  priority work (withinClusterQueue: LowerPriority) and the pod outranks the holders: every flavor needs
  preemption, the oracle runs for each and finds a target, the pod is refused with the targets named;
- no candidates: the same, but the pod has the holders' priority: the oracle finds nobody in either flavor.

Printed: the median ms per filter call (medians over pods, then over rounds) and the ratio to "fits". The
oracle runs only when a flavor does not fit as it stands, so "fits" is the figure that must not move.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from typing import Any

import bench.loop_bench as loop
from extender.state.collector import tune_for_large_heap
from extender.state.core import parse_pod
from extender.state.store import ClusterStore
from testkit import builders as b
from testkit.clusters import cluster_objects
from testkit.scenarios import cluster_queue

CASES = ("fits", "preempt", "no candidates")


def flavor_usage(objects: dict[str, list[dict[str, Any]]]) -> Counter[str]:
    """GPUs the running pods hold per flavor (the node's capacity-type label)."""
    flavor_of = {
        node["metadata"]["name"]: node["metadata"]["labels"]["example.com/capacity-type"] for node in objects["Node"]
    }
    held: Counter[str] = Counter()
    for claim in objects["ResourceClaim"]:
        for result in claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", []):
            held[flavor_of[result["pool"]]] += 1
    return held


def service_for(nodes: int, case: str) -> loop.Burst:
    tune_for_large_heap()
    objects = cluster_objects(nodes, with_quota=True)
    if case != "fits":
        held = flavor_usage(objects)
        queue = cluster_queue("bench", {f: {"nominal": held[f]} for f in ("on-demand", "spot")}, cohort=None)
        queue["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
        objects["ClusterQueue"] = [queue]
    store = ClusterStore()
    for kind, items in objects.items():
        store.replace(kind, items)
    store.set_synced(True)
    return loop.burst_over(store)


def filter_ms(nodes: int, case: str, pods: int, rounds: int) -> float:
    per_round = []
    priority = 0 if case == "no candidates" else 100
    for round_index in range(rounds):
        burst = service_for(nodes, case)
        costs = []
        for index in range(pods):
            obj = b.pod(f"p-{round_index}-{index}", "bench", templates={"gpu": "one"}, queue="q")
            obj["spec"]["priority"] = priority
            pod = parse_pod(obj)
            started = loop.clock()
            result = burst.service.filter(pod, burst.names)
            costs.append(loop.clock() - started)
            if bool(result.passed) != (case == "fits"):
                raise SystemExit(f"case {case!r}: pod {index} {'passed' if result.passed else 'was refused'}")
        per_round.append(loop.median_ms(costs))
    return statistics.median(per_round)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clock", choices=sorted(loop.CLOCKS), default="cpu")
    args = parser.parse_args()
    loop.clock = loop.CLOCKS[args.clock]
    started = time.perf_counter()
    print(
        f"Filter per pod, {args.nodes} nodes asked, {args.pods} pods per round, medians of {args.rounds} rounds,",
        end=" ",
    )
    print(f"{args.clock} clock")
    print(f"{'case':>14} {'ms/pod':>8} {'ratio':>7}")
    base = 0.0
    for case in CASES:
        figure = filter_ms(args.nodes, case, args.pods, args.rounds)
        base = base or figure
        print(f"{case:>14} {figure:8.3f} {figure / base:6.2f}x")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
