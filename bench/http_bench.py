"""filter + prioritize over HTTP on loopback, as kube-scheduler calls them (NodeNames, one connection).

Run: .venv/bin/python -m bench.http_bench [--nodes 1000] [--pairs 300]
Starts `dra-extender serve --snapshot` on a generated cluster in its own process (the client is another
process, like kube-scheduler, and encodes with orjson so that the client's own JSON work stays small next to
the server's; both share the machine's cores), then reports per-pair latency (p50/p99) and throughput for a pod without
claims (the HTTP + JSON floor), a pod with a 2-GPU claim, and the same pod under ClusterQueue quota, and the
server's CPU time per pair (its processes' user + system time from /proc: steadier than wall-clock figures on
a shared machine, and what the extender costs kube-scheduler's node beside the latency).
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import yaml

from testkit import builders as b
from testkit.clusters import cluster_objects

BIN = Path(sys.executable).parent / "dra-extender"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the process and its children that are running now (gunicorn's master and worker)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    ticks = 0
    for process in (pid, *map(int, children)):
        fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def run_pairs(
    port: int, pod_factory: Callable[[int], dict], names: list[str], pairs: int, server_pid: int
) -> dict[str, float]:
    cpu_before = cpu_seconds(server_pid)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"}
    latencies = []
    started_all = time.perf_counter()
    for index in range(pairs):
        body = orjson.dumps({"Pod": pod_factory(index), "NodeNames": names, "Nodes": None})
        started = time.perf_counter()
        connection.request("POST", "/filter", body, headers)
        filtered = orjson.loads(connection.getresponse().read())
        passed = filtered["NodeNames"] or []
        if len(passed) > 1:
            body = orjson.dumps({"Pod": pod_factory(index), "NodeNames": passed, "Nodes": None})
            connection.request("POST", "/prioritize", body, headers)
            connection.getresponse().read()
        latencies.append(time.perf_counter() - started)
    elapsed = time.perf_counter() - started_all
    connection.close()
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "pairs_per_s": pairs / elapsed,
        "server_cpu_ms": (cpu_seconds(server_pid) - cpu_before) / pairs * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=300)
    args = parser.parse_args()
    objects = cluster_objects(args.nodes, with_quota=True)
    names = sorted(node["metadata"]["name"] for node in objects["Node"])
    with tempfile.TemporaryDirectory() as workdir:
        snapshot = Path(workdir) / "cluster.yaml"
        snapshot.write_text(yaml.safe_dump_all([obj for kind in objects.values() for obj in kind]))
        config = Path(workdir) / "config.yaml"
        config.write_text("logging: {level: WARNING}\nreservations: {ttlSeconds: 3600}\n")
        port = free_port()
        server = subprocess.Popen(
            [str(BIN), "serve", "--snapshot", str(snapshot), "--config", str(config), "--listen", f"127.0.0.1:{port}"],
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                    connection.request("GET", "/readyz")
                    if connection.getresponse().status == 200:
                        break
                except OSError:
                    time.sleep(0.2)
            cases = {
                "no claims": lambda i: b.pod(f"plain-{i}", "bench"),
                "2-GPU claim": lambda i: b.pod(f"gpu-{i}", "bench", templates={"gpu": "two-big"}),
                "2-GPU claim + quota": lambda i: b.pod(f"q-{i}", "bench", templates={"gpu": "two-big"}, queue="q"),
            }
            for pod_factory in cases.values():  # warm-up: CEL verdicts, per-node caches
                run_pairs(port, pod_factory, names, 5, server.pid)
            results = {
                label: run_pairs(port, factory, names, args.pairs, server.pid) for label, factory in cases.items()
            }
        finally:
            server.terminate()
            server.wait(timeout=10)
    floor = results["no claims"]["p50_ms"]
    print(f"filter+prioritize over HTTP, {args.nodes} nodes x 8 GPUs, NodeNames, {args.pairs} pairs per case")
    cpu_floor = results["no claims"]["server_cpu_ms"]
    print(f"{'case':<22} {'p50 ms':>8} {'p99 ms':>8} {'pairs/s':>8} {'x floor':>8} {'cpu ms':>8} {'x floor':>8}")
    for label, result in results.items():
        print(
            f"{label:<22} {result['p50_ms']:>8.2f} {result['p99_ms']:>8.2f} {result['pairs_per_s']:>8.1f} "
            f"{result['p50_ms'] / floor:>8.2f} {result['server_cpu_ms']:>8.2f} "
            f"{result['server_cpu_ms'] / cpu_floor:>8.2f}"
        )
    print("cpu ms: the server's CPU time per pair (user + system, from /proc)")


if __name__ == "__main__":
    main()
