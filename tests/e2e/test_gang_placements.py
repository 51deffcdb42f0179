"""Gangs as kube-scheduler v1.37.2 schedules them with the alpha steps on: one pod-group cycle per placement
(TopologyAwareWorkloadScheduling), gangs of unlike members, and Jobs whose controller makes their PodGroup
(WorkloadWithJob). The `placement_control_plane` has the gates of testkit WORKLOAD_AWARE_ALPHA on kube-apiserver,
kube-controller-manager and kube-scheduler, and the extender mirrors them.

kube-scheduler evaluates a topology-constrained PodGroup once per value of the topology label
(pkg/scheduler/schedule_one_podgroup.go podGroupSchedulingPlacementAlgorithm: every member through our filter
per placement, all reverted, the best placement bound) and tells the extender nothing of which won: whatever it
evaluates, no flavor may be given twice.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from testkit import builders as b
from testkit.control_plane import wait_until
from tests.e2e.conftest import ExtenderControlPlane
from tests.e2e.scenarios import (
    QUEUE_LABEL,
    SCHEDULE_TIMEOUT,
    SYNC_TIMEOUT,
    FlavorQuota,
    QuotaWatch,
    extender_get,
    queue_reserved,
)
from tests.e2e.test_gang_scenarios import SCHEDULING, GangScenario, prepared_for_gangs

pytestmark = pytest.mark.e2e

RACK = "example.com/rack"


@pytest.fixture(scope="module")
def placement_plane(placement_control_plane: ExtenderControlPlane) -> ExtenderControlPlane:
    return prepared_for_gangs(placement_control_plane)


@pytest.fixture
def gangs(placement_plane: ExtenderControlPlane, request: pytest.FixtureRequest) -> Iterator[GangScenario]:
    # nodes, flavors and queues are cluster-wide and named after the scenario: a name of its own per run
    base = "-".join(request.node.name.removeprefix("test_").split("_")[:3])[:28].rstrip("-")
    name = f"{base}-{uuid.uuid4().hex[:5]}"
    namespace = name
    placement_plane.plane.create_namespace(namespace)
    scenario = GangScenario(placement_plane.plane, placement_plane.extender_url, name, namespace)
    try:
        yield scenario
    finally:
        scenario.cleanup()


def allocated_by_flavor(gangs: GangScenario) -> Counter[str]:
    """Devices of every allocated claim of the namespace, by the flavor of the node they are on (the driver's pool
    is named after its node): what the API holds, whoever the claim is reserved for."""
    counts: Counter[str] = Counter()
    for claim in gangs.plane.resource.list_namespaced_resource_claim(gangs.namespace).items:
        if not claim.status or not claim.status.allocation:
            continue
        for result in claim.status.allocation.devices.results:
            flavor = gangs.flavor_of(result.pool)
            if flavor is not None:
                counts[flavor] += 1
    return counts


class FlavorWatch(QuotaWatch):
    """QuotaWatch, and the most devices allocated per flavor at any poll."""

    def __init__(self, scenario: GangScenario) -> None:
        super().__init__(scenario)
        self.max_by_flavor: Counter[str] = Counter()

    def poll(self) -> dict[str, str]:
        bound = super().poll()
        try:
            counts = allocated_by_flavor(self.scenario)  # type: ignore[arg-type]
        except (ApiException, OSError):
            return bound
        for flavor, count in counts.items():
            self.max_by_flavor[flavor] = max(self.max_by_flavor[flavor], count)
        return bound


def one_flavor_queue(
    gangs: GangScenario, nodes: int, gpus: int, quota: int, templates: dict[str, int]
) -> tuple[str, str]:
    """`nodes` nodes of `gpus` GPUs in one flavor, a queue of `quota` GPUs there, and templates (name -> GPUs);
    waits until the extender sees them. Returns (flavor, queue)."""
    gangs.add_nodes("n", nodes, gpus=gpus)
    flavor = gangs.add_flavor(f"{gangs.name}-gpus")
    queue = gangs.add_queue(gangs.name, [FlavorQuota(flavor, quota)])
    for name, count in templates.items():
        gangs.add_template(name, [b.exact_request("gpu", count)])
    gangs.wait_extender_sees(next(iter(templates)), queue, gangs.name)
    return flavor, queue


def two_racks(gangs: GangScenario, quota: int) -> tuple[str, list[str]]:
    """Two racks of 3 nodes x 4 GPUs, each its own flavor with `quota` GPUs of the queue; the 2-GPU template."""
    flavors = []
    for rack in ("r1", "r2"):
        value = f"{gangs.name}-{rack}"
        gangs.add_nodes(rack, 3, gpus=4, labels={RACK: value})
        flavors.append(gangs.add_flavor(value, {RACK: value}))
    queue = gangs.add_queue(gangs.name, [FlavorQuota(flavor, quota) for flavor in flavors])
    gangs.add_template("two-gpus", [b.exact_request("gpu", 2)])
    gangs.add_template("one-gpu", [b.exact_request("gpu", 1)])
    gangs.add_template("four-gpus", [b.exact_request("gpu", 4)])
    gangs.wait_extender_sees("two-gpus", queue, gangs.name)
    return queue, flavors


def add_topology_group(gangs: GangScenario, name: str, min_count: int) -> None:
    body: dict[str, Any] = {
        "apiVersion": "/".join(SCHEDULING),
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": gangs.namespace},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "schedulingConstraints": {"topology": [{"key": RACK}]},
        },
    }
    gangs.plane.custom.create_namespaced_custom_object(*SCHEDULING, gangs.namespace, "podgroups", body)
    created = gangs.pod_group(name)
    assert created["spec"].get("schedulingConstraints"), "the API server dropped the topology constraint"
    wait_until(
        lambda: extender_get(gangs.url, f"/diagnostics/podgroups/{gangs.namespace}/{name}")["known"],
        timeout=SYNC_TIMEOUT,
        message=f"the extender to see PodGroup {name}",
    )


@pytest.mark.parametrize("run", [1, 2, 3])
def test_a_rack_constrained_gang_and_singles_never_put_a_flavor_over_quota(gangs: GangScenario, run: int) -> None:
    """Two racks (flavors) of quota 6 each; a gang of 3 x 2 GPUs that must sit in one rack, and three single
    2-GPU pods of the same queue created right after it. kube-scheduler evaluates the gang in both racks and
    binds one (the winner is random on ties): the gang lands whole in one rack, no rack's flavor ever holds more
    than 6, and the singles take the other rack."""
    queue, flavors = two_racks(gangs, quota=6)
    add_topology_group(gangs, "train", 3)
    watch = FlavorWatch(gangs)
    members = gangs.create_gang("train", 3, "two-gpus", queue)
    singles = [f"single-{i}" for i in range(3)]
    gangs.create_pods(singles, "two-gpus", queue)
    everyone = set(members) | set(singles)
    bound = watch.until(lambda b: everyone <= set(b), SCHEDULE_TIMEOUT, "the gang and the three singles to bind")
    watch.hold(2)
    gang_racks = {gangs.flavor_of(bound[m]) for m in members}
    single_racks = {gangs.flavor_of(bound[s]) for s in singles}
    seen = {
        name: extender_get(gangs.url, f"/diagnostics/pods/{gangs.namespace}/{name}").get("quota") for name in singles
    }
    report = extender_get(gangs.url, f"/diagnostics/podgroups/{gangs.namespace}/train")
    why = f"{bound}; the singles' decisions: {seen}; the gang: {report}; most allocated {dict(watch.max_by_flavor)}"
    assert len(gang_racks) == 1, f"the gang was split across racks: {why}"
    assert single_racks == set(flavors) - gang_racks, f"the singles did not take the other rack: {why}"
    assert all(count <= 6 for count in watch.max_by_flavor.values()), (
        f"a flavor went over its quota of 6 (run {run}): most allocated {dict(watch.max_by_flavor)}"
    )
    assert watch.polls > 10


def test_a_mixed_gang_that_fits_binds_whole(gangs: GangScenario) -> None:
    """A 2-GPU driver and four 1-GPU workers (minCount 5) need exactly the queue's 6: they bind, whoever is asked
    about first."""
    flavor, queue = one_flavor_queue(gangs, 3, 4, 6, {"one-gpu": 1, "two-gpus": 2})
    gangs.add_pod_group("train", 5)
    watch = FlavorWatch(gangs)
    gangs.plane.create_pod(gangs.member("driver", "two-gpus", queue, "train"))
    workers = [f"worker-{i}" for i in range(4)]
    for worker in workers:
        gangs.plane.create_pod(gangs.member(worker, "one-gpu", queue, "train"))
    watch.until(lambda b: {"driver", *workers} <= set(b), SCHEDULE_TIMEOUT, "the mixed gang to bind whole")
    assert watch.max_by_flavor[flavor] <= 6


def test_a_mixed_gang_that_cannot_fit_holds_nothing_and_a_plain_pod_binds(gangs: GangScenario) -> None:
    """Three 1-GPU workers and a 4-GPU driver (7) in a queue of 6: refused as a group, nothing held, and a plain
    pod of the queue binds at once."""
    _, queue = one_flavor_queue(gangs, 3, 4, 6, {"one-gpu": 1, "four-gpus": 4})
    gangs.add_pod_group("train", 4)
    gangs.plane.create_pod(gangs.member("driver", "four-gpus", queue, "train"))
    for index in range(3):
        gangs.plane.create_pod(gangs.member(f"worker-{index}", "one-gpu", queue, "train"))
    wait_until(
        lambda: (c := gangs.condition("train")) is not None and c["status"] == "False",
        timeout=SCHEDULE_TIMEOUT,
        message="kube-scheduler to give the mixed gang up",
    )
    wait_until(lambda: not queue_reserved(gangs.url, gangs.name), timeout=5, message="the gang's quota released")
    report = extender_get(gangs.url, f"/diagnostics/podgroups/{gangs.namespace}/train")
    assert report["hold"] == []
    started = time.monotonic()
    gangs.create_pod("single", "one-gpu", queue)
    gangs.wait_bound("single", timeout=30)
    assert time.monotonic() - started < 10, "a plain pod of the queue waited behind the gang"
    assert not any(gangs.bound().get(name) for name in ("driver", "worker-0", "worker-1", "worker-2"))


def job_manifest(gangs: GangScenario, name: str, parallelism: int, template: str, queue: str) -> dict[str, Any]:
    """A batch/v1 Job with the workload-aware scheduling field (WorkloadWithJob): a gang of `parallelism` pods,
    minCount defaulted to parallelism by the Job controller (pkg/api/job/util.go defaultMinCountForJob)."""
    pod = gangs.manifest("ignored", template, queue)
    pod_spec = pod["spec"]
    pod_spec["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": gangs.namespace, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "scheduling": {"schedulingPolicy": {"gang": {}}},
            "template": {"metadata": {"labels": {QUEUE_LABEL: queue}}, "spec": pod_spec},
        },
    }


def job_pods(gangs: GangScenario, job: str) -> list[Any]:
    return [p for p in gangs.pods() if (p.metadata.labels or {}).get("batch.kubernetes.io/job-name") == job]


@pytest.mark.parametrize(("quota", "fits"), [(8, True), (6, False)])
def test_a_job_whose_controller_makes_its_podgroup_binds_whole_or_not_at_all(
    gangs: GangScenario, quota: int, fits: bool
) -> None:
    """WorkloadWithJob: the Job controller makes the Job's Workload and gang PodGroup (minCount = parallelism 4)
    and its pods join it. 4 x 2 GPUs bind whole in a queue of 8; in a queue of 6 none binds, nothing is held,
    and a plain pod of the queue binds."""
    flavor, queue = one_flavor_queue(gangs, 4, 2, quota, {"two-gpus": 2})
    # created as a plain object: the field is alpha, and the typed Job model would have to know it
    gangs.plane.custom.create_namespaced_custom_object(
        "batch", "v1", gangs.namespace, "jobs", job_manifest(gangs, "train", 4, "two-gpus", queue)
    )
    pods = wait_until(
        lambda: len(found := job_pods(gangs, "train")) == 4 and found,
        timeout=SCHEDULE_TIMEOUT,
        message="the Job controller to create 4 pods",
    )
    groups = {p.spec.scheduling_group.pod_group_name if p.spec.scheduling_group else None for p in pods}
    assert len(groups) == 1 and None not in groups, f"the Job's pods are not in one PodGroup: {groups}"
    group = next(iter(groups))
    assert gangs.pod_group(str(group))["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
    watch = FlavorWatch(gangs)
    names = [p.metadata.name for p in pods]
    if fits:
        watch.until(lambda b: set(names) <= set(b), SCHEDULE_TIMEOUT, "the Job's gang to bind whole")
        assert watch.max_by_flavor[flavor] <= quota
        return
    wait_until(
        lambda: (c := gangs.condition(str(group))) is not None and c["status"] == "False",
        timeout=SCHEDULE_TIMEOUT,
        message="kube-scheduler to give the Job's gang up",
    )
    wait_until(lambda: not queue_reserved(gangs.url, gangs.name), timeout=5, message="the gang's quota released")
    gangs.create_pod("single", "two-gpus", queue)
    gangs.wait_bound("single", timeout=30)
    watch.hold(1)
    assert not any(name in watch.bound for name in names), "part of the Job's gang was bound"


COMPOSITE = ("scheduling.k8s.io", "v1alpha3")


def add_composite(gangs: GangScenario, name: str, min_groups: int, children: int, members: int) -> list[str]:
    """A CompositePodGroup (gang, minGroupCount `min_groups`) and `children` PodGroups (gang, minCount `members`)
    naming it as their parent; returns the child names."""
    body = {
        "apiVersion": "/".join(COMPOSITE),
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": gangs.namespace},
        "spec": {
            "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
            "workloadRef": {"workloadName": name, "templateName": name},
        },
    }
    gangs.plane.custom.create_namespaced_custom_object(*COMPOSITE, gangs.namespace, "compositepodgroups", body)
    names = [f"{name}-g{index}" for index in range(children)]
    for child in names:
        group = {
            "apiVersion": "/".join(SCHEDULING),
            "kind": "PodGroup",
            "metadata": {"name": child, "namespace": gangs.namespace},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": members}},
                "parentCompositePodGroupName": name,
                "workloadRef": {"workloadName": name, "templateName": "worker"},
            },
        }
        gangs.plane.custom.create_namespaced_custom_object(*SCHEDULING, gangs.namespace, "podgroups", group)
    wait_until(
        lambda: (
            (r := extender_get(gangs.url, f"/diagnostics/podgroups/{gangs.namespace}/{names[0]}"))["known"]
            and r["tree"] is not None
            and len(r["tree"]["podGroups"]) == children
        ),
        timeout=SYNC_TIMEOUT,
        message="the extender to see the composite's tree",
    )
    return names


@pytest.mark.parametrize(("quota", "fits"), [(8, True), (6, False)])
def test_a_composite_binds_whole_or_holds_nothing(gangs: GangScenario, quota: int, fits: bool) -> None:
    """A CompositePodGroup of minGroupCount 2 over three PodGroups of 2 pods x 2 GPUs: two children (8 GPUs) bind
    whole in a queue of 8; in a queue of 6 only one child would fit, so nothing binds, nothing is held, and a
    plain pod of the queue binds."""
    flavor, queue = one_flavor_queue(gangs, 4, 4, quota, {"two-gpus": 2})
    children = add_composite(gangs, "job", 2, 3, 2)
    watch = FlavorWatch(gangs)
    members = [f"{child}-{index}" for child in children for index in range(2)]
    for child in children:
        for index in range(2):
            gangs.plane.create_pod(gangs.member(f"{child}-{index}", "two-gpus", queue, child))
    if fits:
        bound = watch.until(lambda b: sum(1 for m in members if m in b) >= 4, SCHEDULE_TIMEOUT, "two children to bind")
        watch.hold(3)
        placed = {child for child in children if all(f"{child}-{i}" in watch.bound for i in range(2))}
        assert len(placed) >= 2 and watch.max_by_flavor[flavor] <= quota, (bound, dict(watch.max_by_flavor))
        return
    wait_until(
        lambda: any((c := gangs.condition(child)) is not None and c["status"] == "False" for child in children),
        timeout=SCHEDULE_TIMEOUT,
        message="kube-scheduler to give the composite up",
    )
    wait_until(lambda: not queue_reserved(gangs.url, gangs.name), timeout=5, message="the tree's quota released")
    gangs.create_pod("single", "two-gpus", queue)
    gangs.wait_bound("single", timeout=30)
    watch.hold(1)
    assert not any(m in watch.bound for m in members), "part of the composite was bound"


@pytest.mark.parametrize(("big_quota", "fits"), [(16, True), (10, False)])
def test_a_charge_that_depends_on_the_node_is_held_in_the_flavor_the_gang_takes(
    gangs: GangScenario, big_quota: int, fits: bool
) -> None:
    """firstAvailable [4 GPUs | 2 GPUs]: 2 on the 2-GPU nodes of flavor `small` (quota 2: the gang of 4 cannot fit
    there), 4 on the 8-GPU nodes of flavor `big`. The gang takes 4 x 4 = 16 in `big`: it binds whole with 16 of
    quota, and with 10 nothing binds and `big` never holds more than 10 (sized at 2 a member, as the pod alone
    would take in `small`, three members would have passed and bound 12)."""
    small = gangs.add_flavor(f"{gangs.name}-small", {"example.com/size": "small"})
    big = gangs.add_flavor(f"{gangs.name}-big", {"example.com/size": "big"})
    gangs.add_nodes("s", 2, gpus=2, labels={"example.com/size": "small"})
    gangs.add_nodes("b", 2, gpus=8, labels={"example.com/size": "big"})
    queue = gangs.add_queue(gangs.name, [FlavorQuota(small, 2), FlavorQuota(big, big_quota)])
    gangs.add_template(
        "four-or-two", [b.first_available_request("gpu", [b.subrequest("four", 4), b.subrequest("two", 2)])]
    )
    gangs.wait_extender_sees("four-or-two", queue, gangs.name)
    gangs.add_pod_group("train", 4)
    watch = FlavorWatch(gangs)
    members = gangs.create_gang("train", 4, "four-or-two", queue)
    if fits:
        watch.until(lambda b: set(members) <= set(b), SCHEDULE_TIMEOUT, "the gang to bind whole in big")
        assert {gangs.flavor_of(node) for node in watch.bound.values()} == {big}
        assert watch.max_by_flavor[big] <= big_quota
        return
    wait_until(
        lambda: (c := gangs.condition("train")) is not None and c["status"] == "False",
        timeout=SCHEDULE_TIMEOUT,
        message="kube-scheduler to give the gang up",
    )
    watch.hold(3)
    assert not watch.bound and watch.max_by_flavor[big] <= big_quota, dict(watch.max_by_flavor)
