"""The monitoring objects against a real kube-apiserver with prometheus-operator's CRDs installed: the chart's
PrometheusRule, ServiceMonitor and dashboard ConfigMap, and manifests/monitoring's ServiceMonitor, pass a
server-side dry-run (the CRDs' OpenAPI schemas validate every field, as they would on install); a threshold
the schema forbids is refused.

The CRDs come from the Go module github.com/prometheus-operator/prometheus-operator (its
example/prometheus-operator-crd/), downloaded into the Go module cache at test time and copied into the test's
temporary folder: nothing is committed. The control plane is the e2e harness's (testkit/builds/kubernetes.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testkit.builds import kubernetes as build
from testkit.builds import tools as tools_build
from testkit.builds.go import build_env, locate_go
from testkit.control_plane import ControlPlane, start_control_plane
from tests.support.paths import ROOT

pytestmark = pytest.mark.e2e

CHART = ROOT / "manifests" / "helm" / "dra-quota-scheduler"
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
CRD_FILES = ("monitoring.coreos.com_prometheusrules.yaml", "monitoring.coreos.com_servicemonitors.yaml")
IN_CI = os.environ.get("CI", "").lower() == "true"


def missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: a missing prerequisite is a failure)", pytrace=False)
    pytest.skip(reason)


def operator_crds(directory: Path) -> Path:
    """The two CRDs of the pinned prometheus-operator, copied out of the Go module cache into `directory`."""
    go = locate_go()
    if go is None:
        missing("the Go toolchain is needed to download prometheus-operator's CRDs")
    assert go is not None
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{PROMETHEUS_OPERATOR}@{PROMETHEUS_OPERATOR_VERSION}"],
        cwd=directory,
        env=build_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"go mod download {PROMETHEUS_OPERATOR}:\n{result.stdout}\n{result.stderr}"
    module = Path(json.loads(result.stdout)["Dir"])
    crds = directory / "crds"
    crds.mkdir()
    for name in CRD_FILES:
        shutil.copyfile(module / "example" / "prometheus-operator-crd" / name, crds / name)
    return crds


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    paths = build.binaries()
    if not all(os.access(p, os.X_OK) for p in paths.values()):
        pytest.skip("control-plane binaries not built yet (pytest tests/e2e builds them)")
    crds = operator_crds(tmp_path_factory.mktemp("prometheus-operator"))
    control_plane = start_control_plane(tmp_path_factory.mktemp("monitoring-apiserver"), paths, start_scheduler=False)
    try:
        established = control_plane.apply_crds(crds)
        assert established == ["prometheusrules.monitoring.coreos.com", "servicemonitors.monitoring.coreos.com"]
        yield control_plane
    finally:
        control_plane.stop()


@pytest.fixture(scope="module")
def tools() -> dict[str, Path]:
    try:
        return tools_build.ensure_tools()
    except tools_build.BuildError as error:
        missing(str(error))
        raise


def dry_run(plane: ControlPlane, manifest: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        missing("kubectl is not installed")
    assert kubectl is not None
    path = tmp_path / "manifest.yaml"
    path.write_text(manifest, encoding="utf-8")
    return subprocess.run(
        [kubectl, "--kubeconfig", str(plane.kubeconfig), "apply", "--dry-run=server", "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def helm_template(tools: dict[str, Path], *values: str) -> str:
    command = [str(tools["helm"]), "template", "dra-quota-scheduler", str(CHART), "--namespace", "kube-system"]
    for value in values:
        command += ["--set", value]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout


def test_the_charts_monitoring_objects_pass_server_side_dry_run(
    plane: ControlPlane, tools: dict[str, Path], tmp_path: Path
) -> None:
    manifest = helm_template(
        tools,
        "monitoring.prometheusRule.enabled=true",
        "monitoring.serviceMonitor.enabled=true",
        "monitoring.dashboard.enabled=true",
        "monitoring.prometheusRule.labels.release=kps",
    )
    result = dry_run(plane, manifest, tmp_path)
    assert result.returncode == 0, result.stderr
    applied = {line.split(" ")[0] for line in result.stdout.splitlines()}
    assert {
        "prometheusrule.monitoring.coreos.com/dra-quota-scheduler",
        "servicemonitor.monitoring.coreos.com/dra-quota-scheduler-metrics",
        "configmap/dra-quota-scheduler-dashboard",
        "deployment.apps/dra-quota-scheduler",
    } <= applied


def test_the_kustomize_service_monitor_passes_server_side_dry_run(
    plane: ControlPlane, tools: dict[str, Path], tmp_path: Path
) -> None:
    built = subprocess.run(
        [str(tools["kustomize"]), "build", str(ROOT / "manifests" / "monitoring")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    result = dry_run(plane, built, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "servicemonitor.monitoring.coreos.com/dra-quota-scheduler-metrics" in result.stdout


def test_the_crd_schema_refuses_a_threshold_that_is_no_duration(
    plane: ControlPlane, tools: dict[str, Path], tmp_path: Path
) -> None:
    """The dry-run validates: a `for` outside the CRD's duration pattern is refused (a rule written by hand: the
    chart's values schema refuses such a threshold before anything renders, tests/deploy/test_monitoring_chart.py)."""
    documents = [d for d in yaml.safe_load_all(helm_template(tools, "monitoring.prometheusRule.enabled=true")) if d]
    (rule,) = [d for d in documents if d["kind"] == "PrometheusRule"]
    rule["spec"]["groups"][0]["rules"][0]["for"] = "five"
    manifest = yaml.safe_dump(rule)
    result = dry_run(plane, manifest, tmp_path)
    assert result.returncode != 0
    assert "PrometheusRule" in result.stderr and "for" in result.stderr
