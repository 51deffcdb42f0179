"""The largest clusters: bench/sync_bench.py at several sizes, one fresh process each, in one table.

Run: .venv/bin/python -m bench.scale_bench [--sizes 5000:20000 15000:150000 65000:300000] [--events 300]
     [--verbs 200] [--clock cpu]
(`make bench-scale`; SCALE_ARGS passes arguments, e.g. SCALE_ARGS="--sizes 5000:20000 15000:150000".)

Each size is NODES:PODS (8 devices per node, half held by running pods' claims, the rest of the pods bound
without claims). Per size: time to ready, peak RSS and the state's share of it, one claim update and one pod
binding (apply + snapshot + usage delta, p50/p99), filter and filter + prioritize over kube-scheduler's 5 %
sample of the nodes (p50/p99). The last columns compare each size's per-event p99 with the smallest size's, in
the same run: the per-event cost should not grow with the cluster. A size that does not fit the machine (memory,
or `--timeout` seconds) is reported as such and the others still run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any

import orjson

DEFAULT_SIZES = ("5000:20000", "15000:150000", "65000:300000")


def run_size(nodes: int, pods: int, args: argparse.Namespace) -> dict[str, Any] | str:
    command = [
        sys.executable,
        "-m",
        "bench.sync_bench",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--events",
        str(args.events),
        "--verbs",
        str(args.verbs),
        "--clock",
        args.clock,
        "--json",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"not finished within {args.timeout:g} s"
    if done.returncode != 0:
        return f"failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:] or ''}"
    result: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", nargs="+", default=list(DEFAULT_SIZES), help="NODES:PODS, smallest first")
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--verbs", type=int, default=200)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per size")
    args = parser.parse_args()
    rows: list[tuple[str, dict[str, Any] | str]] = []
    for size in args.sizes:
        nodes, _, pods = size.partition(":")
        result = run_size(int(nodes), int(pods or 0), args)
        rows.append((size, result))
        print(f"{size}: {orjson.dumps(result).decode() if isinstance(result, dict) else result}", flush=True)
    base = next((result for _, result in rows if isinstance(result, dict)), None)
    print()
    print(
        "| nodes / pods | ready | peak RSS (state) | claim update p50 / p99 | pod update p50 / p99 | "
        "filter p50 / p99 (candidates) | filter + prioritize p50 / p99 | event p99 vs first size |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for size, result in rows:
        if not isinstance(result, dict):
            print(f"| {size.replace(':', ' / ')} | {result} | | | | | | |")
            continue
        claim, pod = result["claim_update_ms"], result["pod_update_ms"]
        verbs = "| |"
        if "filter_ms" in result:
            verbs = (
                f"| {result['filter_ms']['p50']} / {result['filter_ms']['p99']} ms ({result['candidates']}) "
                f"| {result['filter_prioritize_ms']['p50']} / {result['filter_prioritize_ms']['p99']} ms |"
            )
        ratios = ""
        if base is not None:
            claim_ratio = claim["p99"] / base["claim_update_ms"]["p99"]
            pod_ratio = pod["p99"] / base["pod_update_ms"]["p99"]
            ratios = f" claim {claim_ratio:.2f}x, pod {pod_ratio:.2f}x"
        print(
            f"| {result['nodes']} / {result['pods']} | {result['ready_s']} s "
            f"| {result['peak_rss_mb']} MB ({result['state_mb']} MB) "
            f"| {claim['p50']} / {claim['p99']} ms | {pod['p50']} / {pod['p99']} ms {verbs}{ratios} |"
        )


if __name__ == "__main__":
    main()
