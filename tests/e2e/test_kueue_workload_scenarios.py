"""Kueue's real workloads with Kueue v0.19.2's controller in the loop: JobSets, a job whose pod sets Kueue
admits to different flavors, and a capacity mapping spelled as the slices spell the capacity.

`kueue_workloads_plane` (tests/e2e/conftest.py) runs Kueue with the batch/job and jobset integrations, the JobSet
CRD of the JobSet module Kueue v0.19.2 builds against (sigs.k8s.io/jobset v0.12.0), and a deviceClassMapping
charging a second DeviceClass of the example GPUs by their capacity `memory`.

No JobSet controller runs: its module is served at v0.12.0, but it needs its own webhook server and
certificates, which the test kit does not provide. The scenarios create what it creates once Kueue unsuspends a
JobSet (sigs.k8s.io/jobset v0.12.0 pkg/controllers/jobset_controller.go constructJob, labelAndAnnotateObject):
per replicated job and index a Job `<jobset>-<replicatedJob>-<index>`, controller-owned by the JobSet, from the
replicated job's template as Kueue left it (its pod set label, Workload annotation, queue labels and the
flavor's node selector merged in), with the JobSet's name, uid, replicated job name and job index as labels and
annotations of the Job and of its pod template. The Job controller then creates the pods, owned by the Jobs:
the exact owner chain JobSet -> Job -> Pod, with Kueue's Workload owned by the JobSet.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from testkit import builders as b
from testkit import scenarios as ts
from testkit.control_plane import pod_manifest, wait_until
from tests.e2e.conftest import CAPACITY_CLASS, CAPACITY_RESOURCE, KueueControlPlane
from tests.e2e.scenarios import (
    GPU,
    KUEUE_GROUP,
    KUEUE_VERSION,
    QUEUE_LABEL,
    SCENARIO_LABEL,
    extender_get,
)
from tests.e2e.test_kueue_scenarios import (
    CLUSTER_QUEUE_LABEL,
    KUEUE_TIMEOUT,
    LOCAL_QUEUE_LABEL,
    SCHEDULE_TIMEOUT,
    SYNC_TIMEOUT,
    KueueScenario,
    condition,
    is_true,
)

pytestmark = pytest.mark.e2e

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
POD_SET_LABEL = "kueue.x-k8s.io/podset"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
GI = 1024**3


class WorkloadScenario(KueueScenario):
    """KueueScenario plus JobSets (and the Jobs their controller would create) and queues of any resource."""

    jobsets: list[str]

    def add_resource_queue(self, name: str, resource: str, quotas: dict[str, str]) -> str:
        """A ClusterQueue covering only `resource` (flavor -> nominal quota) and its LocalQueue; waits until
        Kueue reports both Active and the extender shows the queue."""
        spec = {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": [resource],
                    "flavors": [
                        {"name": f, "resources": [{"name": resource, "nominalQuota": n}]} for f, n in quotas.items()
                    ],
                }
            ],
        }
        body = {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "ClusterQueue", "metadata": {"name": name}}
        self.plane.custom.create_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", {**body, "spec": spec}
        )
        self.plane.custom.create_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, self.namespace, "localqueues", ts.local_queue(self.namespace, name, name)
        )
        self.cluster_queues[name] = name
        wait_until(lambda: is_true(self.cluster_queue(name), "Active"), timeout=KUEUE_TIMEOUT, message="CQ Active")
        wait_until(lambda: is_true(self.local_queue(name), "Active"), timeout=KUEUE_TIMEOUT, message="LQ Active")
        wait_until(
            lambda: any(q["name"] == name for q in extender_get(self.url, "/diagnostics/queues")["clusterQueues"]),
            timeout=SYNC_TIMEOUT,
            message=f"the extender to show ClusterQueue {name}",
        )
        return name

    # JobSets ------------------------------------------------------------------------------------------------

    def create_jobset(self, name: str, queue: str, replicated: list[tuple[str, int, str]]) -> None:
        """A JobSet labelled with the LocalQueue (on the JobSet only, as Kueue documents): per (replicated job,
        replicas, claim template), Jobs of one pod each with one claim from the template."""
        replicated_jobs = []
        for rj_name, replicas, template in replicated:
            pod_spec = {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "automountServiceAccountToken": False,
                "nodeSelector": {SCENARIO_LABEL: self.name},
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
                "containers": [
                    {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"claims": [{"name": "gpu"}]}}
                ],
            }
            job_spec = {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {"spec": pod_spec}}
            replicated_jobs.append({"name": rj_name, "replicas": replicas, "template": {"spec": job_spec}})
        body = {
            "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
            "kind": "JobSet",
            "metadata": {"name": name, "namespace": self.namespace, "labels": {QUEUE_LABEL: queue}},
            "spec": {"replicatedJobs": replicated_jobs},
        }
        self.plane.custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, self.namespace, "jobsets", body)

    def jobset(self, name: str) -> dict[str, Any]:
        return dict(
            self.plane.custom.get_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, self.namespace, "jobsets", name
            )
        )

    def jobset_workload(self, name: str) -> dict[str, Any] | None:
        uid = self.jobset(name)["metadata"]["uid"]
        workloads = self.plane.custom.list_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, self.namespace, "workloads"
        )["items"]
        for workload in workloads:
            if any(o.get("uid") == uid for o in workload["metadata"].get("ownerReferences") or []):
                return dict(workload)
        return None

    def wait_jobset_admitted(self, name: str) -> dict[str, Any]:
        workload = wait_until(
            lambda: (w := self.jobset_workload(name)) is not None and is_true(w, "Admitted") and w,
            timeout=KUEUE_TIMEOUT,
            message=f"Workload of JobSet {name} Admitted",
        )
        wait_until(
            lambda: self.jobset(name)["spec"].get("suspend") is False,
            timeout=KUEUE_TIMEOUT,
            message=f"Kueue to unsuspend JobSet {name}",
        )
        return dict(workload)

    def run_jobset_controller(self, name: str) -> list[str]:
        """What the JobSet controller does for an unsuspended JobSet: its Jobs, from the templates Kueue
        updated (names of the Jobs created)."""
        jobset = self.jobset(name)
        uid = jobset["metadata"]["uid"]
        owner = {
            "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
            "kind": "JobSet",
            "name": name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        created = []
        for replicated in jobset["spec"]["replicatedJobs"]:
            for index in range(int(replicated.get("replicas", 1))):
                job_name = f"{name}-{replicated['name']}-{index}"
                marks = {JOBSET_NAME: name, JOBSET_UID: uid, REPLICATED_JOB: replicated["name"], JOB_INDEX: str(index)}
                spec = copy.deepcopy(replicated["template"]["spec"])
                template_meta = spec["template"].setdefault("metadata", {})
                template_meta["labels"] = {**(template_meta.get("labels") or {}), **marks}
                template_meta["annotations"] = {**(template_meta.get("annotations") or {}), **marks}
                job = {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": job_name,
                        "namespace": self.namespace,
                        "labels": dict(marks),
                        "annotations": dict(marks),
                        "ownerReferences": [owner],
                    },
                    "spec": spec,
                }
                self.batch.create_namespaced_job(self.namespace, job)
                created.append(job_name)
        self.jobsets.append(name)
        return created

    def jobset_pods(self, name: str) -> list[k8s.V1Pod]:
        return self.plane.core.list_namespaced_pod(self.namespace, label_selector=f"{JOBSET_NAME}={name}").items

    def wait_jobset_bound(self, name: str, count: int) -> dict[str, str]:
        def bound() -> dict[str, str] | None:
            pods = {p.metadata.name: p.spec.node_name for p in self.jobset_pods(name) if p.spec.node_name}
            return pods if len(pods) >= count else None

        try:
            return dict(wait_until(bound, timeout=SCHEDULE_TIMEOUT, message=f"{count} pod(s) of JobSet {name} bound"))
        except TimeoutError as exc:
            refusals = {p.metadata.name: self.failed_scheduling(p.metadata.name)[-1:] for p in self.jobset_pods(name)}
            raise AssertionError(f"{exc}; FailedScheduling: {refusals}") from exc

    def queue_row(self, cq: str, flavor: str, resource: str = GPU) -> dict[str, Any]:
        for queue in extender_get(self.url, "/diagnostics/queues")["clusterQueues"]:
            if queue["name"] == cq:
                for row in queue["resources"]:
                    if row["flavor"] == flavor and row["resource"] == resource:
                        return dict(row)
        return {}

    def wait_row(self, cq: str, flavor: str, expected: dict[str, Any], resource: str = GPU) -> dict[str, Any]:
        def matches() -> dict[str, Any] | None:
            row = self.queue_row(cq, flavor, resource)
            return row if all(row.get(k) == v for k, v in expected.items()) else None

        try:
            return dict(wait_until(matches, timeout=SYNC_TIMEOUT, message=f"{cq}/{flavor}/{resource} {expected}"))
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; the extender's row: {self.queue_row(cq, flavor, resource)}") from exc

    def kueue_usage(self, cq: str, resource: str = GPU) -> dict[str, str]:
        totals: dict[str, str] = {}
        for flavor in (self.cluster_queue(cq).get("status") or {}).get("flavorsUsage") or []:
            for entry in flavor.get("resources") or []:
                if entry.get("name") == resource and entry.get("total") not in (None, "0"):
                    totals[flavor["name"]] = str(entry["total"])
        return totals

    def cleanup(self) -> None:
        for name in self.jobsets:
            try:
                self.plane.custom.delete_namespaced_custom_object(
                    JOBSET_GROUP, JOBSET_VERSION, self.namespace, "jobsets", name
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
        super().cleanup()


@pytest.fixture
def scenario(kueue_workloads_plane: KueueControlPlane, request: pytest.FixtureRequest) -> Iterator[WorkloadScenario]:
    name = "kw-" + "-".join(request.node.name.removeprefix("test_").split("_")[:2])
    namespace = f"{name}-{uuid.uuid4().hex[:6]}"
    kueue_workloads_plane.plane.create_namespace(namespace)
    scenario = WorkloadScenario(kueue_workloads_plane.plane, kueue_workloads_plane.extender_url, name, namespace)
    scenario.jobsets = []
    try:
        yield scenario
    finally:
        print(f"scenario {name}: {time.monotonic() - scenario.started:.1f}s")
        kueue_workloads_plane.plane.check_alive()
        scenario.cleanup()


def assignments(workload: dict[str, Any]) -> dict[str, tuple[str, int, int]]:
    """Pod set -> (flavor of example.com/gpu, count, GPUs) of Kueue's admission."""
    return {
        a["name"]: (a["flavors"][GPU], int(a["count"]), int(a["resourceUsage"][GPU]))
        for a in workload["status"]["admission"]["podSetAssignments"]
    }


# --- scenarios ---------------------------------------------------------------------------------------------


def test_jobset_admitted_by_kueue_binds_whole_and_charges_once(scenario: WorkloadScenario) -> None:
    """ClusterQueue nominal 4, a JobSet of two Jobs of one 2-GPU pod each. Kueue owns the Workload by the JobSet,
    the pods are owned by the Jobs: the extender finds the Workload through Kueue's marks on the pods, so the
    pods are decided without their own Workload's hold and both bind; as they bind the hold turns into usage
    (4 in all, admitted pending 0), and Kueue's flavorsUsage says the same."""
    s = scenario
    s.add_nodes("gpu", 2, gpus=2)
    flavor = s.add_flavor(f"{s.name}-gpu", "gpu")
    q = s.add_queue(f"{s.name}-q", {flavor: 4})
    s.add_template("two-gpus", [b.exact_request("gpu", 2)])
    s.create_jobset("train", q, [("workers", 2, "two-gpus")])
    workload = s.wait_jobset_admitted("train")
    assert assignments(workload) == {"workers": (flavor, 2, 4)}
    s.wait_row(q, flavor, {"usage": 0, "admittedPending": 4, "available": 0})
    assert s.run_jobset_controller("train") == ["train-workers-0", "train-workers-1"]
    placed = s.wait_jobset_bound("train", 2)
    assert len(set(placed.values())) == 2, placed  # one 2-GPU pod per 2-GPU node
    for pod in s.jobset_pods("train"):
        labels, annotations = pod.metadata.labels or {}, pod.metadata.annotations or {}
        # what Kueue stamped on the template, and the owner chain JobSet -> Job -> Pod
        assert labels.get(POD_SET_LABEL) == "workers" and labels.get(LOCAL_QUEUE_LABEL) == q, labels
        assert labels.get(CLUSTER_QUEUE_LABEL) == q and QUEUE_LABEL not in labels, labels
        assert annotations.get(WORKLOAD_ANNOTATION) == workload["metadata"]["name"], annotations
        (owner,) = pod.metadata.owner_references
        assert owner.kind == "Job" and owner.name.startswith("train-workers-"), owner
    s.wait_row(q, flavor, {"usage": 4, "admittedPending": 0, "available": 0})
    wait_until(lambda: s.kueue_usage(q) == {flavor: "4"}, timeout=KUEUE_TIMEOUT, message="Kueue flavorsUsage 4")
    report = extender_get(s.url, "/diagnostics/queues")
    assert not [w for w in report["admittedNotPlaced"] if w["clusterQueue"] == q], report["admittedNotPlaced"]


def test_two_pod_sets_admitted_to_different_flavors_both_bind(scenario: WorkloadScenario) -> None:
    """Flavors fa then fb, 2 GPUs of quota each; a JobSet with a 2-GPU leader and a 2-GPU worker. Kueue admits
    the leader's pod set to fa and the workers' to fb (fa is full once the leader has it). Each pod is held to
    its own pod set's flavor, so both bind, each in its flavor, charged there."""
    s = scenario
    s.add_nodes("a", 1, gpus=2)
    s.add_nodes("b", 1, gpus=2)
    fa = s.add_flavor(f"{s.name}-fa", "a")
    fb = s.add_flavor(f"{s.name}-fb", "b")
    q = s.add_queue(f"{s.name}-q", {fa: 2, fb: 2})
    s.add_template("two-gpus", [b.exact_request("gpu", 2)])
    s.create_jobset("pt", q, [("leader", 1, "two-gpus"), ("workers", 1, "two-gpus")])
    workload = s.wait_jobset_admitted("pt")
    assert assignments(workload) == {"leader": (fa, 1, 2), "workers": (fb, 1, 2)}
    s.run_jobset_controller("pt")
    placed = s.wait_jobset_bound("pt", 2)
    for pod in s.jobset_pods("pt"):
        pod_set = (pod.metadata.labels or {})[POD_SET_LABEL]
        expected = fa if pod_set == "leader" else fb
        assert s.flavor_of(placed[pod.metadata.name]) == expected, (pod.metadata.name, placed)
    s.wait_row(q, fa, {"usage": 2, "admittedPending": 0})
    s.wait_row(q, fb, {"usage": 2, "admittedPending": 0})


def test_capacity_mapping_spelled_memory_charges_the_devices_memory(scenario: WorkloadScenario) -> None:
    """Kueue's mapping names the capacity `memory`, as the example driver's slices publish it (unqualified: the
    driver's domain). Quota 160Gi of example.com/gpu-memory, 80Gi GPUs: Kueue admits two 1-GPU Jobs and holds
    the third; the extender charges the same 80Gi per device, so both admitted pods bind and its usage is
    Kueue's 160Gi; a pod outside Kueue is then refused for quota, not for a capacity it cannot find."""
    s = scenario
    s.add_nodes("gpu", 1, gpus=4)
    flavor = s.add_flavor(f"{s.name}-gpu", "gpu")
    q = s.add_resource_queue(f"{s.name}-q", CAPACITY_RESOURCE, {flavor: "160Gi"})
    one = {"name": "gpu", "exactly": {"deviceClassName": CAPACITY_CLASS, "allocationMode": "ExactCount", "count": 1}}
    s.add_template("one-mem", [one])
    for job in ("m1", "m2", "m3"):
        s.create_job(job, q, "one-mem", pod_label=False)
    for job in ("m1", "m2"):
        admitted = s.wait_workload(job, "Admitted")
        (assignment,) = admitted["status"]["admission"]["podSetAssignments"]
        assert assignment["resourceUsage"] == {CAPACITY_RESOURCE: "80Gi"}, assignment
    for job in ("m1", "m2"):
        s.wait_job_pods_bound(job, 1)
    pending = s.workload_of("m3")
    assert pending is not None and not is_true(pending, "QuotaReserved"), condition(pending or {}, "QuotaReserved")
    s.wait_row(q, flavor, {"usage": 160 * GI, "admittedPending": 0, "available": 0}, CAPACITY_RESOURCE)
    wait_until(
        lambda: s.kueue_usage(q, CAPACITY_RESOURCE) == {flavor: "160Gi"},
        timeout=KUEUE_TIMEOUT,
        message="Kueue flavorsUsage 160Gi",
    )
    outsider = pod_manifest(s.namespace, "outsider", claim_templates={"gpu": "one-mem"}, labels={QUEUE_LABEL: q})
    outsider["spec"]["nodeSelector"] = {SCENARIO_LABEL: s.name}
    s.plane.create_pod(outsider)
    refusal = wait_until(
        lambda: [m for m in s.failed_scheduling("outsider") if "quota exhausted" in m],
        timeout=SCHEDULE_TIMEOUT,
        message="the outsider refused for quota",
    )
    assert "publishes no capacity" not in refusal[-1], refusal
    report = extender_get(s.url, "/diagnostics/queues")
    assert report["unchargedPods"] == [], report["unchargedPods"]
