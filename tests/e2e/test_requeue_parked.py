"""Pods parked by the extender for quota, woken when quota frees up through Kueue's objects.

Against the real kube-scheduler v1.37.2: a pod refused with "quota exhausted" sits in the unschedulable pool
with the fake plugin "Extender". Raising the ClusterQueue's nominal quota is no event kube-scheduler watches, so
with requeue off (`requeue.deviceClassName: ""`) the pod stays Pending (until the 5-minute flush); with the
default the extender updates its own DeviceClass, an event the "Extender" rejector reacts to, and the pod binds
within its backoff. Both are measured; the figures are printed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from testkit import scenarios as ts
from testkit.control_plane import Component, free_port, start_extender, wait_until
from tests.e2e.conftest import ExtenderControlPlane
from tests.e2e.scenarios import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    QUOTA_EXHAUSTED,
    FlavorQuota,
    Scenario,
    _extender_profile,
)

pytestmark = pytest.mark.e2e

REQUEUE_CLASS = "dra-extender-requeue"  # the default requeue.deviceClassName
CONTROL_PROFILE = "dra-no-requeue"
CONTROL_ATTEMPTS = 3  # a control window another extender's requeue fell into proves nothing: try again
CONTROL_WAIT = 20.0  # the parked pod must stay Pending this long without the requeue
REQUEUE_BOUND = 15.0  # with it: kube-scheduler's backoff (at most 10 s) plus a margin


@pytest.fixture(scope="module")
def no_requeue_extender(kueue_plane: ExtenderControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second extender with requeue off, and a kube-scheduler profile of its own calling it: the control."""
    plane = kueue_plane.plane
    config = tmp_path_factory.mktemp("no-requeue") / "extender.yaml"
    config.write_text(yaml.safe_dump({"requeue": {"deviceClassName": ""}}))
    extender: Component = start_extender(plane.kubeconfig, free_port(), config_file=config, log_dir=plane.log_dir)
    scheduler = plane.start_scheduler(
        extender_url=extender.url, name="kube-scheduler-no-requeue", scheduler_name=CONTROL_PROFILE
    )
    try:
        yield str(extender.url)
    finally:
        scheduler.stop()
        plane.components.pop("kube-scheduler-no-requeue", None)
        extender.stop()


def park_a_pod(scenario: Scenario) -> str:
    """Quota 2, two 1-GPU pods bound, a third refused for quota; returns the ClusterQueue's name."""
    _, queue = scenario.add_one_gpu_queue(1, 4, 2)
    for name in ("a", "b"):
        scenario.create_pod(name, "one-gpu", queue)
        scenario.wait_bound(name)
    scenario.create_pod("parked", "one-gpu", queue)
    wait_until(
        lambda: any(QUOTA_EXHAUSTED in m for m in scenario.failed_scheduling().get("parked", [])),
        timeout=60,
        message="the third pod to be refused for quota",
    )
    time.sleep(2)  # past its first backoff: the pod now waits in the unschedulable pool for an event
    return queue


def raise_quota(scenario: Scenario, name: str, nominal: int) -> float:
    flavor = f"{scenario.name}-gpus"
    body: dict[str, Any] = ts.cluster_queue(name, {flavor: FlavorQuota(flavor, nominal).quota()}, cohort=None)
    current = scenario.plane.custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name)
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    scenario.plane.custom.replace_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name, body)
    return time.monotonic()


def new_scenario(plane: ExtenderControlPlane, url: str, label: str, scheduler_name: str) -> Scenario:
    name = f"{label}-{uuid.uuid4().hex[:4]}"
    namespace = plane.plane.create_namespace(name)
    return Scenario(plane.plane, url, name, namespace, scheduler_name=scheduler_name)


def device_class_versions(scenario: Scenario) -> dict[str, str]:
    """Any DeviceClass update moves every pod parked by "Extender", whoever made it (the main extender of this
    control plane requeues by default too, for pods of earlier tests)."""
    return {c.metadata.name: c.metadata.resource_version for c in scenario.plane.resource.list_device_class().items}


def control_wait(kueue_plane: ExtenderControlPlane, url: str) -> float | None:
    """Seconds the parked pod stayed Pending after the quota was raised, with requeue off; None when a DeviceClass
    changed meanwhile and the pod was bound (inconclusive)."""
    control = new_scenario(kueue_plane, url, "rq-control", CONTROL_PROFILE)
    try:
        queue = park_a_pod(control)
        classes = device_class_versions(control)
        raised = raise_quota(control, queue, 3)
        wait_until(
            lambda: control.wait_extender_sees("one-gpu", queue, control.name) is not None,
            timeout=30,
            message="the extender to see the raised quota",
        )
        while time.monotonic() - raised < CONTROL_WAIT:
            if "parked" in control.bound():
                if device_class_versions(control) != classes:
                    return None
                raise AssertionError("requeued without any requeue: the control proves nothing")
            time.sleep(1)
        return time.monotonic() - raised
    finally:
        control.cleanup()


def test_parked_pod_waits_without_requeue_and_binds_promptly_with_it(
    kueue_plane: ExtenderControlPlane,
    no_requeue_extender: str,
) -> None:
    # Control: an extender with requeue off, its own kube-scheduler profile.
    control_waited = None
    for _ in range(CONTROL_ATTEMPTS):
        control_waited = control_wait(kueue_plane, no_requeue_extender)
        if control_waited is not None:
            break
    assert control_waited is not None, f"another requeue fell into each of {CONTROL_ATTEMPTS} control windows"

    # The plane's own extender, with the default config: requeue on.
    scenario = new_scenario(kueue_plane, kueue_plane.extender_url, "rq-requeue", _extender_profile(kueue_plane))
    try:
        queue = park_a_pod(scenario)
        raised = raise_quota(scenario, queue, 3)
        node = scenario.wait_bound("parked", timeout=REQUEUE_BOUND + 30)
        took = time.monotonic() - raised
        print(
            f"\nrequeue: parked pod bound {took:.1f}s after the quota was raised (on {node}); "
            f"without requeue still Pending after {control_waited:.0f}s"
        )
        assert took < REQUEUE_BOUND
        requeue_class = scenario.plane.resource.read_device_class(REQUEUE_CLASS)
        assert requeue_class.metadata.annotations["dra-extender.kueue.x-k8s.io/requeue"] != "0"
    finally:
        scenario.cleanup()
