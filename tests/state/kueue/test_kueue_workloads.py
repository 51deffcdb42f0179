"""Kueue's real workloads: a pod's Workload found as Kueue marks the pod, each pod held to its own pod set's
flavors, and capacity/counter names matched as DRA names them.

Kueue v0.19.2 owns a JobSet's Workload by the JobSet, while the pods are owned by the JobSet's Jobs; a pod group's
Workload is named after the group; a multi-pod-set job's pod sets may be admitted to different flavors
(state/kueue/pod_workload.py has the rules and their upstream sources). Scenarios drive the service with the
objects Kueue, the JobSet controller and the Job controller write.
"""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest

from extender.decisions.quota.workload_holds import pod_set_hold
from extender.state.core import parse_pod
from extender.state.kueue.pod_workload import (
    JOBSET_UID_LABEL,
    POD_GROUP_NAME,
    POD_SET_LABEL,
    WORKLOAD_ANNOTATION,
    admitted_flavors_of_pod,
    pod_workload,
)
from extender.state.kueue.workload import parse_workload
from testkit import builders as b
from testkit.scenarios import RESOURCE, gpu_pod
from tests.decisions.quota.test_admission_holds import bound
from tests.decisions.quota.test_dra_charges_and_flavors import (
    CLASS,
    DRIVER,
    GI,
    base,
    cq,
    gpu_node,
    kueue_mappings,
    rflavor,
    run,
)
from tests.support.quota import base_objects, filter_pod
from tests.support.scenarios import engine_for

OD = ("team-a", "on-demand", RESOURCE)
SPOT = ("team-a", "spot", RESOURCE)
JOBSET_UID = "uid-jobset-train"
JOB_UIDS = ("uid-job-train-workers-0", "uid-job-train-workers-1")


def pod_sets_workload(
    name: str, pod_sets: list[tuple[str, int, int, str]], *, owner_kind: str, owner_uid: str
) -> dict[str, Any]:
    """A Workload admitted to team-a with one assignment per (pod set, pods, GPUs in all, flavor)."""
    obj = b.workload(name, "team-a", "team-a", {RESOURCE: 1}, "on-demand", owner_uid=owner_uid, owner_kind=owner_kind)
    obj["metadata"]["ownerReferences"][0]["apiVersion"] = "jobset.x-k8s.io/v1alpha2"
    obj["spec"]["podSets"] = [{"name": ps, "count": count, "template": {"spec": {}}} for ps, count, _, _ in pod_sets]
    obj["status"]["admission"]["podSetAssignments"] = [
        {"name": ps, "flavors": {RESOURCE: flavor}, "resourceUsage": {RESOURCE: str(gpus)}, "count": count}
        for ps, count, gpus, flavor in pod_sets
    ]
    return obj


def jobset_pod(name: str, job_uid: str, *, pod_set: str = "workers", marks: str = "annotation") -> dict[str, Any]:
    """A pod as the Job controller creates it from a JobSet's Job: owned by the Job, labelled by Kueue with its
    pod set and local queue (no queue-name label: that is on the JobSet), marked with its Workload by Kueue's
    annotation or with its JobSet by the JobSet controller's uid label."""
    obj = b.owned_by(gpu_pod(name, queue=None), job_uid)
    labels = obj["metadata"]["labels"]
    labels.update({"kueue.x-k8s.io/local-queue-name": "q", POD_SET_LABEL: pod_set})
    if marks == "annotation":
        obj["metadata"]["annotations"][WORKLOAD_ANNOTATION] = "jobset-train"
    else:
        labels[JOBSET_UID_LABEL] = JOBSET_UID
    return obj


@pytest.mark.parametrize("marks", ["annotation", "jobset-uid"])
def test_jobset_pods_find_their_workload_bind_whole_and_are_charged_once(marks: str) -> None:
    """Quota 4, a JobSet admitted for 2 pods of 2 GPUs: both pods pass (they are what the hold is for), and as
    they bind the hold turns into usage, never both: 4 charged in all."""
    workload = pod_sets_workload(
        "jobset-train", [("workers", 2, 4, "on-demand")], owner_kind="JobSet", owner_uid=JOBSET_UID
    )
    engine = engine_for([*base_objects({"on-demand": {"nominal": 4}}), workload])
    assert engine.quota_view().admitted_holds == {OD: 4}
    pods = [jobset_pod(f"train-workers-{i}-0", JOB_UIDS[i], marks=marks) for i in range(2)]
    for index, pod in enumerate(pods):
        decision = filter_pod(engine, pod)
        assert sorted(decision.passed) == ["on-demand-0", "on-demand-1"], decision.verdicts
        bound(engine, pod, f"on-demand-{index}", ["gpu-0", "gpu-1"])
        view = engine.quota_view()
        assert view.usage == {OD: 2 * (index + 1)}
        assert view.admitted_holds == ({OD: 2} if index == 0 else {})
        assert view.ledger.available(*OD) == 0  # 4 charged, once
    # an outsider of the same queue finds nothing left
    assert filter_pod(engine, gpu_pod("outsider")).passed == []


def test_a_workload_seen_after_its_bound_pod_takes_the_pods_usage_off_its_hold() -> None:
    """Watch order: the pod's binding arrives before its Workload. The Workload's event re-attributes the pods
    that name it, so its hold is what its pods do not hold yet."""
    engine = engine_for(base_objects({"on-demand": {"nominal": 4}}))
    pod = jobset_pod("train-workers-0-0", JOB_UIDS[0])
    engine.store.apply("Pod", "ADDED", pod)
    bound(engine, pod, "on-demand-0", ["gpu-0", "gpu-1"])
    assert engine.quota_view().usage == {OD: 2}
    workload = pod_sets_workload(
        "jobset-train", [("workers", 2, 4, "on-demand")], owner_kind="JobSet", owner_uid=JOBSET_UID
    )
    engine.store.apply("Workload", "ADDED", workload)
    view = engine.quota_view()
    assert view.usage == {OD: 2} and view.admitted_holds == {OD: 2}


def test_drift_report_lists_a_jobsets_pending_pods_under_its_workload() -> None:
    workload = pod_sets_workload(
        "jobset-train", [("workers", 2, 4, "on-demand")], owner_kind="JobSet", owner_uid=JOBSET_UID
    )
    engine = engine_for([*base_objects({"on-demand": {"nominal": 4}}), workload])
    for i in range(2):
        engine.store.apply("Pod", "ADDED", jobset_pod(f"train-workers-{i}-0", JOB_UIDS[i], marks="jobset-uid"))
    (unplaced,) = engine.unplaced_workloads(engine.snapshot())
    assert unplaced.workload == "team-a/jobset-train"
    assert unplaced.pending_pods == ("team-a/train-workers-0-0", "team-a/train-workers-1-0")
    assert unplaced.nodes_passing == 2  # its own pods are not refused for its own hold


def test_jobset_pod_without_kueue_marks_is_not_taken_for_its_workload() -> None:
    """Only the direct owner (a Job) and no mark: the JobSet's Workload is not this pod's, so the pod is judged
    against the hold like any other pod of the queue (what the marks above are for)."""
    workload = pod_sets_workload(
        "jobset-train", [("workers", 2, 4, "on-demand")], owner_kind="JobSet", owner_uid=JOBSET_UID
    )
    engine = engine_for([*base_objects({"on-demand": {"nominal": 4}}), workload])
    pod = jobset_pod("train-workers-0-0", JOB_UIDS[0], marks="jobset-uid")
    del pod["metadata"]["labels"][JOBSET_UID_LABEL]
    assert filter_pod(engine, pod).passed == []


def test_two_pod_sets_in_different_flavors_each_bind_in_their_own() -> None:
    """A job whose master pod set Kueue admitted to on-demand and workers to spot: the master passes only on
    on-demand nodes, a worker only on spot nodes, and each charge and hold stays in its own flavor."""
    workload = pod_sets_workload(
        "pytorch-train",
        [("master", 1, 2, "on-demand"), ("worker", 1, 2, "spot")],
        owner_kind="PyTorchJob",
        owner_uid="uid-pytorchjob",
    )
    engine = engine_for([*base_objects({"on-demand": {"nominal": 2}, "spot": {"nominal": 2}}), workload])
    assert engine.quota_view().admitted_holds == {OD: 2, SPOT: 2}
    master = b.owned_by(gpu_pod("train-master-0"), "uid-pytorchjob")
    master["metadata"]["labels"][POD_SET_LABEL] = "master"
    worker = b.owned_by(gpu_pod("train-worker-0"), "uid-pytorchjob")
    worker["metadata"]["labels"][POD_SET_LABEL] = "worker"
    master_decision = filter_pod(engine, master)
    assert sorted(master_decision.passed) == ["on-demand-0", "on-demand-1"]
    assert "to flavor on-demand" in master_decision.verdicts["spot-0"].reason
    worker_decision = filter_pod(engine, worker)
    assert sorted(worker_decision.passed) == ["spot-0", "spot-1"]
    bound(engine, master, "on-demand-0", ["gpu-0", "gpu-1"])
    bound(engine, worker, "spot-0", ["gpu-0", "gpu-1"])
    view = engine.quota_view()
    assert view.usage == {OD: 2, SPOT: 2} and view.admitted_holds == {}


def test_a_pod_set_taking_more_than_admitted_leaves_the_other_pod_sets_hold() -> None:
    """Pod sets a and b admitted 2 GPUs each in one flavor; a's pod takes 4 (more than Kueue admitted it for):
    a's hold is spent, b's 2 are still held for b's pod, never handed to the rest of the queue."""
    workload = pod_sets_workload(
        "two-sets", [("a", 1, 2, "on-demand"), ("b", 1, 2, "on-demand")], owner_kind="Job", owner_uid="uid-job"
    )
    engine = engine_for([*base_objects({"on-demand": {"nominal": 8}}), workload])
    pod_a = b.owned_by(gpu_pod("two-sets-a", template="four"), "uid-job")
    pod_a["metadata"]["labels"][POD_SET_LABEL] = "a"
    engine.store.apply("Pod", "ADDED", pod_a)
    bound(engine, pod_a, "on-demand-0", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"])
    view = engine.quota_view()
    assert view.usage == {OD: 4} and view.admitted_holds == {OD: 2}
    assert view.ledger.available(*OD) == 2


def test_pod_set_hold_counts_usage_of_pods_naming_no_pod_set_against_the_sum() -> None:
    key = ("cq", "f", RESOURCE)
    admitted = {"a": {key: Fraction(2)}, "b": {key: Fraction(2)}}
    assert pod_set_hold(admitted, {"a": {key: Fraction(5)}}) == {key: 2}
    assert pod_set_hold(admitted, {"a": {key: Fraction(1)}, "": {key: Fraction(2)}}) == {key: 1}
    assert pod_set_hold(admitted, {"": {key: Fraction(9)}}) == {}


def test_pod_group_member_finds_the_group_workload_by_name() -> None:
    """Kueue's pod group: the Workload is named after the group and owned by the pods it has seen; a member
    that names the group (annotation or label) belongs to it before it is listed as an owner."""
    group = b.workload("grp", "team-a", "team-a", {RESOURCE: 4}, "on-demand", owner_uid="uid-first", owner_kind="Pod")
    engine = engine_for([*base_objects({"on-demand": {"nominal": 4}}), group])
    for where in ("labels", "annotations"):
        member = gpu_pod(f"member-{where}")
        member["metadata"][where][POD_GROUP_NAME] = "grp"
        assert sorted(filter_pod(engine, member).passed) == ["on-demand-0", "on-demand-1"], where
    assert filter_pod(engine, gpu_pod("stranger")).passed == []


def test_named_workload_in_another_namespace_is_not_the_pods() -> None:
    workloads = {"team-b/w": parse_workload(b.workload("w", "team-b", "team-a", {RESOURCE: 2}, "x", owner_uid="o"))}
    pod = parse_pod(b.pod("p", "team-a", annotations={WORKLOAD_ANNOTATION: "w"}))
    assert pod_workload(pod, workloads, {}) is None


def test_a_pod_naming_no_pod_set_gets_only_the_flavors_its_pod_sets_agree_on() -> None:
    def flavors(pod_sets: list[tuple[str, str]], pod_set: str = "") -> dict[str, str]:
        obj = pod_sets_workload("w", [(ps, 1, 1, f) for ps, f in pod_sets], owner_kind="Job", owner_uid="o")
        pod = b.pod("p", "team-a")
        if pod_set:
            pod["metadata"]["labels"][POD_SET_LABEL] = pod_set
        return admitted_flavors_of_pod(parse_workload(obj), parse_pod(pod))

    assert flavors([("main", "fa")]) == {RESOURCE: "fa"}  # the only pod set
    assert flavors([("a", "fa"), ("b", "fb")]) == {}  # which one is unknown: neither flavor stands for it
    assert flavors([("a", "fa"), ("b", "fa")]) == {RESOURCE: "fa"}
    assert flavors([("a", "fa"), ("b", "fb")], "b") == {RESOURCE: "fb"}


# --- capacity and counter names -----------------------------------------------------------------------------------


def capacity_mapping(name: str) -> dict[str, Any]:
    source = {"capacity": {"name": name, "driver": DRIVER, "deviceSelector": {}}}
    return kueue_mappings([{"name": "gpu-memory", "deviceClassNames": [CLASS], "sources": [source]}])


def capacity_engine(name: str, *extra: dict[str, Any]) -> Any:
    return engine_for(
        base(
            b.device_class(),
            capacity_mapping(name),
            rflavor("default"),
            *gpu_node("n1", 4),
            cq("team-a", [(["gpu-memory"], [("default", {"gpu-memory": "160Gi"})])]),
            b.claim_template("two", "team-a", [b.exact_request("gpu", 2)]),
            *extra,
        )
    )


@pytest.mark.parametrize("name", ["memory", f"{DRIVER}/memory"])
def test_capacity_source_spelled_either_way_is_the_devices_capacity(name: str) -> None:
    """The slice publishes `memory` (unqualified: the driver's domain); Kueue's spelling `memory` and the
    qualified `<driver>/memory` are one capacity."""
    engine = capacity_engine(name)
    first = run(engine, b.pod("p", "team-a", templates={"gpu": "two"}, queue="q"))
    assert first.reservation == {("team-a", "default", "gpu-memory"): Fraction(160 * GI)}
    assert run(engine, b.pod("p2", "team-a", templates={"gpu": "two"}, queue="q")).passed == []


def test_capacity_of_another_domain_is_not_the_drivers() -> None:
    engine = capacity_engine("other.example.com/memory")
    verdict = run(engine, b.pod("p", "team-a", templates={"gpu": "two"}, queue="q")).verdicts["n1"]
    assert not verdict.passed and "publishes no capacity other.example.com/memory" in verdict.reason


def test_counter_source_qualified_with_its_driver_is_the_slices_counter() -> None:
    from tests.decisions.quota.test_dra_charges_and_flavors import counter_mapping, mig_objects

    engine = engine_for(mig_objects("30Gi", counter_mapping(counter=f"{DRIVER}/memory")))
    small = run(engine, b.pod("s", "team-a", templates={"gpu": "small"}, queue="q"))
    assert small.reservation == {("team-a", "default", "gpu-memory"): Fraction(10 * GI)}


def test_usage_a_device_cannot_be_charged_is_shown_not_counted_as_zero_in_silence() -> None:
    """A bound pod whose allocated device does not publish the mapping's capacity: no usage can be computed for
    it, and the drift report names the pod and why."""
    claim = b.claim(
        "held",
        "team-a",
        [b.exact_request("gpu", 1)],
        allocated=[("gpu", "n1", "gpu-0")],
        reserved_for=[("holder", "uid-team-a-holder")],
    )
    holder = b.pod("holder", "team-a", claims={"gpu": "held"}, queue="q", node_name="n1")
    engine = engine_for(
        base(
            b.device_class(),
            capacity_mapping("bandwidth"),
            rflavor("default"),
            *gpu_node("n1", 4),
            cq("team-a", [(["gpu-memory"], [("default", {"gpu-memory": "160Gi"})])]),
            claim,
            holder,
        )
    )
    assert engine.quota_view().usage == {}
    (uncharged,) = engine.uncharged_pods()
    assert uncharged.pod == "team-a/holder" and uncharged.node == "n1"
    (error,) = uncharged.errors
    assert "claim team-a/held" in error and "publishes no capacity bandwidth" in error
    # the same pod, once the mapping names what the device publishes, is charged and no longer listed
    fixed = copy.deepcopy(capacity_mapping("memory"))
    engine.store.apply("ConfigMap", "MODIFIED", fixed)
    assert engine.quota_view().usage == {("team-a", "default", "gpu-memory"): Fraction(80 * GI)}
    assert engine.uncharged_pods() == []
