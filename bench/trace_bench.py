"""Placement on a production GPU trace: the experiment of "Beware of Fragmentation" (Weng et al., USENIX ATC 2023)
on its trace (Alibaba, 2023; ../shared/traces/openb-gpu-2023), with the paper's six policies as baselines beside
kube-scheduler alone and kube-scheduler with the extender.

Run: make bench-trace, or .venv/bin/python -m bench.trace_bench [--workloads default gpushare100 ...]
     [--policies FGD extender ...] [--seeds 1 2 ...] [--pods FILE] [--nodes FILE] [--ratio 1.3] [--jobs 2]

Per workload and policy: the share of the cluster's GPUs allocated when the tasks that arrived asked for 100 % and
for 130 % of them, the mean over the seeds, one line each:

    trace WORKLOAD POLICY alloc@100=X alloc@130=Y seeds=N

and the paper's own figure beside its policies (the simulator's expected_results/analysis_allo_discrete.csv,
mean of its 10 seeds). What the run models and what it leaves out: bench/trace_model.py, docs/trace.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.trace_model import Cluster, TraceNode, TracePod, read_nodes, read_pods, stream, typical_shapes
from bench.trace_policies import (
    ALL_POLICIES,
    STEERED,
    WHAT_IFS,
    BestFitPolicy,
    DotProductPolicy,
    ExtenderPolicy,
    ExtenderScoring,
    FGDPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
    KubeSchedulerPolicy,
    Policy,
    RandomPolicy,
    SteeredPolicy,
    unit_fit_values,
)

TRACE_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "openb-gpu-2023"
WORKLOADS = ("default", "gpushare100", "multigpu50", "gpuspec33")
RATIO = 1.3
DEFAULT_SEEDS = tuple(range(101, 111))  # reported seeds; the ranking was designed on seeds 1-5 (docs/trace.md)

# The paper's figures (GPUs allocated in % at 100 % / 130 % arrived, mean of 10 seeds).
PAPER = {
    "default": {
        "Random": (86.30, 87.47),
        "DotProd": (90.62, 90.85),
        "GpuClustering": (91.65, 91.88),
        "GpuPacking": (91.78, 92.00),
        "BestFit": (92.86, 93.08),
        "FGD": (95.23, 95.39),
    },
    "gpushare100": {
        "Random": (78.90, 79.44),
        "DotProd": (81.98, 82.42),
        "GpuClustering": (82.22, 82.65),
        "GpuPacking": (82.13, 82.57),
        "BestFit": (84.62, 85.01),
        "FGD": (86.64, 86.90),
    },
    "multigpu50": {
        "Random": (81.28, 90.27),
        "DotProd": (94.73, 94.85),
        "GpuClustering": (95.69, 95.81),
        "GpuPacking": (96.06, 96.18),
        "BestFit": (95.62, 95.74),
        "FGD": (97.09, 97.18),
    },
    "gpuspec33": {
        "Random": (83.87, 86.46),
        "DotProd": (79.82, 89.14),
        "GpuClustering": (81.09, 92.12),
        "GpuPacking": (82.22, 93.22),
        "BestFit": (80.39, 93.09),
        "FGD": (87.84, 94.55),
    },
}


@dataclass(frozen=True)
class RunResult:
    alloc_at: dict[int, float]  # arrived % -> allocated %
    placed: int
    failed: int
    seconds: float


def allocation_at(arrived: np.ndarray, allocated: np.ndarray, capacity: int, points: Sequence[int]) -> dict[int, float]:
    """The paper's figure: the mean share allocated over the records whose arrived share rounds to the point (or
    lies within one point of it when none does), as merge_alloc_discrete.py computes it."""
    arrived_pct = np.round(arrived / capacity * 100.0)
    allocated_pct = np.round(allocated / capacity * 100.0, 2)
    out = {}
    for point in points:
        chosen = allocated_pct[arrived_pct == point]
        if chosen.size == 0:
            chosen = allocated_pct[(arrived_pct >= point - 1) & (arrived_pct <= point + 1)]
        out[point] = float(np.round(chosen.mean(), 2)) if chosen.size else float("nan")
    return out


def run(
    nodes: Sequence[TraceNode],
    tasks: Sequence[TracePod],
    make_policy: Callable[[Cluster], Policy],
    seed: int,
    points: Sequence[int] = (100, 130),
) -> RunResult:
    """One stream placed by one policy: after each task, what has arrived and what is allocated."""
    started = time.perf_counter()
    cluster = Cluster(nodes)
    policy = make_policy(cluster)
    rng = np.random.default_rng([seed, 1])  # ties: their own stream, apart from the stream's order
    arrived = np.zeros(len(tasks), dtype=np.int64)
    allocated = np.zeros(len(tasks), dtype=np.int64)
    total = placed = 0
    for index, pod in enumerate(tasks):
        total += pod.total_milli
        feasible = np.flatnonzero(cluster.feasible(pod))
        if feasible.size:
            node, gpus = policy.choose(cluster, pod, feasible, rng)
            cluster.place(pod, node, gpus)
            placed += 1
        arrived[index] = total
        allocated[index] = cluster.used_milli
    return RunResult(
        allocation_at(arrived, allocated, cluster.capacity_milli, points),
        placed,
        len(tasks) - placed,
        time.perf_counter() - started,
    )


def policy_factory(name: str, workload: Sequence[TracePod]) -> Callable[[Cluster], Policy]:
    """The policy named, built for a cluster (FGD's target workload from the workload's own tasks)."""
    simple: dict[str, Callable[[], Policy]] = {
        "Random": RandomPolicy,
        "DotProd": DotProductPolicy,
        "GpuClustering": GpuClusteringPolicy,
        "GpuPacking": GpuPackingPolicy,
        "BestFit": BestFitPolicy,
        "kube-scheduler": KubeSchedulerPolicy,
    }
    if name in simple:
        make = simple[name]
        return lambda _cluster: make()
    if name.startswith("FGD") and name in ("FGD", *WHAT_IFS):
        target = typical_shapes(workload)
        first_fit_gpu, random_ties = "first-fit" in name, "random-ties" in name
        return lambda cluster: FGDPolicy(cluster, target, first_fit_gpu, random_ties)
    if name == "kube-scheduler-MostAllocated":
        return lambda _cluster: KubeSchedulerPolicy(most_allocated=True)
    if name in STEERED:
        cpu_only, whole = STEERED[name]
        return lambda _cluster: SteeredPolicy(name, cpu_only, whole)
    if name == "extender":
        return lambda _cluster: ExtenderPolicy(ExtenderScoring(unit_fit_values))
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(ALL_POLICIES + WHAT_IFS)}")


def trace_files(directory: Path, required: bool) -> Path | None:
    if (directory / "openb_node_list_gpu_node.csv").is_file():
        return directory
    if required:
        sys.exit(f"trace not found in {directory} (set TRACE_DIR or pass --trace-dir)")
    return None


def run_seeds(
    nodes: Sequence[TraceNode], workload: str, pods: Sequence[TracePod], name: str, seeds: Sequence[int], ratio: float
) -> list[RunResult]:
    """One workload and policy over the seeds (a unit of work for --jobs)."""
    capacity = sum(node.gpus for node in nodes) * 1000
    make = policy_factory(name, pods)
    return [run(nodes, stream(pods, capacity, ratio, seed), make, seed) for seed in seeds]


def report(workload: str, name: str, seeds: Sequence[int], results: Sequence[RunResult], verbose: bool) -> None:
    if verbose:
        for seed, result in zip(seeds, results, strict=True):
            print(
                f"  {workload} {name} seed={seed} alloc@100={result.alloc_at[100]:.2f} "
                f"alloc@130={result.alloc_at[130]:.2f} placed={result.placed} failed={result.failed} "
                f"{result.seconds:.1f}s"
            )
    at100 = statistics.fmean(r.alloc_at[100] for r in results)
    at130 = statistics.fmean(r.alloc_at[130] for r in results)
    paper = PAPER.get(workload, {}).get(name)
    note = f"  paper={paper[0]:.2f}/{paper[1]:.2f}" if paper else ""
    print(f"trace {workload} {name} alloc@100={at100:.2f} alloc@130={at130:.2f} seeds={len(results)}{note}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace-dir", type=Path, default=Path(os.environ.get("TRACE_DIR", TRACE_DIR)))
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    parser.add_argument(
        "--policies", nargs="+", default=list(ALL_POLICIES), choices=list(ALL_POLICIES + WHAT_IFS), metavar="POLICY"
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=list(DEFAULT_SEEDS))
    parser.add_argument("--pods", type=Path, help="another pod list of the trace's format (its workload: the name)")
    parser.add_argument("--nodes", type=Path, help="another node list (default: the trace's GPU nodes)")
    parser.add_argument("--ratio", type=float, default=RATIO)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: one per core)")
    parser.add_argument("--verbose", action="store_true", help="a line per seed as well")
    args = parser.parse_args(argv)
    pods_env = os.environ.get("TRACE_PODS")
    pods_file = args.pods or (Path(pods_env) if pods_env else None)
    directory = trace_files(args.trace_dir, required=pods_file is None or args.nodes is None)
    nodes = read_nodes(args.nodes or (directory or args.trace_dir) / "openb_node_list_gpu_node.csv")
    if pods_file is not None:
        workloads = {pods_file.stem.removeprefix("openb_pod_list_"): read_pods(pods_file)}
    else:
        assert directory is not None
        workloads = {name: read_pods(directory / f"openb_pod_list_{name}.csv") for name in args.workloads}
    started = time.perf_counter()
    work = [(workload, name) for workload in workloads for name in args.policies]
    if args.jobs <= 1:
        for workload, name in work:
            results = run_seeds(nodes, workload, workloads[workload], name, args.seeds, args.ratio)
            report(workload, name, args.seeds, results, args.verbose)
    else:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            futures = [
                pool.submit(run_seeds, nodes, workload, workloads[workload], name, args.seeds, args.ratio)
                for workload, name in work
            ]
            for (workload, name), future in zip(work, futures, strict=True):  # in order, as each is done
                report(workload, name, args.seeds, future.result(), args.verbose)
    print(f"# {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
