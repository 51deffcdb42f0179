"""Gangs under quota on the real control plane, with workload-aware scheduling on.

The `workload_control_plane` starts kube-apiserver, kube-controller-manager and kube-scheduler v1.37.2 with
GenericWorkload and DRAWorkloadResourceClaims on (and scheduling.k8s.io/v1beta1 served: testkit WORKLOAD_AWARE),
our extender with the same gates in its `features:`, and no Kueue controller (the extender reads Kueue's objects,
as in test_extender_scenarios). kube-scheduler schedules each PodGroup in its pod-group cycle
(pkg/scheduler/schedule_one_podgroup.go): every member through our filter, all reverted when fewer than minCount
fit, PodGroupInitiallyScheduled=False on the PodGroup, retried with backoff.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from testkit import builders as b
from testkit import scenarios as ts
from testkit.control_plane import DEVICE_CLASS, wait_until
from tests.e2e.conftest import ExtenderControlPlane
from tests.e2e.scenarios import (
    GPU,
    KUEUE_NAMESPACE,
    SCHEDULE_TIMEOUT,
    SYNC_TIMEOUT,
    FlavorQuota,
    QuotaWatch,
    Scenario,
    extender_get,
    queue_reserved,
    queue_usage,
)

pytestmark = pytest.mark.e2e

SCHEDULING = ("scheduling.k8s.io", "v1beta1")


@pytest.fixture(scope="module")
def gang_plane(workload_control_plane: ExtenderControlPlane) -> ExtenderControlPlane:
    return prepared_for_gangs(workload_control_plane)


def prepared_for_gangs(started: ExtenderControlPlane) -> ExtenderControlPlane:
    """The DeviceClass and Kueue's manager ConfigMap (deviceClassMappings), once the extender has read them."""
    plane = started.plane
    plane.create_device_class()
    for create in (
        lambda: plane.create_namespace(KUEUE_NAMESPACE, wait_for_service_account=False),
        lambda: plane.core.create_namespaced_config_map(KUEUE_NAMESPACE, ts.kueue_config()),
    ):
        try:
            create()
        except ApiException as exc:
            if exc.status != 409:
                raise
    url = started.extender_url
    wait_until(
        lambda: extender_get(url, "/diagnostics/queues")["deviceClassMappings"] == {GPU: [DEVICE_CLASS]},
        timeout=SYNC_TIMEOUT,
        message="the extender to read deviceClassMappings from Kueue's ConfigMap",
    )
    return started


@pytest.fixture
def gangs(gang_plane: ExtenderControlPlane, request: pytest.FixtureRequest) -> Iterator[GangScenario]:
    name = "-".join(request.node.name.removeprefix("test_").split("_")[:5])[:40].rstrip("-")
    namespace = f"{name}-{uuid.uuid4().hex[:6]}"
    gang_plane.plane.create_namespace(namespace)
    scenario = GangScenario(gang_plane.plane, gang_plane.extender_url, name, namespace)
    try:
        yield scenario
    finally:
        scenario.cleanup()


class GangScenario(Scenario):
    """A Scenario whose pods may belong to PodGroups."""

    def add_pod_group(self, name: str, min_count: int, claim_templates: dict[str, str] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "/".join(SCHEDULING),
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        }
        if claim_templates:
            body["spec"]["resourceClaims"] = [
                {"name": claim, "resourceClaimTemplateName": template} for claim, template in claim_templates.items()
            ]
        self.plane.custom.create_namespaced_custom_object(*SCHEDULING, self.namespace, "podgroups", body)
        wait_until(
            lambda: extender_get(self.url, f"/diagnostics/podgroups/{self.namespace}/{name}")["known"],
            timeout=SYNC_TIMEOUT,
            message=f"the extender to see PodGroup {name}",
        )
        return body

    def pod_group(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.plane.custom.get_namespaced_custom_object(
            *SCHEDULING, self.namespace, "podgroups", name
        )
        return found

    def member(self, name: str, template: str, queue: str, group: str) -> dict[str, Any]:
        manifest = self.manifest(name, template, queue)
        manifest["spec"]["schedulingGroup"] = {"podGroupName": group}
        return manifest

    def create_gang(self, group: str, count: int, template: str, queue: str) -> list[str]:
        names = [f"{group}-{i}" for i in range(count)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda n: self.plane.create_pod(self.member(n, template, queue, group)), names))
        return names

    def condition(self, group: str) -> dict[str, Any] | None:
        for condition in self.pod_group(group).get("status", {}).get("conditions") or ():
            if condition.get("type") == "PodGroupInitiallyScheduled":
                return dict(condition)
        return None


def within(watch: QuotaWatch, pods: int, gpus: int) -> bool:
    """Never more pods bound nor devices allocated than the queue holds, at any poll."""
    return watch.max_bound <= pods and watch.max_allocated <= gpus


def setup_queue(gangs: GangScenario, nodes: int, gpus: int, quota: int) -> str:
    gangs.add_nodes("gpu", nodes, gpus=gpus)
    flavor = gangs.add_flavor(f"{gangs.name}-gpus")
    queue = gangs.add_queue(gangs.name, [FlavorQuota(flavor, quota)])
    gangs.add_template("two-gpus", [b.exact_request("gpu", 2)])
    gangs.wait_extender_sees("two-gpus", queue, gangs.name)
    return queue


def test_a_gang_that_cannot_fit_holds_nothing_and_a_plain_pod_binds_at_once(gangs: GangScenario) -> None:
    """4 pods x 2 GPUs in a queue of 6: refused as a group, nothing reserved, the queue free for others."""
    queue = setup_queue(gangs, nodes=4, gpus=2, quota=6)
    gangs.add_pod_group("train", 4)
    members = gangs.create_gang("train", 4, "two-gpus", queue)
    condition = wait_until(
        lambda: (c := gangs.condition("train")) is not None and c["status"] == "False" and c,
        timeout=SCHEDULE_TIMEOUT,
        message="kube-scheduler to give the gang up",
    )
    assert condition["reason"] == "Unschedulable"
    given_up = time.monotonic()
    wait_until(lambda: not queue_reserved(gangs.url, gangs.name), timeout=5, message="the gang's quota released")
    assert time.monotonic() - given_up < 1.5, "the extender held the gang's quota after kube-scheduler gave up"
    report = extender_get(gangs.url, f"/diagnostics/podgroups/{gangs.namespace}/train")
    assert report["hold"] == [] and all(not m["reserved"] for m in report["members"])
    assert any("PodGroup" in m["refusal"] for m in report["members"] if m["refusal"])
    started = time.monotonic()
    gangs.create_pod("single", "two-gpus", queue)
    gangs.wait_bound("single", timeout=30)
    assert time.monotonic() - started < 10, "a plain pod of the queue waited behind the gang"
    assert not any(gangs.bound().get(m) for m in members), "part of the gang was bound"


def test_a_gang_that_fits_binds_whole_and_fills_the_queue(gangs: GangScenario) -> None:
    queue = setup_queue(gangs, nodes=4, gpus=2, quota=8)
    gangs.add_pod_group("train", 4)
    members = gangs.create_gang("train", 4, "two-gpus", queue)
    watch = QuotaWatch(gangs)
    watch.until(lambda bound: set(members) <= set(bound), SCHEDULE_TIMEOUT, "the whole gang to bind")
    wait_until(lambda: queue_usage(gangs.url, gangs.name) == {f"{gangs.name}-gpus": 8}, timeout=SYNC_TIMEOUT)
    assert within(watch, pods=4, gpus=8)
    gangs.create_pod("late", "two-gpus", queue)
    time.sleep(3)
    assert "late" not in gangs.bound(), "the queue is full after the gang"


def test_a_podgroup_claim_shared_by_three_pods_is_charged_once(gangs: GangScenario) -> None:
    """One claim of 2 GPUs made for the PodGroup from its template, used by all 3 members: usage 2, not 6."""
    queue = setup_queue(gangs, nodes=2, gpus=4, quota=2)
    gangs.add_pod_group("shared", 3, claim_templates={"gpu": "two-gpus"})
    members = gangs.create_gang("shared", 3, "two-gpus", queue)
    watch = QuotaWatch(gangs)
    bound = watch.until(lambda b: set(members) <= set(b), SCHEDULE_TIMEOUT, "the three members to bind")
    assert len({bound[m] for m in members}) == 1, "members of one node-local claim on different nodes"
    wait_until(lambda: queue_usage(gangs.url, gangs.name) == {f"{gangs.name}-gpus": 2}, timeout=SYNC_TIMEOUT)
    time.sleep(2)
    assert queue_usage(gangs.url, gangs.name) == {f"{gangs.name}-gpus": 2}
    assert not queue_reserved(gangs.url, gangs.name)


def test_gangs_and_singles_racing_never_overcommit_nor_bind_part_of_a_gang(gangs: GangScenario) -> None:
    queue = setup_queue(gangs, nodes=6, gpus=2, quota=8)
    for group in ("a", "b", "c"):
        gangs.add_pod_group(group, 3)
    watch = QuotaWatch(gangs)
    with ThreadPoolExecutor(max_workers=4) as pool:
        jobs = [pool.submit(gangs.create_gang, group, 3, "two-gpus", queue) for group in ("a", "b", "c")]
        jobs.append(pool.submit(lambda: [gangs.create_pod(f"s{i}", "two-gpus", queue) for i in range(3)]))
        for job in jobs:
            job.result()
    singles = {f"s{i}" for i in range(3)}

    def settled(bound: dict[str, str]) -> bool:
        """8 GPUs hold one gang (6) and one single (2), or the three singles (6) when they all come first:
        then the 2 GPUs left can never hold a gang of three, and 3 pods bound is the final state."""
        return singles <= set(bound) or (len(bound) >= 4 and bool(singles & set(bound)))

    watch.until(settled, SCHEDULE_TIMEOUT, "the queue to fill")
    bound = watch.hold(8)
    assert within(watch, pods=4, gpus=8), watch.report(gangs.name)  # 8 GPUs = 4 pods of 2
    whole = []
    for group in ("a", "b", "c"):
        placed = sum(1 for i in range(3) if f"{group}-{i}" in bound)
        assert placed in (0, 3), f"gang {group}: {placed} of 3 bound"
        whole += [group] if placed == 3 else []
    shape = (len(whole), len(singles & set(bound)))
    assert shape in ((0, 3), (1, 1)), f"{len(whole)} gang(s) and {shape[1]} single(s) bound: {sorted(bound)}"


def test_an_extender_restart_in_the_middle_of_an_attempt(gangs: GangScenario, gang_plane: ExtenderControlPlane) -> None:
    """A gang that fits, while the extender restarts: it binds whole, usage is exact, nothing stays held."""
    queue = setup_queue(gangs, nodes=4, gpus=2, quota=8)
    gangs.add_pod_group("train", 4)
    members = gangs.create_gang("train", 4, "two-gpus", queue)
    gang_plane.plane.restart_component("extender", kill=True)
    watch = QuotaWatch(gangs)
    watch.until(lambda bound: set(members) <= set(bound), SCHEDULE_TIMEOUT, "the whole gang to bind")
    wait_until(lambda: queue_usage(gangs.url, gangs.name) == {f"{gangs.name}-gpus": 8}, timeout=SYNC_TIMEOUT)
    wait_until(lambda: not queue_reserved(gangs.url, gangs.name), timeout=SYNC_TIMEOUT)
    assert within(watch, pods=4, gpus=8)


def test_a_gang_waiting_for_quota_binds_once_a_running_pod_leaves(gangs: GangScenario) -> None:
    """3 singles hold 6 of 8 GPUs; a gang of 2 x 2 GPUs is refused as a group until one single is deleted, then
    binds whole without any other change to the cluster (kube-scheduler retries the group; nothing of the
    refused attempts stays held)."""
    queue = setup_queue(gangs, nodes=6, gpus=2, quota=8)
    singles = [f"s{i}" for i in range(3)]
    gangs.create_pods(singles, "two-gpus", queue)
    for single in singles:
        gangs.wait_bound(single)
    gangs.add_pod_group("train", 2)
    members = gangs.create_gang("train", 2, "two-gpus", queue)
    wait_until(
        lambda: (c := gangs.condition("train")) is not None and c["status"] == "False",
        timeout=SCHEDULE_TIMEOUT,
        message="kube-scheduler to find the gang unschedulable",
    )
    time.sleep(2)
    assert not any(gangs.bound().get(m) for m in members), "part of the gang bound beyond the quota"
    assert not queue_reserved(gangs.url, gangs.name), "a refused gang attempt left quota held"
    deleted = time.monotonic()
    gangs.plane.core.delete_namespaced_pod("s0", gangs.namespace, grace_period_seconds=0)
    watch = QuotaWatch(gangs)
    watch.until(lambda bound: set(members) <= set(bound), SCHEDULE_TIMEOUT, "the gang to bind after s0 left")
    print(f"\ngang bound {time.monotonic() - deleted:.1f}s after s0 was deleted")
    wait_until(lambda: queue_usage(gangs.url, gangs.name) == {f"{gangs.name}-gpus": 8}, timeout=SYNC_TIMEOUT)
    assert within(watch, pods=4, gpus=8), watch.report(gangs.name)


def test_a_launcher_without_devices_and_its_workers_bind_whole_in_a_queue_just_big_enough(gangs: GangScenario) -> None:
    """minCount 3: a launcher that asks for no device and two workers of 2 GPUs each, in a queue of 4 GPUs. The
    group needs 4 (the launcher counts toward minCount for free), so it binds whole and fills the queue."""
    queue = setup_queue(gangs, nodes=4, gpus=2, quota=4)
    gangs.add_pod_group("mpi", 3)
    launcher = gangs.member("launcher", "two-gpus", queue, "mpi")
    del launcher["spec"]["resourceClaims"]
    del launcher["spec"]["containers"][0]["resources"]["claims"]
    gangs.plane.create_pod(launcher)
    workers = gangs.create_gang("mpi", 2, "two-gpus", queue)
    watch = QuotaWatch(gangs)
    watch.until(lambda bound: {"launcher", *workers} <= set(bound), SCHEDULE_TIMEOUT, "the launcher and workers")
    wait_until(lambda: queue_usage(gangs.url, gangs.name) == {f"{gangs.name}-gpus": 4}, timeout=SYNC_TIMEOUT)
    assert within(watch, pods=3, gpus=4), watch.report(gangs.name)
