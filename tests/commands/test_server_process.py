"""The real thing: `dra-extender serve` under gunicorn, driven over HTTP like kube-scheduler drives it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from extender.commands.outcomes import EXIT_INPUT
from testkit import builders as b
from testkit.control_plane import free_port
from testkit.scenarios import cluster_queue, flavor, gpu_pod, kueue_config, local_queue, nodes_in_flavor, templates
from tests.support.paths import ROOT

pytestmark = pytest.mark.slow  # starts `dra-extender serve` (gunicorn) and the CLI as real processes

BIN = Path(sys.executable).parent / "dra-extender"


def request(url: str, body: object | None = None, *, raw: bytes | None = None) -> tuple[int, object]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            payload = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        payload = error.read()
        status = error.code
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload.decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("serve")
    objects = [
        b.namespace("team-a"),
        b.device_class(),
        kueue_config(),
        flavor("on-demand"),
        *nodes_in_flavor("on-demand", 3, 4),
        cluster_queue("team-a", {"on-demand": {"nominal": 4}}, cohort=None),
        local_queue("team-a", "team-a"),
        *templates("team-a"),
    ]
    snapshot = workdir / "cluster.yaml"
    snapshot.write_text(yaml.safe_dump_all(objects))
    port = free_port()
    log = (workdir / "server.log").open("w")
    process = subprocess.Popen(
        [
            str(BIN),
            "serve",
            "--snapshot",
            str(snapshot),
            "--listen",
            f"127.0.0.1:{port}",
            "--config",
            str(ROOT / "config" / "extender.yaml"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if request(f"{base}/readyz")[0] == 200:
                break
        except OSError:
            time.sleep(0.1)
    else:
        process.kill()
        raise AssertionError((workdir / "server.log").read_text())
    yield base, workdir / "server.log"
    process.terminate()
    process.wait(timeout=10)


NODES = ["on-demand-0", "on-demand-1", "on-demand-2"]


def test_consecutive_pods_share_quota_through_reservations(server):
    base, _ = server
    first = request(f"{base}/filter", {"Pod": gpu_pod("p1"), "NodeNames": NODES})[1]
    second = request(f"{base}/filter", {"Pod": gpu_pod("p2"), "NodeNames": NODES})[1]
    third = request(f"{base}/filter", {"Pod": gpu_pod("p3"), "NodeNames": NODES})[1]
    assert first["NodeNames"] == NODES and second["NodeNames"] == NODES
    assert third["NodeNames"] == []
    assert all("quota exhausted" in reason for reason in third["FailedNodes"].values())
    assert len(set(third["FailedNodes"].values())) == 1  # one string for every node: the event aggregates


def test_bad_input_never_500(server):
    base, _ = server
    for raw in (b"{", b"null", b'{"Pod": []}', b'{"Pod": {"metadata": {"name": 1}}, "NodeNames": []}', b"\xff\xfe"):
        status, body = request(f"{base}/filter", raw=raw)
        assert status == 400, (raw, body)
        assert body["error"]


def test_metrics_and_first_log_line(server):
    base, log_path = server
    status, text = request(f"{base}/metrics")
    assert status == 200 and "dra_extender_requests_total" in text
    written = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert any("serving snapshot" in line["msg"] for line in written[:3])  # once the snapshot is loaded


def test_demo_served_without_source_flag(tmp_path):
    port = free_port()
    log_path = tmp_path / "demo.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [str(BIN), "serve", "--listen", f"127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                status, body = request(f"http://127.0.0.1:{port}/readyz")
                if status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        assert body["source"] == "the embedded demo cluster"
        written = [json.loads(line)["msg"] for line in log_path.read_text().splitlines()]
        assert any("serving the embedded demo cluster" in msg for msg in written[:3])
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_explain_command_table_and_json(tmp_path):
    demo_pod = ROOT / "extender" / "demo" / "pod-two-gpus.yaml"
    table = subprocess.run([str(BIN), "explain", str(demo_pod)], capture_output=True, text=True, check=True)
    lines = table.stdout.splitlines()
    assert lines[0] == "Pod team-a/train-1  strategy=MostAllocated"
    assert any(line.startswith("1 ") and "pass" in line for line in lines)
    report = json.loads(
        subprocess.run(
            [str(BIN), "explain", str(demo_pod), "-o", "json"], capture_output=True, text=True, check=True
        ).stdout
    )
    assert report["quota"]["chosenFlavor"] == "on-demand"
    assert [n["node"] for n in report["nodes"] if n["passed"]] == ["gpu-od-1", "gpu-od-2"]


def test_serve_with_a_snapshot_that_cannot_be_read_never_says_serving(tmp_path):
    result = subprocess.run(
        [str(BIN), "serve", "--snapshot", str(tmp_path / "absent.yaml"), "--listen", f"127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    written = [json.loads(line) for line in result.stderr.splitlines()]
    assert result.returncode == EXIT_INPUT and not any("serving" in line["msg"] for line in written)
    assert written[-1]["msg"] == f"error: cannot read snapshot {tmp_path / 'absent.yaml'}: No such file or directory"
    empty = tmp_path / "empty.yaml"
    empty.write_text("---\n", encoding="utf-8")
    result = subprocess.run(
        [str(BIN), "serve", "--snapshot", str(empty), "--listen", f"127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    written = [json.loads(line) for line in result.stderr.splitlines()]
    assert result.returncode == EXIT_INPUT and not any("serving" in line["msg"] for line in written)
    assert written[-1]["msg"].startswith(f"error: snapshot {empty} holds no Node and no ClusterQueue")


def test_bad_snapshot_and_config_fail_clearly(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": [1]}}))
    result = subprocess.run(
        [str(BIN), "explain", "-", "--snapshot", str(bad)],
        input="kind: Pod\nmetadata: {name: p}",
        capture_output=True,
        text=True,
    )
    assert result.returncode == EXIT_INPUT and "document 0" in result.stderr and "metadata.labels" in result.stderr
    config = tmp_path / "config.yaml"
    config.write_text("scoring: {strategy: Nope}\n")
    result = subprocess.run(
        [str(BIN), "explain", "-", "--config", str(config)],
        input="kind: Pod\nmetadata: {name: p}",
        capture_output=True,
        text=True,
    )
    assert result.returncode == EXIT_INPUT and "scoring.strategy" in result.stderr
