"""`dra-extender serve` as a real process on a small one-flavor cluster, for the tests that drive its server
over sockets (tests/transport/test_hostile_clients.py, tests/transport/test_direct_http.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testkit import builders as b
from testkit.control_plane import free_port
from testkit.scenarios import cluster_queue, flavor, kueue_config, local_queue, nodes_in_flavor, templates

BIN = Path(sys.executable).parent / "dra-extender"


@dataclass(frozen=True)
class Served:
    port: int  # the scheduling listener
    diagnostics_port: int
    pid: int  # gunicorn's master
    log: Path


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"serve exited: {log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"not ready in time: {log.read_text()}")


@contextlib.contextmanager
def serving(workdir: Path, nodes: int, config: dict[str, Any], *args: str) -> Iterator[Served]:
    """`nodes` nodes of 8 GPUs in flavor on-demand (node names on-demand-0...), queue team-a with ample quota;
    `config` is the extender config, `args` more command-line arguments. Stopped with SIGTERM on exit."""
    objects = [
        b.namespace("team-a"),
        b.device_class(),
        kueue_config(),
        flavor("on-demand"),
        *nodes_in_flavor("on-demand", nodes, 8),
        cluster_queue("team-a", {"on-demand": {"nominal": 1000}}, cohort=None),
        local_queue("team-a", "team-a"),
        *templates("team-a"),
    ]
    snapshot = workdir / "cluster.yaml"
    snapshot.write_text(yaml.safe_dump_all(objects))
    config_file = workdir / "extender.yaml"
    config_file.write_text(yaml.safe_dump(config))
    port, diagnostics_port = free_port(), free_port()
    log = workdir / "server.log"
    process = subprocess.Popen(
        [
            str(BIN),
            "serve",
            "--snapshot",
            str(snapshot),
            "--config",
            str(config_file),
            "--listen",
            f"127.0.0.1:{port}",
            "--diagnostics-listen",
            f"127.0.0.1:{diagnostics_port}",
            *args,
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        _wait_ready(f"http://127.0.0.1:{diagnostics_port}", process, log)
        yield Served(port, diagnostics_port, process.pid, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
