"""Every metric the alert rules, their promtool tests and the dashboard read is one a real extender exports.

Two real `dra-extender serve` processes, scraped on their metrics listener as Prometheus scrapes them: the
embedded demo cluster, and the same demo cluster followed live from a scripted API server (tests/support/
fake_api.py) whose ClusterQueues report Kueue's reservation, so the watch counters and the drift gauges are
exported too. Filter, prioritize and a malformed request go through the demo first. A renamed metric then fails
here, not silently on an operator's dashboard. That the expressions parse: tests/deploy/test_monitoring_rules.py.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.control_plane import free_port
from tests.monitoring.expressions import (
    ROOT,
    dashboard_expressions,
    exposed_names,
    load_dashboard,
    load_rules,
    metric_names,
    rule_expressions,
    test_series_names,
)
from tests.support.fake_api import FakeApiServer

pytestmark = pytest.mark.slow  # starts `dra-extender serve` (gunicorn) twice

BIN = Path(sys.executable).parent / "dra-extender"
DEMO = ROOT / "extender" / "demo"
DEMO_NODES = ["gpu-od-1", "gpu-od-2", "gpu-spot-1", "gpu-spot-2"]


def http(url: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class Served:
    """A `dra-extender serve` process with its scheduling and metrics listeners."""

    def __init__(self, workdir: Path, source_args: list[str]) -> None:
        self.listen, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        self.base, self.metrics = f"http://{self.listen}", f"http://{metrics}"
        self.log = workdir / "serve.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [str(BIN), "serve", *source_args, "--listen", self.listen, "--metrics-listen", metrics],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(workdir)},  # the journal's folder
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if http(f"{self.metrics}/readyz")[0] == 200:
                    return
            except OSError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise AssertionError(f"the extender did not get ready:\n{self.log.read_text()}")

    def scrape(self) -> str:
        status, body = http(f"{self.metrics}/metrics")
        assert status == 200
        return body.decode()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def demo_pod() -> dict[str, Any]:
    pod: dict[str, Any] = yaml.safe_load((DEMO / "pod-two-gpus.yaml").read_text())
    pod["metadata"]["uid"] = "monitoring-demo-pod"
    return pod


def drive_verbs(served: Served) -> None:
    """What kube-scheduler sends: a filter, the prioritize after it, and one malformed request (400)."""
    args = json.dumps({"Pod": demo_pod(), "NodeNames": DEMO_NODES}).encode()
    status, body = http(f"{served.base}/filter", args)
    assert status == 200 and json.loads(body)["NodeNames"], body
    assert http(f"{served.base}/prioritize", args)[0] == 200
    assert http(f"{served.base}/filter", b"{")[0] == 400


def demo_objects_with_kueue_reservations() -> list[dict[str, Any]]:
    """The demo cluster, its ClusterQueues reporting what Kueue reserved (status.flavorsReservation)."""
    objects = [copy.deepcopy(o) for o in yaml.safe_load_all((DEMO / "cluster.yaml").read_text()) if o]
    for obj in objects:
        if obj["kind"] == "ClusterQueue":
            flavors = obj["spec"]["resourceGroups"][0]["flavors"]
            obj["status"] = {
                "flavorsReservation": [
                    {"name": f["name"], "resources": [{"name": "example.com/gpu", "total": "1"}]} for f in flavors
                ]
            }
    return objects


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    demo = Served(tmp_path_factory.mktemp("demo"), [])
    try:
        drive_verbs(demo)
        demo_text = demo.scrape()
    finally:
        demo.stop()
    api = FakeApiServer().start()
    workdir = tmp_path_factory.mktemp("live")
    try:
        api.put_all(*demo_objects_with_kueue_reservations())
        live = Served(workdir, ["--kubeconfig", str(api.kubeconfig(workdir))])
        try:
            live_text = live.scrape()
        finally:
            live.stop()
    finally:
        api.close()
    yield {"demo": demo_text, "live": live_text}


@pytest.fixture(scope="module")
def exported(scrapes: dict[str, str]) -> set[str]:
    return exposed_names(scrapes["demo"]) | exposed_names(scrapes["live"])


def test_the_scrapes_hold_what_the_alerts_are_about(scrapes: dict[str, str], exported: set[str]) -> None:
    """Not vacuous: the verbs were timed, the watches counted, the drift computed, the restored counter declared."""
    demo, live = exposed_names(scrapes["demo"]), exposed_names(scrapes["live"])
    assert 'dra_extender_request_duration_seconds_bucket{le="0.5",verb="filter"}' in scrapes["demo"]
    assert 'dra_extender_requests_total{code="400",verb="filter"}' in scrapes["demo"]
    assert "dra_extender_watch_relists_total" in live and "dra_extender_watch_relists_total" not in demo
    assert (
        'dra_extender_quota_drift{cluster_queue="team-a",flavor="on-demand",resource="example.com/gpu"}'
        in (scrapes["live"])
    )
    assert "dra_extender_reservations_restored_released_total" in exported


@pytest.mark.parametrize("source", ["alert rules", "dashboard"])
def test_every_expression_names_only_exported_metrics(source: str, exported: set[str]) -> None:
    expressions = rule_expressions(load_rules()) if source == "alert rules" else dashboard_expressions(load_dashboard())
    assert expressions
    for where, expr in expressions.items():
        names = metric_names(expr)
        assert names or expr.startswith("vector("), f"{where}: no metric in {expr}"
        assert names <= exported, f"{where}: {sorted(names - exported)} not exported by the extender ({expr})"


def test_the_promtool_tests_feed_exported_series(exported: set[str]) -> None:
    """A unit test over a series the extender never exports would pass and prove nothing."""
    for name, alerts in test_series_names().items():
        assert name in exported, f"{name} (tests of {sorted(alerts)}) is not exported by the extender"


def test_the_name_check_catches_a_renamed_metric(exported: set[str]) -> None:
    renamed = 'histogram_quantile(0.99, sum by (le) (rate(dra_extender_request_seconds_bucket{verb="filter"}[5m])))'
    assert metric_names(renamed) == {"dra_extender_request_seconds_bucket"}
    assert not metric_names(renamed) <= exported


def test_metric_names_reads_selectors_not_labels_functions_or_strings() -> None:
    expr = (
        'sum without (code) (rate(a_total{verb=~"filter|x_y"}[5m] offset 1m)) / on (pod) group_left (node) '
        'label_replace(b_bucket, "dst", "$1", "src", "(.*)") > bool 2.5e3 and c unless d:recorded'
    )
    assert metric_names(expr) == {"a_total", "b_bucket", "c", "d:recorded"}
