"""Time to decide device feasibility for one pod over every node (in-process, no HTTP).

Run: .venv/bin/python -m bench.allocator_bench [--nodes 1000 5000] [--repeat 200]
Prints p50/p90/p99 per whole-cluster decision, per template. Measured numbers, not a pass/fail test.
"""

from __future__ import annotations

import argparse
import statistics
import time

from extender.decisions.devices.feasibility import device_outcomes
from extender.decisions.devices.pod_claims import resolve_pod_claims
from extender.decisions.devices.selection import DeviceMatcher
from extender.state.collector import freeze_loaded_state, tune_for_large_heap
from extender.state.core import parse_pod
from testkit import builders as b
from testkit.clusters import build_cluster


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure(nodes: int, template: str, repeat: int) -> dict[str, float]:
    tune_for_large_heap()
    store = build_cluster(nodes)
    snapshot = store.snapshot()
    freeze_loaded_state()
    names = sorted(snapshot.nodes)
    pod = parse_pod(b.pod("bench-pod", "bench", templates={"gpu": template}))
    matcher = DeviceMatcher()
    claims = resolve_pod_claims(snapshot, pod)
    device_outcomes(snapshot, claims, names, matcher)  # warm: CEL verdicts, node device lists
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        claims = resolve_pod_claims(snapshot, pod)
        outcomes = device_outcomes(snapshot, claims, names, matcher)
        timings.append(time.perf_counter() - started)
    feasible = len(outcomes.allocations)
    return {
        "p50_ms": statistics.median(timings) * 1000,
        "p90_ms": percentile(timings, 0.9) * 1000,
        "p99_ms": percentile(timings, 0.99) * 1000,
        "feasible": feasible,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--templates", nargs="+", default=["two-big", "one", "four", "pair-matched"])
    parser.add_argument("--repeat", type=int, default=100)
    args = parser.parse_args()
    print(f"{'nodes':>6} {'template':<14} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'feasible':>8}")
    for nodes in args.nodes:
        for template in args.templates:
            result = measure(nodes, template, max(5, args.repeat if nodes <= 1000 else args.repeat // 4))
            print(
                f"{nodes:>6} {template:<14} {result['p50_ms']:>8.2f} {result['p90_ms']:>8.2f} "
                f"{result['p99_ms']:>8.2f} {result['feasible']:>8}"
            )


if __name__ == "__main__":
    main()
