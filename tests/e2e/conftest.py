"""Fixtures of the end-to-end tests: a real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler built from Go modules) on 127.0.0.1, started once per session.

Outside CI the tests are skipped when `go` (needed for the first build) or ../shared is missing; with
CI=true those are failures. Component logs are kept when a test fails, in a folder named at the end of the
run (``E2E_LOG_DIR`` overrides the default ``tests/e2e/.build/logs/<time>``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from testkit.builds import kubernetes as build
from testkit.control_plane import (
    DEVICE_CLASS,
    DRIVER,
    KUEUE_CRD_DIR,
    SHARED_DIR,
    WORKLOAD_AWARE,
    WORKLOAD_AWARE_ALPHA,
    ClusterFeatures,
    Component,
    ControlPlane,
    free_port,
    start_control_plane,
    start_extender,
)
from tests.e2e.kueue_controller import FEATURE_GATES, FRAMEWORKS, KueueController, start_kueue

# The mapping Kueue charges at admission and our extender reads from Kueue's ConfigMap (same text).
KUEUE_DEVICE_CLASS_MAPPINGS = [{"name": "example.com/gpu", "deviceClassNames": [DEVICE_CLASS]}]

IN_CI = os.environ.get("CI", "").lower() == "true"
KEEP_TMP = os.environ.get("E2E_KEEP_TMP", "") == "1"  # keep the whole temp dir, for debugging

_planes: list[ControlPlane] = []
_failed = pytest.StashKey[bool]()
_kept_logs = pytest.StashKey[list[Path]]()


def _unavailable(message: str) -> None:
    """Skip outside CI, fail in CI."""
    if IN_CI:
        pytest.fail(f"{message} (CI=true: a missing prerequisite is a failure)", pytrace=False)
    pytest.skip(message)


@contextmanager
def _to_terminal(config: pytest.Config) -> Iterator[None]:
    """Let prints reach the terminal during fixture setup (the build takes minutes)."""
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is None:
        yield
        return
    with capture.global_and_fixture_disabled():
        yield


def _say(config: pytest.Config, message: str) -> None:
    with _to_terminal(config):
        print(f"\ne2e: {message}", file=sys.stderr, flush=True)


Built = TypeVar("Built")


def _built(config: pytest.Config, present: bool, ensure: Callable[[], Built], what: str) -> Built:
    """What `ensure` builds (or finds built): without Go and nothing built, unavailable (a failure in CI, a skip
    elsewhere); a build that fails fails the tests that need it."""
    if not present:
        try:
            build.find_go()
        except build.BuildError as exc:
            _unavailable(str(exc))
    with _to_terminal(config):
        try:
            return ensure()
        except build.BuildError as exc:
            failure = f"building {what} failed: {exc}"
    pytest.fail(failure, pytrace=False)


@pytest.fixture(scope="session")
def e2e_binaries(pytestconfig: pytest.Config) -> dict[str, Path]:
    """Paths of etcd, kube-apiserver, kube-controller-manager, kube-scheduler (built on first use)."""
    if not SHARED_DIR.is_dir() or not KUEUE_CRD_DIR.is_dir():
        _unavailable(f"{KUEUE_CRD_DIR} is missing (the shared folder beside the repository)")
    paths = build.binaries()
    built = all(os.access(p, os.X_OK) for p in paths.values())
    return _built(pytestconfig, built, build.ensure_binaries, "the control plane")


@dataclass
class _Started:
    plane: ControlPlane
    tmp: Path


def _start(
    config: pytest.Config,
    binaries: dict[str, Path],
    label: str,
    shared_crds: bool = True,
    features: ClusterFeatures | None = None,
) -> _Started:
    tmp = Path(tempfile.mkdtemp(prefix=f"dra-e2e-{label}-"))
    started = time.monotonic()
    plane: ControlPlane | None = None
    try:
        plane = start_control_plane(tmp, binaries, start_scheduler=False, features=features)
        if shared_crds:
            plane.apply_crds(KUEUE_CRD_DIR)
    except BaseException:
        if plane is not None:
            plane.stop()
        _keep(config, tmp, label)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _planes.append(plane)
    _say(config, f"control plane '{label}' up in {time.monotonic() - started:.1f}s at {plane.server} ({tmp})")
    return _Started(plane, tmp)


def _keep(config: pytest.Config, workdir: Path, label: str) -> None:
    """Copy the component logs and generated configs of ``workdir`` to the kept-logs folder."""
    root = Path(os.environ.get("E2E_LOG_DIR") or build.BUILD_ROOT / "logs" / time.strftime("%Y%m%d-%H%M%S"))
    destination = root / label
    destination.mkdir(parents=True, exist_ok=True)
    for pattern in ("logs/*.log", "*.yaml", "*.kubeconfig"):
        for path in workdir.glob(pattern):
            shutil.copy2(path, destination / path.name)
    config.stash.setdefault(_kept_logs, []).append(destination)


def _finish(config: pytest.Config, started: _Started, label: str) -> None:
    started.plane.stop()
    _planes.remove(started.plane)
    if config.stash.get(_failed, False):
        _keep(config, started.tmp, label)
    if KEEP_TMP:
        _say(config, f"kept {started.tmp}")
    else:
        shutil.rmtree(started.tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def control_plane(pytestconfig: pytest.Config, e2e_binaries: dict[str, Path]) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + kube-controller-manager + the default kube-scheduler (in-tree plugins only,
    no extender), with Kueue's CRDs applied. Shared by the whole session: use your own namespace and
    node names."""
    started = _start(pytestconfig, e2e_binaries, "default")
    try:
        started.plane.start_scheduler()
        yield started.plane
    finally:
        _finish(pytestconfig, started, "default")


@dataclass
class ExtenderControlPlane:
    """A control plane whose default-scheduler calls our extender (filter, prioritize)."""

    plane: ControlPlane
    extender: Component
    extender_url: str


@pytest.fixture(scope="session")
def extender_control_plane(
    pytestconfig: pytest.Config, e2e_binaries: dict[str, Path]
) -> Iterator[ExtenderControlPlane]:
    """A second, separate control plane: our extender (`dra-extender serve`) runs against it and its
    kube-scheduler has the `extenders:` entry pointing at it. Set E2E_EXTENDER_CONFIG to pass --config."""
    started = _start(pytestconfig, e2e_binaries, "extender")
    try:
        config_file = os.environ.get("E2E_EXTENDER_CONFIG") or None
        extender = start_extender(
            started.plane.kubeconfig, free_port(), config_file=config_file, log_dir=started.plane.log_dir
        )
        started.plane.components["extender"] = extender
        started.plane.start_scheduler(extender_url=extender.url)
        yield ExtenderControlPlane(started.plane, extender, extender.url)
    finally:
        _finish(pytestconfig, started, "extender")


def _workload_plane(
    pytestconfig: pytest.Config, binaries: dict[str, Path], label: str, features: ClusterFeatures
) -> Iterator[ExtenderControlPlane]:
    """A control plane with `features` on kube-apiserver, kube-controller-manager and kube-scheduler, Kueue's
    CRDs, our extender with the same gates in its `features:` (as a user running gangs sets it) and a
    kube-scheduler calling it."""
    started = _start(pytestconfig, binaries, label, features=features)
    try:
        config_file = started.plane.workdir / f"extender-{label}.yaml"
        config_file.write_text(yaml.safe_dump({"features": {gate: on for gate, on in features.gates.items()}}))
        extender = start_extender(
            started.plane.kubeconfig, free_port(), config_file=config_file, log_dir=started.plane.log_dir
        )
        started.plane.components["extender"] = extender
        started.plane.start_scheduler(extender_url=extender.url)
        yield ExtenderControlPlane(started.plane, extender, extender.url)
    finally:
        _finish(pytestconfig, started, label)


@pytest.fixture(scope="module")
def workload_control_plane(
    pytestconfig: pytest.Config, e2e_binaries: dict[str, Path]
) -> Iterator[ExtenderControlPlane]:
    """Workload-aware scheduling as 1.37 ships its beta (testkit WORKLOAD_AWARE: GenericWorkload and
    DRAWorkloadResourceClaims, scheduling.k8s.io/v1beta1 served). Module scope: the gang scenarios own it."""
    yield from _workload_plane(pytestconfig, e2e_binaries, "workload", WORKLOAD_AWARE)


@pytest.fixture(scope="module")
def placement_control_plane(
    pytestconfig: pytest.Config, e2e_binaries: dict[str, Path]
) -> Iterator[ExtenderControlPlane]:
    """The beta and the alpha steps (testkit WORKLOAD_AWARE_ALPHA: TopologyAwareWorkloadScheduling,
    CompositePodGroup, WorkloadWithJob; scheduling.k8s.io/v1alpha3 served too). Module scope: the placement,
    composite and Job scenarios own it."""
    yield from _workload_plane(pytestconfig, e2e_binaries, "placement", WORKLOAD_AWARE_ALPHA)


@pytest.fixture(scope="session")
def kueue_build(pytestconfig: pytest.Config, e2e_binaries: dict[str, Path]) -> Path:
    """The folder with Kueue's controller manager (`kueue`) and its manifests (`config/`), built on first use
    from tests/e2e/kueue (`build.ensure_kueue`). After e2e_binaries, so the two builds never share the cores."""
    return _built(pytestconfig, os.access(build.kueue_binary(), os.X_OK), build.ensure_kueue, "Kueue")


@dataclass
class KueueControlPlane:
    """A control plane with Kueue's controller manager, our extender, and a kube-scheduler calling it."""

    plane: ControlPlane
    kueue: KueueController
    extender: Component
    extender_url: str


@pytest.fixture(scope="module")
def kueue_control_plane(
    pytestconfig: pytest.Config, e2e_binaries: dict[str, Path], kueue_build: Path
) -> Iterator[KueueControlPlane]:
    """A third, separate control plane (module scope: stopped when the module's tests are done) where Kueue
    v0.19.2 runs (tests/e2e/kueue_controller.py: all 11 CRDs, its webhooks on 127.0.0.1, batch/job, the DRA
    integration mapping gpu.example.com to example.com/gpu), then our extender and kube-scheduler."""
    yield from _kueue_plane(pytestconfig, e2e_binaries, kueue_build, "kueue", KUEUE_DEVICE_CLASS_MAPPINGS)


# Kueue's real workloads (tests/e2e/test_kueue_workload_scenarios.py): JobSets besides Jobs, and a second
# DeviceClass of the same devices charged by their capacity `memory`, spelled as the slices spell it.
CAPACITY_CLASS = "gpumem.example.com"
CAPACITY_RESOURCE = "example.com/gpu-memory"
JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"


@pytest.fixture(scope="module")
def kueue_workloads_plane(
    pytestconfig: pytest.Config, e2e_binaries: dict[str, Path], kueue_build: Path
) -> Iterator[KueueControlPlane]:
    """Like kueue_control_plane, with Kueue's jobset integration on (the JobSet CRD of the JobSet module Kueue
    builds against applied first; no JobSet controller: the scenarios create its Jobs) and a capacity mapping
    (KueueDRAIntegrationConsumableCapacity, alpha in v0.19) charging CAPACITY_CLASS as CAPACITY_RESOURCE by the
    devices' capacity `memory`."""
    try:
        jobset_crds = build.ensure_jobset_crd()
    except build.BuildError as exc:
        _unavailable(f"the JobSet CRD could not be fetched: {exc}")
    capacity = {"name": "memory", "driver": DRIVER, "deviceSelector": {"cel": {"expression": "true"}}}
    mappings = [
        *KUEUE_DEVICE_CLASS_MAPPINGS,
        {"name": CAPACITY_RESOURCE, "deviceClassNames": [CAPACITY_CLASS], "sources": [{"capacity": capacity}]},
    ]
    yield from _kueue_plane(
        pytestconfig,
        e2e_binaries,
        kueue_build,
        "kueue-workloads",
        mappings,
        frameworks=("batch/job", JOBSET_FRAMEWORK),
        feature_gates=f"{FEATURE_GATES},KueueDRAIntegrationConsumableCapacity=true",
        extra_crd_dirs=(jobset_crds,),
        device_classes=(CAPACITY_CLASS,),
    )


def _kueue_plane(
    pytestconfig: pytest.Config,
    e2e_binaries: dict[str, Path],
    kueue_build: Path,
    label: str,
    mappings: list[dict[str, Any]],
    *,
    frameworks: tuple[str, ...] = FRAMEWORKS,
    feature_gates: str = FEATURE_GATES,
    extra_crd_dirs: tuple[Path, ...] = (),
    device_classes: tuple[str, ...] = (),
) -> Iterator[KueueControlPlane]:
    started = _start(pytestconfig, e2e_binaries, label, shared_crds=False)
    try:
        plane = started.plane
        plane.create_device_class()
        for name in device_classes:  # more classes of the example driver's devices
            plane.create_device_class(name)
        began = time.monotonic()
        kueue = start_kueue(
            plane,
            kueue_build,
            mappings,
            feature_gates,
            frameworks=frameworks,
            extra_crd_dirs=extra_crd_dirs,
        )
        _say(pytestconfig, f"Kueue {build.kueue_version()} up in {time.monotonic() - began:.1f}s ({kueue.phases})")
        config_file = os.environ.get("E2E_EXTENDER_CONFIG") or None
        extender = start_extender(plane.kubeconfig, free_port(), config_file=config_file, log_dir=plane.log_dir)
        plane.components["extender"] = extender
        plane.start_scheduler(extender_url=extender.url)
        yield KueueControlPlane(plane, kueue, extender, extender.url)
    finally:
        _finish(pytestconfig, started, label)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed and _planes:
        item.config.stash[_failed] = True
        for plane in _planes:
            for component in plane.components.values():
                state = "running" if component.alive() else f"exited {component.process.returncode}"
                report.sections.append((f"{component.name} log tail ({state})", component.log_tail(30)))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    for folder in config.stash.get(_kept_logs, []):
        terminalreporter.write_line(f"e2e: component logs kept in {folder}")


# The scenario fixtures (kueue_plane, scenario) for every module here; imported last: scenarios.py imports
# ExtenderControlPlane from this module.
from tests.e2e.scenarios import kueue_plane, scenario  # noqa: E402, F401
