"""Our device-feasibility filter against the upstream structured allocator, on the same generated clusters.

Run: .venv/bin/python -m bench.compare_upstream [--nodes 100 1000 5000] [--pods-growth 0 20000 100000]

For N nodes x 8 GPUs with half of them allocated (testkit/clusters.py), and three pods:
- one:   one claim for 1 GPU (template "one"),
- four:  one claim for 4 GPUs (template "four"),
- pair:  two claims, one of them carrying a matchAttribute constraint over two requests (templates
         "pair-matched" + "one"),
it times one whole decision, every node of the snapshot:
- ours: `device_outcomes` in-process, as the filter verb calls it. "cold" is the first pod after the selector
  memo and free-device index were emptied (the first pod of a process, or after every slice changed); "p50"/"p90"
  are the next pods (repeats), the steady state of a long-lived extender.
- upstream: the oracle's -bench mode (tests/oracle): NewAllocator + Allocate on every node, one node after
  another, per pod (kube-scheduler filters nodes in parallel; this is the sequential cost). Two feature sets:
  "stable" = the extender's documented set (consumableCapacity off), which selects upstream's stable allocator,
  and "incub." = Kubernetes 1.37 defaults, which select the incubating allocator.
Each cluster size runs in a fresh Python process, so that the RSS column is that size's alone; the oracle's
RSS is its peak as a child process. A second table shows how our time moves with the number of pods in the
cluster (filler pods bound to nodes). Numbers from one run on whatever machine this is; not a test.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from extender.decisions.devices.feasibility import device_outcomes
from extender.decisions.devices.pod_claims import resolve_pod_claims
from extender.decisions.devices.selection import DeviceMatcher
from extender.state.collector import freeze_loaded_state, tune_for_large_heap
from extender.state.core import parse_pod
from testkit import builders as b
from testkit.builds.oracle import ensure_oracle_binary
from testkit.clusters import build_cluster, cluster_objects

PODS: dict[str, dict[str, str]] = {
    "one": {"gpu": "one"},
    "four": {"gpu": "four"},
    "pair": {"pair": "pair-matched", "extra": "one"},
}
PROJECT_FEATURES = {
    "adminAccess": True,
    "prioritizedList": True,
    "partitionableDevices": True,
    "deviceTaints": True,
    "consumableCapacity": False,
    "deviceBindingAndStatus": False,
}
UPSTREAM_PROFILES = {"stable": PROJECT_FEATURES, "incub.": {}}  # {}: the oracle's Kubernetes 1.37 defaults


def rss_mb() -> float:
    """Current resident set of this process (not the peak: earlier phases must not count)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


# --- upstream ----------------------------------------------------------------------------------------------------


def scenario(nodes: int, pods: int, pod_name: str, features: dict[str, bool]) -> dict[str, Any]:
    """The oracle's view of the same cluster: the pod's template claims become the generated claims."""
    objects = cluster_objects(nodes, pods=pods)
    templates = {t["metadata"]["name"]: t for t in objects["ResourceClaimTemplate"]}
    claims = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"bench-pod-{entry}", "namespace": "bench", "uid": f"uid-bench-pod-{entry}"},
            "spec": templates[template]["spec"]["spec"],
        }
        for entry, template in PODS[pod_name].items()
    ]
    return {
        "name": f"{nodes}-{pod_name}",
        "features": features,
        "nodes": objects["Node"],
        "resourceSlices": objects["ResourceSlice"],
        "deviceClasses": objects["DeviceClass"],
        "allocatedClaims": objects["ResourceClaim"],
        "claims": claims,
        "nodeNames": [node["metadata"]["name"] for node in objects["Node"]],
    }


def upstream_bench(document: dict[str, Any], bench_time_s: float, min_iterations: int) -> dict[str, Any]:
    """Run the oracle's -bench and return its JSON plus the child's peak RSS (wait4: this child only)."""
    args = [
        str(ensure_oracle_binary()),
        "-bench",
        f"-bench-time={bench_time_s}s",
        f"-bench-min-iters={min_iterations}",
    ]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(document))
    proc.stdin.close()
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"oracle -bench failed with exit code {proc.returncode}")
    result: dict[str, Any] = json.loads(out)
    result["rssMB"] = usage.ru_maxrss / 1024
    return result


# --- ours ---------------------------------------------------------------------------------------------------------


def measure_ours(nodes: int, pods: int, repeat: int) -> dict[str, Any]:
    """All three pods on one cluster of this size, in this process."""
    tune_for_large_heap()
    store = build_cluster(nodes, pods=pods)
    snapshot = store.snapshot()
    names = sorted(snapshot.nodes)
    freeze_loaded_state()
    results: dict[str, Any] = {"rssMB": 0.0, "pods": {}}
    for pod_name, templates in PODS.items():
        pod = parse_pod(b.pod("bench-pod", "bench", templates=templates))
        matcher = DeviceMatcher()
        started = time.perf_counter()
        claims = resolve_pod_claims(snapshot, pod)
        outcomes = device_outcomes(snapshot, claims, names, matcher)
        cold = time.perf_counter() - started
        timings = []
        for _ in range(repeat):
            started = time.perf_counter()
            claims = resolve_pod_claims(snapshot, pod)
            outcomes = device_outcomes(snapshot, claims, names, matcher)
            timings.append(time.perf_counter() - started)
        results["pods"][pod_name] = {
            "coldMs": cold * 1000,
            "p50Ms": statistics.median(timings) * 1000,
            "p90Ms": percentile(timings, 0.9) * 1000,
            "feasible": len(outcomes.allocations),
        }
        gc.collect()
    results["rssMB"] = rss_mb()
    return results


def worker(nodes: int, pods: int, repeat: int) -> None:
    print(json.dumps(measure_ours(nodes, pods, repeat)))


def in_fresh_process(nodes: int, pods: int, repeat: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.compare_upstream", "--worker", str(nodes), str(pods), str(repeat)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    answer: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return answer


# --- tables -------------------------------------------------------------------------------------------------------


def repeats_for(nodes: int) -> int:
    return 50 if nodes <= 100 else 20 if nodes <= 1000 else 6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--pods-growth", type=int, nargs="+", default=[0, 20000, 100000])
    parser.add_argument("--growth-nodes", type=int, default=1000)
    parser.add_argument("--bench-time", type=float, default=2.0, help="seconds per upstream measurement")
    parser.add_argument("--worker", type=int, nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return

    ensure_oracle_binary()
    print("Per decision = one pod, every node of the cluster (8 GPUs per node, 50% allocated); ms per decision.")
    print("ours: device_outcomes in-process; upstream: NewAllocator + Allocate per node (oracle -bench).")
    header = (
        f"{'nodes':>6} {'pod':<5}| {'ours cold':>9} {'ours p50':>9} {'ours p90':>9} {'us/node':>7} | "
        f"{'stable':>9} {'us/node':>7} | {'incub.':>9} {'us/node':>7} | {'ours/st':>7} {'ours/inc':>8} | "
        f"{'feasible o/st/inc':>17} | {'RSS ours':>8} {'st':>6} {'inc':>6}"
    )
    print(header)
    print("-" * len(header))
    for nodes in args.nodes:
        ours = in_fresh_process(nodes, 0, repeats_for(nodes))
        for pod_name in PODS:
            mine = ours["pods"][pod_name]
            up = {
                name: upstream_bench(scenario(nodes, 0, pod_name, features), args.bench_time, 3 if nodes > 1000 else 5)
                for name, features in UPSTREAM_PROFILES.items()
            }
            stable_ms = up["stable"]["decision"]["p50Ns"] / 1e6
            incubating_ms = up["incub."]["decision"]["p50Ns"] / 1e6
            print(
                f"{nodes:>6} {pod_name:<5}| {mine['coldMs']:>9.1f} {mine['p50Ms']:>9.2f} {mine['p90Ms']:>9.2f} "
                f"{mine['p50Ms'] * 1000 / nodes:>7.1f} | {stable_ms:>9.2f} {stable_ms * 1000 / nodes:>7.1f} | "
                f"{incubating_ms:>9.2f} {incubating_ms * 1000 / nodes:>7.1f} | "
                f"{mine['p50Ms'] / stable_ms:>7.3f} {mine['p50Ms'] / incubating_ms:>8.3f} | "
                f"{mine['feasible']:>5}/{up['stable']['feasibleNodes']}/{up['incub.']['feasibleNodes']:<5} | "
                f"{ours['rssMB']:>6.0f}MB {up['stable']['rssMB']:>4.0f}MB {up['incub.']['rssMB']:>4.0f}MB"
            )
    print()
    print(f"Our warm p50 for pod 'one' on {args.growth_nodes} nodes as bound pods are added to the cluster:")
    print(f"{'pods':>7} | {'ours p50':>9} {'ours cold':>9} | {'RSS ours':>8}")
    for pods in args.pods_growth:
        ours = in_fresh_process(args.growth_nodes, pods, repeats_for(args.growth_nodes))
        mine = ours["pods"]["one"]
        print(f"{pods:>7} | {mine['p50Ms']:>7.2f}ms {mine['coldMs']:>7.1f}ms | {ours['rssMB']:>6.0f}MB")


if __name__ == "__main__":
    main()
