"""How the verbs' cost grows: with the candidate nodes asked (it should, linearly) and with the pods and claims
the cluster holds besides (it should not).

Run: .venv/bin/python -m bench.scaling_bench [--rounds 3] [--pods 200] [--clock cpu] [--cold]

The goal is a per-call cost linear in candidate nodes and flat in the number of pods and claims in the
cluster. Both are measured with bench/loop_bench.py's loop (filter, prioritize's answer made ahead, prioritize,
then the binding's watch events, then the next pod), over the clusters of testkit/clusters.py (8 GPUs per node,
half of them held by running pods' claims, two flavors under one ClusterQueue):

- candidate nodes: one 2000-node cluster, kube-scheduler asking about the first 250, 500, 1000 or 2000 nodes.
  Printed: ms per pod, us per candidate node, and a least-squares line through the medians (fixed cost + cost
  per node) with each size's distance from it;
- pods and claims: a 1000-node cluster asked about every node, with 0, 5000 or 20000 more pods and claims: half
  of them bound pods without claims (running workloads), half a backlog of pending pods, each with its own
  ResourceClaim not allocated yet (the queue kube-scheduler works through). Printed: ms per pod and the ratio
  to the cluster without them;
- reservations held: the same 1000-node cluster after 0, 1000 or 5000 other pods under the ClusterQueue passed
  filter and were never seen bound (a gang waiting at Permit holds its quota so). Printed as the row above.

`verbs` is what kube-scheduler waits for (filter + prioritize with their wire answers); the work made ahead is
left out, as the server does it while kube-scheduler runs its score plugins. Medians over pods, then over
rounds; these machines are noisy.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from typing import Any

import bench.loop_bench as loop
from extender.state.collector import tune_for_large_heap
from extender.state.core import parse_pod
from extender.state.store import ClusterStore
from testkit import builders as b
from testkit.clusters import cluster_objects

CANDIDATE_COUNTS = (250, 500, 1000, 2000)
EXTRA_COUNTS = (0, 5000, 20000)
HELD_COUNTS = (0, 1000, 5000)
SCALING_NODES = 1000  # the cluster the pods-and-claims rows grow


def backlog(count: int, nodes: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`count` more pods and claims: half bound pods without claims, half pending pods with a claim each."""
    pods: list[dict[str, Any]] = []
    claims: list[dict[str, Any]] = []
    for index in range(count // 2):
        pods.append(b.pod(f"running-{index}", "bench", node_name=nodes[index % len(nodes)], phase="Running"))
        claim_name = f"waiting-{index}-gpu"
        claims.append(b.claim(claim_name, "bench", [b.exact_request("gpu", 1)]))
        pods.append(b.pod(f"waiting-{index}", "bench", claims={"gpu": claim_name}, queue="q", phase="Pending"))
    return pods, claims


def cluster_burst(nodes: int, extra: int, asked: int) -> loop.Burst:
    """A loop_bench Burst over a fresh cluster with `extra` pods and claims, asking about `asked` nodes."""
    tune_for_large_heap()
    objects = cluster_objects(nodes, with_quota=True)
    more_pods, more_claims = backlog(extra, sorted(node["metadata"]["name"] for node in objects["Node"]))
    objects["Pod"] = [*objects["Pod"], *more_pods]
    objects["ResourceClaim"] = [*objects["ResourceClaim"], *more_claims]
    store = ClusterStore()
    for kind, items in objects.items():
        store.replace(kind, items)
    store.set_synced(True)
    burst = loop.burst_over(store)
    return replace(burst, names=burst.names[:asked])


def hold_reservations(burst: loop.Burst, count: int) -> None:
    """`count` pods under the ClusterQueue pass filter and are never seen bound: their reservations stay."""
    for index in range(count):
        pod = parse_pod(b.pod(f"gang-{index}", "bench", templates={"gpu": "one"}, queue="q"))
        if not burst.service.filter(pod, burst.names).passed:
            raise SystemExit(f"gang pod {index} found no node: the ClusterQueue is too small for {count}")


def verbs_ms(nodes: int, extra: int, asked: int, pods: int, rounds: int, held: int = 0) -> float:
    """Median over rounds of the median ms per pod of what kube-scheduler waits for."""
    per_round = []
    for _ in range(rounds):
        burst = cluster_burst(nodes, extra, asked)
        hold_reservations(burst, held)
        costs, _ahead = loop.run_burst(burst, pods)
        per_round.append(loop.median_ms(costs))
    return statistics.median(per_round)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--clock", choices=sorted(loop.CLOCKS), default="cpu")
    parser.add_argument("--cold", action="store_true", help="evict the CPU caches before each call")
    args = parser.parse_args()
    loop.clock = loop.CLOCKS[args.clock]
    if args.cold:
        loop.enable_cache_eviction()
    started = time.perf_counter()
    print(f"Verbs per pod (filter + prioritize, {args.pods} pods per round, medians of {args.rounds} rounds,", end=" ")
    print(f"{args.clock} clock{', caches evicted before each call' if args.cold else ''})")
    print()
    print(f"Candidate nodes (cluster of {max(CANDIDATE_COUNTS)} nodes):")
    print(f"{'asked':>7} {'ms/pod':>8} {'us/node':>8} {'line':>8} {'off':>7}")
    sizes = list(CANDIDATE_COUNTS)
    figures = [verbs_ms(max(sizes), 0, asked, args.pods, args.rounds) for asked in sizes]
    slope, intercept = statistics.linear_regression(sizes, figures)
    for asked, figure in zip(sizes, figures, strict=True):
        line = intercept + slope * asked
        print(f"{asked:>7} {figure:8.3f} {figure / asked * 1000:8.2f} {line:8.3f} {(figure / line - 1) * 100:+6.1f}%")
    print(f"  least squares: {intercept:.3f} ms + {slope * 1000:.3f} us per candidate node")
    print()
    print(f"Pods and claims besides ({SCALING_NODES} nodes, every node asked):")
    print(f"{'extra':>7} {'ms/pod':>8} {'ratio':>7}")
    base = 0.0
    for extra in EXTRA_COUNTS:
        figure = verbs_ms(SCALING_NODES, extra, SCALING_NODES, args.pods, args.rounds)
        base = base or figure
        print(f"{extra:>7} {figure:8.3f} {figure / base:6.2f}x")
    print()
    print(f"Reservations held by pods not seen bound ({SCALING_NODES} nodes, every node asked):")
    print(f"{'held':>7} {'ms/pod':>8} {'ratio':>7}")
    base = 0.0
    for held in HELD_COUNTS:
        figure = verbs_ms(SCALING_NODES, 0, SCALING_NODES, args.pods, args.rounds, held)
        base = base or figure
        print(f"{held:>7} {figure:8.3f} {figure / base:6.2f}x")
    print()
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
