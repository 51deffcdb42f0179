"""filter + prioritize over HTTP on loopback, as kube-scheduler calls them (NodeNames, one connection).

Run: .venv/bin/python -m bench.http_bench [--nodes 1000] [--pairs 300]
Starts `dra-extender serve --snapshot` on a generated cluster in its own process (the client is another
process, like kube-scheduler, and encodes with orjson so that the client's own JSON work stays small next to
the server's; both share the machine's cores), then reports per-pair latency (p50/p99) and throughput for a pod without
claims (the HTTP + JSON floor), a pod with a 2-GPU claim, and the same pod under ClusterQueue quota (its
reservations pile up: no pod ever binds), the cases taking turns pair by pair on their own connections, and the
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
from typing import Any

import orjson
import yaml

from testkit import builders as b
from testkit.clusters import cluster_objects

BIN = Path(sys.executable).parent / "dra-extender"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


class Case:
    """One kind of pod, asked about over its own connection (kube-scheduler keeps one)."""

    def __init__(self, port: int, pod_factory: Callable[[int], dict[str, Any]]) -> None:
        self.pod_factory = pod_factory
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.latencies: list[float] = []  # from the filter request sent to the prioritize answer read
        self.pair_seconds: list[float] = []  # the whole pair, the client's encoding and decoding included
        self.cpu_seconds = 0.0  # the server's, over this case's pairs

    def pair(self, index: int, names: list[str]) -> None:
        headers = {"Content-Type": "application/json"}
        started_pair = time.perf_counter()
        body = orjson.dumps({"Pod": self.pod_factory(index), "NodeNames": names, "Nodes": None})
        started = time.perf_counter()
        self.connection.request("POST", "/filter", body, headers)
        filtered = orjson.loads(self.connection.getresponse().read())
        passed = filtered["NodeNames"] or []
        if len(passed) > 1:
            body = orjson.dumps({"Pod": self.pod_factory(index), "NodeNames": passed, "Nodes": None})
            self.connection.request("POST", "/prioritize", body, headers)
            self.connection.getresponse().read()
        ended = time.perf_counter()
        self.latencies.append(ended - started)
        self.pair_seconds.append(ended - started_pair)

    def summary(self) -> dict[str, float]:
        pairs = len(self.latencies)
        return {
            "p50_ms": statistics.median(self.latencies) * 1000,
            "p99_ms": percentile(self.latencies, 0.99) * 1000,
            "pairs_per_s": pairs / sum(self.pair_seconds),
            "server_cpu_ms": self.cpu_seconds / pairs * 1000,
        }


def run_interleaved(cases: list[Case], names: list[str], pairs: int, server_pid: int) -> None:
    """Pair by pair, the cases in turn: a shared machine's slow spells (seconds long here) then fall on every
    case alike instead of on whichever case ran during them, and the ratios between cases hold within a run."""
    for index in range(pairs):
        for case in cases:
            cpu_before = cpu_seconds(server_pid)
            case.pair(index, names)
            case.cpu_seconds += cpu_seconds(server_pid) - cpu_before


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
            factories: dict[str, Callable[[int], dict[str, Any]]] = {
                "no claims": lambda i: b.pod(f"plain-{i}", "bench"),
                "2-GPU claim": lambda i: b.pod(f"gpu-{i}", "bench", templates={"gpu": "two-big"}),
                "2-GPU claim + quota": lambda i: b.pod(f"q-{i}", "bench", templates={"gpu": "two-big"}, queue="q"),
            }
            run_interleaved(  # warm-up: CEL verdicts, per-node caches
                [Case(port, lambda i, f=f: f(100_000 + i)) for f in factories.values()],  # type: ignore[misc]
                names,
                5,
                server.pid,
            )
            cases = {label: Case(port, factory) for label, factory in factories.items()}
            run_interleaved(list(cases.values()), names, args.pairs, server.pid)
            results = {label: case.summary() for label, case in cases.items()}
        finally:
            server.terminate()
            server.wait(timeout=10)
    floor = results["no claims"]["p50_ms"]
    print(f"filter+prioritize over HTTP, {args.nodes} nodes x 8 GPUs, NodeNames, {args.pairs} pairs per case,")
    print("the cases taking turns pair by pair")
    cpu_floor = results["no claims"]["server_cpu_ms"]
    print(f"{'case':<22} {'p50 ms':>8} {'p99 ms':>8} {'pairs/s':>8} {'x floor':>8} {'cpu ms':>8} {'x floor':>8}")
    for label, result in results.items():
        print(
            f"{label:<22} {result['p50_ms']:>8.2f} {result['p99_ms']:>8.2f} {result['pairs_per_s']:>8.1f} "
            f"{result['p50_ms'] / floor:>8.2f} {result['server_cpu_ms']:>8.2f} "
            f"{result['server_cpu_ms'] / cpu_floor:>8.2f}"
        )
    print("p50/p99: from the filter request to the prioritize answer; pairs/s: one over the mean whole pair, the")
    print("client's encoding included; cpu ms: the server's CPU time per pair (user + system, from /proc)")


if __name__ == "__main__":
    main()
