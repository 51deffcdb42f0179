"""The live source, the Binder and the deployment's RBAC against a real kube-apiserver.

The scripted server proves the watch logic; only a real API server proves the rest: TLS and token auth through
the client's configuration, discovery documents as Kubernetes writes them, that the manifests' read-only
ClusterRole really is enough (including list/watch of Kueue's ConfigMap by name, which RBAC only allows with a
metadata.name field selector) and really is no more. Uses the e2e harness's binaries when they are built
(`pytest tests/e2e` builds them); skipped otherwise.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.kube.api import ApiError, KubeApi, load_kubeconfig
from extender.kube.binder import Binder, BindingError
from extender.state.live import from_kubeconfig, write_snapshot
from extender.state.snapshot_file import load_snapshot_text
from extender.state.store import ClusterStore
from testkit.builds import kubernetes as build
from testkit.control_plane import KUEUE_CRD_DIR, ControlPlane, pod_manifest, start_control_plane, wait_until
from tests.support.fake_api import state_of
from tests.support.paths import ROOT

pytestmark = pytest.mark.e2e

MANIFESTS = ROOT / "manifests"
# The pod's account (kube-scheduler's container) and the extender container's own (manifests/serviceaccount.yaml)
NAMESPACE, SERVICE_ACCOUNT, EXTENDER_ACCOUNT = "kube-system", "dra-quota-scheduler", "dra-quota-extender"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    paths = build.binaries()
    if not all(os.access(p, os.X_OK) for p in paths.values()) or not KUEUE_CRD_DIR.is_dir():
        pytest.skip("control-plane binaries not built yet (pytest tests/e2e builds them) or ../shared missing")
    control_plane = start_control_plane(tmp_path_factory.mktemp("live-apiserver"), paths, start_scheduler=False)
    try:
        control_plane.apply_crds(KUEUE_CRD_DIR)
        for name in ("serviceaccount.yaml", "rbac-extender.yaml", "rbac-kube-scheduler.yaml"):
            control_plane.apply_manifest(MANIFESTS / name)
        control_plane.create_namespace("kueue-system", wait_for_service_account=False)
        for name in ("kueue-manager-config", "unrelated"):
            control_plane.core.create_namespaced_config_map(
                "kueue-system", {"metadata": {"name": name}, "data": {"controller_manager_config.yaml": ""}}
            )
        control_plane.create_device_class()
        control_plane.create_node("live-1", labels={"gpu.example.com/model": "a100"})
        control_plane.publish_gpus("live-1", count=2)
        yield control_plane
    finally:
        control_plane.stop()


def _account_kubeconfig(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory, account: str) -> Path:
    token = plane.core.create_namespaced_service_account_token(
        account, NAMESPACE, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    kubeconfig = yaml.safe_load(Path(plane.kubeconfig).read_text(encoding="utf-8"))
    kubeconfig["users"][0]["user"] = {"token": token}
    path = tmp_path_factory.mktemp("sa") / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def service_account_kubeconfig(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kube-scheduler's identity in the deployment: only what manifests/ grants it."""
    return _account_kubeconfig(plane, tmp_path_factory, SERVICE_ACCOUNT)


@pytest.fixture(scope="module")
def extender_kubeconfig(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The extender container's identity in the deployment: only what manifests/ grants it."""
    return _account_kubeconfig(plane, tmp_path_factory, EXTENDER_ACCOUNT)


def _without_node_versions(state: dict[str, Any]) -> dict[str, Any]:
    """The store keeps a Node across status-only updates (its caches key on it), so its resourceVersion lags."""
    for _, fields in state["objects"]["Node"].values():
        fields.pop("resource_version")
    return state


def test_the_manifests_rbac_is_enough_for_the_live_source(plane: ControlPlane, extender_kubeconfig: Path) -> None:
    source = from_kubeconfig(extender_kubeconfig, backoff_initial_seconds=0.05)
    store = ClusterStore()
    source.start(store)
    try:
        assert source.wait_synced(20), source.health().message
        health = source.health()
        assert health.ready, health.message
        # a freshly established CRD answers 429 "storage is (re)initializing" for a moment; retried, not fatal
        other_errors = [s for s in source.stats().values() if s.errors and "HTTP 429" not in s.last_error]
        assert other_errors == [], source.stats_dicts()
        snapshot = store.snapshot()
        assert snapshot.kueue_enabled
        assert set(snapshot.config_maps) == {"kueue-system/kueue-manager-config"}
        assert source.stats()["resourceslices"].api_version == "resource.k8s.io/v1"
        # a change made by someone else arrives through the watch
        plane.create_node("live-2")
        plane.publish_gpus("live-2", count=1)
        wait_until(lambda: "live-2" in store.snapshot().nodes and len(store.snapshot().slices) == 2, timeout=10)
        out = io.StringIO()
        write_snapshot(load_kubeconfig(plane.kubeconfig), out)
        listed = load_snapshot_text(out.getvalue())
        wait_until(
            lambda: _without_node_versions(state_of(store)) == _without_node_versions(state_of(listed)), timeout=10
        )
    finally:
        source.stop()


def test_the_manifests_rbac_grants_nothing_else(extender_kubeconfig: Path) -> None:
    api = KubeApi(load_kubeconfig(extender_kubeconfig))
    for path in (
        "/api/v1/secrets",
        "/api/v1/namespaces/kueue-system/configmaps",  # only Kueue's, and only by name
        "/api/v1/namespaces/kueue-system/configmaps/unrelated",
        "/apis/apps/v1/deployments",
    ):
        with pytest.raises(ApiError) as error:
            api.get_json(path)
        assert error.value.status == 403, path
    api.close()


def test_binder_binds_and_reports_the_api_servers_refusal(
    plane: ControlPlane, service_account_kubeconfig: Path
) -> None:
    namespace = plane.create_namespace("live-bind")
    try:
        pod = plane.create_pod(pod_manifest(namespace, "p1"))
        binder = Binder(load_kubeconfig(service_account_kubeconfig))  # system:kube-scheduler may bind
        binder.create_binding(namespace, "p1", pod.metadata.uid, "live-1")
        assert plane.core.read_namespaced_pod("p1", namespace).spec.node_name == "live-1"
        with pytest.raises(BindingError) as error:
            binder.create_binding(namespace, "p1", pod.metadata.uid, "live-2")
        assert error.value.status == 409
        assert "is already assigned to node" in error.value.message
        plane.create_pod(pod_manifest(namespace, "p2"))
        with pytest.raises(BindingError) as error:
            binder.create_binding(namespace, "p2", "not-the-uid", "live-1")
        assert error.value.status == 409 and "UID" in error.value.message
    finally:
        plane.delete_namespace(namespace)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_the_built_manifests_pass_server_side_dry_run(plane: ControlPlane, tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None
    build_cmd = [kubectl, "kustomize", str(MANIFESTS)]
    built = subprocess.run(build_cmd, capture_output=True, text=True, check=True, timeout=60).stdout
    manifest = tmp_path / "built.yaml"
    manifest.write_text(built, encoding="utf-8")
    result = subprocess.run(
        [kubectl, "--kubeconfig", str(plane.kubeconfig), "apply", "--dry-run=server", "-f", str(manifest)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "deployment.apps/dra-quota-scheduler" in result.stdout


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize(
    "values",
    [[], ["bind.enabled=true", "networkPolicy.enabled=true", "tls.enabled=true", "tls.secretName=extender-tls"]],
    ids=["defaults", "bind-networkpolicy-tls"],
)
def test_the_helm_chart_passes_server_side_dry_run(plane: ControlPlane, tmp_path: Path, values: list[str]) -> None:
    """The chart's objects (tests/deploy/test_helm_chart.py proves the defaults equal the kustomize build), accepted by
    the real API server's validation and admission; helm built from Go modules (testkit/builds/tools.py)."""
    from testkit.builds import tools as tools_build

    try:
        helm = tools_build.ensure_tools()["helm"]
    except tools_build.BuildError as error:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"building helm failed: {error}", pytrace=False)
        pytest.skip(str(error))
    chart = MANIFESTS / "helm" / "dra-quota-scheduler"
    command = [str(helm), "template", "dra-quota-scheduler", str(chart), "--namespace", NAMESPACE]
    for value in values:
        command += ["--set", value]
    manifest = tmp_path / "chart.yaml"
    manifest.write_text(subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout)
    kubectl = shutil.which("kubectl")
    assert kubectl is not None
    result = subprocess.run(
        [kubectl, "--kubeconfig", str(plane.kubeconfig), "apply", "--dry-run=server", "-f", str(manifest)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    applied = {line.split(" ")[0] for line in result.stdout.splitlines()}
    assert "deployment.apps/dra-quota-scheduler" in applied
    assert ("networkpolicy.networking.k8s.io/dra-quota-scheduler" in applied) == bool(values)
    assert ("clusterrole.rbac.authorization.k8s.io/dra-quota-extender:bind" in applied) == bool(values)
