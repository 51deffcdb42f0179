"""The test kit starts each control-plane component with the gates and flags a scenario asks for.

Upstream sets a feature gate on every component that reads it (pkg/features kube_features.go; the
workload-aware gates are read by kube-apiserver, kube-controller-manager and kube-scheduler) and serves a beta
API group only when ``--runtime-config`` asks; these tests read the argument lists the kit would spawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit import control_plane as kit
from testkit.control_plane import WORKLOAD_AWARE, ClusterFeatures, ControlPlane


class _Spawned:
    def __init__(self, name: str, args: list[str]) -> None:
        self.name, self.args, self.url = name, args, ""


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    started: dict[str, list[str]] = {}

    def fake_spawn(name: str, args: list[str], log_dir: Path, env: Any = None) -> _Spawned:
        started[name] = args
        return _Spawned(name, args)

    monkeypatch.setattr(kit, "spawn", fake_spawn)
    monkeypatch.setattr(kit, "wait_http_ready", lambda *a, **k: None)
    monkeypatch.setattr(kit, "write_kubeconfig", lambda *a, **k: None)
    monkeypatch.setattr(kit, "write_rsa_key", lambda path: path)
    return started


def _start_all(plane: ControlPlane) -> None:
    plane.components["etcd"] = _Spawned("etcd", [])  # type: ignore[assignment]
    plane.start_apiserver()
    plane.start_controller_manager()
    plane.start_scheduler()


def test_workload_aware_gates_reach_every_component(tmp_path: Path, spawned: dict[str, list[str]]) -> None:
    plane = ControlPlane(workdir=tmp_path, binaries={n: Path(n) for n in kit.READY_PATHS}, features=WORKLOAD_AWARE)
    plane.binaries.update({n: Path(n) for n in ("kube-controller-manager", "kube-scheduler")})
    _start_all(plane)
    gates = "--feature-gates=DRAWorkloadResourceClaims=true,GenericWorkload=true"
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert gates in spawned[component], component
    assert "--runtime-config=scheduling.k8s.io/v1beta1=true" in spawned["kube-apiserver"]
    assert not any(a.startswith("--runtime-config") for a in spawned["kube-scheduler"])
    controllers = next(a for a in spawned["kube-controller-manager"] if a.startswith("--controllers="))
    assert controllers.endswith(",podgroup-protection-controller")
    assert "resourceclaim-controller" in controllers


def test_default_plane_passes_no_gates(tmp_path: Path, spawned: dict[str, list[str]]) -> None:
    plane = ControlPlane(workdir=tmp_path, binaries={n: Path(n) for n in kit.READY_PATHS})
    plane.binaries.update({n: Path(n) for n in ("kube-controller-manager", "kube-scheduler")})
    _start_all(plane)
    for args in spawned.values():
        assert not any(a.startswith(("--feature-gates", "--runtime-config")) for a in args)


def test_extra_args_go_to_their_component_only() -> None:
    features = ClusterFeatures(
        gates={"TopologyAwareWorkloadScheduling": True, "GenericWorkload": True},
        extra_args={"kube-scheduler": ("--v=5",)},
    )
    assert features.component_flags("kube-scheduler") == [
        "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true",
        "--v=5",
    ]
    assert "--v=5" not in features.component_flags("kube-controller-manager")
    assert features.apiserver_flags() == ["--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"]
