"""filter + prioritize over HTTP on loopback, as kube-scheduler calls them (NodeNames, one connection).

Run: .venv/bin/python -m bench.http_bench [--nodes 1000] [--pairs 300]
Starts `dra-extender serve --snapshot` on a generated cluster in its own process (the client is another
process, like kube-scheduler, and encodes with orjson so that the client's own JSON work stays small next to
the server's; both share the machine's cores), then reports per-pair latency (p50/p99) and throughput for a pod without
claims (the HTTP + JSON floor), a pod with a 2-GPU claim, and the same pod under ClusterQueue quota.
"""

from __future__ import annotations

import argparse
import http.client
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


def run_pairs(port: int, pod_factory: Callable[[int], dict], names: list[str], pairs: int) -> dict[str, float]:
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
                run_pairs(port, pod_factory, names, 5)
            results = {label: run_pairs(port, factory, names, args.pairs) for label, factory in cases.items()}
        finally:
            server.terminate()
            server.wait(timeout=10)
    floor = results["no claims"]["p50_ms"]
    print(f"filter+prioritize over HTTP, {args.nodes} nodes x 8 GPUs, NodeNames, {args.pairs} pairs per case")
    print(f"{'case':<22} {'p50 ms':>8} {'p99 ms':>8} {'pairs/s':>8} {'x floor':>8}")
    for label, result in results.items():
        print(
            f"{label:<22} {result['p50_ms']:>8.2f} {result['p99_ms']:>8.2f} {result['pairs_per_s']:>8.1f} "
            f"{result['p50_ms'] / floor:>8.2f}"
        )


if __name__ == "__main__":
    main()
