"""Real Kueue in the loop: Kueue v0.19.2's controller admits Jobs, kube-scheduler places their pods through
our extender.

`kueue_control_plane` runs etcd, kube-apiserver, kube-controller-manager (with the Job controller),
Kueue's controller manager (batch/job integration, DRA integration charging gpu.example.com as
example.com/gpu at admission), our extender and a kube-scheduler calling it. A Job labelled with a LocalQueue
is suspended by Kueue's webhook, gets a Workload, is admitted (QuotaReserved, Admitted) into a flavor and
unsuspended with the flavor's nodeLabels injected as nodeSelector; the Job controller creates its pods; the
resourceclaim controller makes their claims; kube-scheduler asks our extender which nodes have the devices
and the per-node quota; the in-tree DynamicResources plugin allocates in PreBind.

The Jobs' pod templates carry the LocalQueue label (`kueue.x-k8s.io/queue-name`) too: that label is how the
extender finds a pod's ClusterQueue. Kueue v0.19.2 itself labels Job pods `kueue.x-k8s.io/local-queue-name`
and `kueue.x-k8s.io/cluster-queue-name` (AssignQueueLabelsForPods), not `queue-name`; see
`test_job_labelled_only_on_the_job_is_quota_governed` for a Job without the pod-template label.

There are no kubelets: pods are bound but never run. A Job "finishes" because the test sets its pods' phase to
Succeeded through the status subresource (what a kubelet reports): the Job controller then counts them, marks
the Job Complete, Kueue marks the Workload Finished and releases its quota. Each scenario has its own
namespace, nodes (labelled SCENARIO_LABEL=<scenario>), ResourceFlavors and ClusterQueues.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from testkit import builders
from testkit import scenarios as ts
from testkit.control_plane import ControlPlane, pod_manifest, wait_until
from tests.e2e.conftest import KueueControlPlane
from tests.e2e.scenarios import (
    GPU,
    KUEUE_GROUP,
    KUEUE_VERSION,
    POOL_LABEL,
    QUEUE_LABEL,
    SCENARIO_LABEL,
    delete_cluster_object,
    extender_get,
    extender_post,
    node_devices,
    queue_rows,
)

pytestmark = pytest.mark.e2e

CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"  # put on pods by Kueue (AssignQueueLabelsForPods)
LOCAL_QUEUE_LABEL = "kueue.x-k8s.io/local-queue-name"
SCHEDULE_TIMEOUT = 90.0
KUEUE_TIMEOUT = 60.0  # Kueue admits within a second; this bounds a stuck reconcile
SYNC_TIMEOUT = 30.0


# --- Kueue objects -------------------------------------------------------------------------------------


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for entry in (obj.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return dict(entry)
    return None


def is_true(obj: dict[str, Any], kind: str) -> bool:
    entry = condition(obj, kind)
    return entry is not None and entry.get("status") == "True"


def flavor_totals(cq: dict[str, Any], field_name: str) -> dict[str, int]:
    """ClusterQueue status.flavorsReservation / flavorsUsage for example.com/gpu, by flavor (non-zero only)."""
    totals: dict[str, int] = {}
    for flavor in (cq.get("status") or {}).get(field_name) or []:
        for resource in flavor.get("resources") or []:
            if resource.get("name") == GPU and int(resource.get("total") or 0):
                totals[flavor["name"]] = int(resource["total"])
    return totals


def extender_usage(url: str, cq: str) -> dict[str, int]:
    return {flavor: int(row["usage"]) for flavor, row in queue_rows(url, cq).items() if row["usage"]}


# --- a scenario ----------------------------------------------------------------------------------------


@dataclass
class KueueScenario:
    plane: ControlPlane
    url: str
    name: str
    namespace: str
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    flavors: dict[str, dict[str, str]] = field(default_factory=dict)
    cluster_queues: dict[str, str] = field(default_factory=dict)  # LocalQueue -> ClusterQueue
    started: float = field(default_factory=time.monotonic)

    @property
    def batch(self) -> k8s.BatchV1Api:
        return k8s.BatchV1Api(self.plane.client)

    # setup ----------------------------------------------------------------------------------------------

    def add_nodes(self, pool: str, count: int, gpus: int) -> list[str]:
        names = [f"{self.name}-{pool}-{i}" for i in range(1, count + 1)]
        for node in names:
            labels = {SCENARIO_LABEL: self.name, POOL_LABEL: pool}
            self.plane.create_node(node, labels=labels)
            self.plane.publish_gpus(node, count=gpus)
            self.nodes[node] = labels
        for node in names:
            wait_until(
                lambda n=node: node_devices(self.url, n) == gpus,
                timeout=SYNC_TIMEOUT,
                message=f"the extender to see node {node} with {gpus} devices",
            )
        return names

    def add_flavor(self, name: str, pool: str) -> str:
        labels = {SCENARIO_LABEL: self.name, POOL_LABEL: pool}
        self.plane.custom.create_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", ts.flavor(name, labels)
        )
        self.flavors[name] = labels
        return name

    def add_queue(self, name: str, quotas: dict[str, int], cohort: str | None = None) -> str:
        """A ClusterQueue and a LocalQueue of the same name; waits until Kueue reports the ClusterQueue Active
        and the extender shows it with this quota."""
        self.plane.custom.create_cluster_custom_object(
            KUEUE_GROUP,
            KUEUE_VERSION,
            "clusterqueues",
            ts.cluster_queue(name, {f: {"nominal": n} for f, n in quotas.items()}, cohort=cohort),
        )
        self.plane.custom.create_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, self.namespace, "localqueues", ts.local_queue(self.namespace, name, name)
        )
        self.cluster_queues[name] = name
        wait_until(
            lambda: is_true(self.cluster_queue(name), "Active"),
            timeout=KUEUE_TIMEOUT,
            message=f"ClusterQueue {name} Active",
        )
        wait_until(
            lambda: is_true(self.local_queue(name), "Active"),
            timeout=KUEUE_TIMEOUT,
            message=f"LocalQueue {name} Active",
        )

        def seen() -> bool:
            for queue in extender_get(self.url, "/diagnostics/queues")["clusterQueues"]:
                if queue["name"] == name:
                    nominal = {r["flavor"]: r["nominal"] for r in queue["resources"] if r["resource"] == GPU}
                    return not queue["problem"] and nominal == quotas
            return False

        wait_until(seen, timeout=SYNC_TIMEOUT, message=f"the extender to show ClusterQueue {name}")
        return name

    def add_template(self, name: str, requests: list[dict[str, Any]]) -> str:
        self.plane.resource.create_namespaced_resource_claim_template(
            self.namespace, builders.claim_template(name, self.namespace, requests)
        )
        return name

    # jobs -----------------------------------------------------------------------------------------------

    def job_manifest(
        self, name: str, queue: str, template: str, pods: int = 1, pod_label: bool = True
    ) -> dict[str, Any]:
        """A Job of ``pods`` parallel pods, each with one claim from ``template``. No cpu/memory requests: the
        ClusterQueues cover only example.com/gpu. ``pod_label``: the pod template carries the LocalQueue
        label too (the extender's key to the pod's ClusterQueue)."""
        pod_labels = {QUEUE_LABEL: queue} if pod_label else {}
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": self.namespace, "labels": {QUEUE_LABEL: queue}},
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": pod_labels},
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 0,
                        "automountServiceAccountToken": False,
                        "nodeSelector": {SCENARIO_LABEL: self.name},
                        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
                        "containers": [
                            {
                                "name": "main",
                                "image": "registry.k8s.io/pause:3.10",
                                "resources": {"claims": [{"name": "gpu"}]},
                            }
                        ],
                    },
                },
            },
        }

    def create_job(self, name: str, queue: str, template: str, pods: int = 1, pod_label: bool = True) -> None:
        self.batch.create_namespaced_job(self.namespace, self.job_manifest(name, queue, template, pods, pod_label))

    def job(self, name: str) -> k8s.V1Job:
        return self.batch.read_namespaced_job(name, self.namespace)

    def workload_of(self, job: str) -> dict[str, Any] | None:
        uid = self.job(job).metadata.uid
        workloads = self.plane.custom.list_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, self.namespace, "workloads"
        )["items"]
        for workload in workloads:
            if any(o.get("uid") == uid for o in workload["metadata"].get("ownerReferences") or []):
                return dict(workload)
        return None

    def wait_workload(self, job: str, kind: str, status: str = "True", timeout: float = KUEUE_TIMEOUT) -> dict:
        """The Job's Workload once its condition ``kind`` has ``status``."""

        def ready() -> dict[str, Any] | None:
            workload = self.workload_of(job)
            entry = condition(workload, kind) if workload else None
            return workload if entry is not None and entry.get("status") == status else None

        return wait_until(ready, timeout=timeout, message=f"Workload of Job {job}: {kind}={status}")

    def cluster_queue(self, name: str) -> dict[str, Any]:
        return dict(self.plane.custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name))

    def local_queue(self, name: str) -> dict[str, Any]:
        return dict(
            self.plane.custom.get_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, self.namespace, "localqueues", name
            )
        )

    def job_pods(self, job: str) -> list[k8s.V1Pod]:
        return self.plane.core.list_namespaced_pod(self.namespace, label_selector=f"job-name={job}").items

    def wait_job_pods_bound(self, job: str, count: int, timeout: float = SCHEDULE_TIMEOUT) -> dict[str, str]:
        """Pod -> node once ``count`` pods of the Job are bound."""

        def bound() -> dict[str, str] | None:
            pods = {p.metadata.name: p.spec.node_name for p in self.job_pods(job) if p.spec.node_name}
            return pods if len(pods) >= count else None

        return wait_until(bound, timeout=timeout, message=f"{count} pod(s) of Job {job} to be bound")

    def finish_job(self, job: str) -> None:
        """What kubelets would report: every pod of the Job ran to completion (phase Succeeded)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for pod in self.job_pods(job):
            status = {
                "status": {
                    "phase": "Succeeded",
                    "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
                    "containerStatuses": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now}},
                        }
                    ],
                }
            }
            self.plane.core.patch_namespaced_pod_status(pod.metadata.name, self.namespace, status)

    # what is allocated ------------------------------------------------------------------------------------

    def flavor_of(self, node: str) -> str | None:
        labels = self.nodes.get(node, {})
        for flavor, selector in self.flavors.items():
            if all(labels.get(k) == v for k, v in selector.items()):
                return flavor
        return None

    def allocated(self) -> dict[str, dict[str, int]]:
        """ClusterQueue -> flavor -> devices in the allocated claims of the bound, not finished pods (from a
        fresh list of the API), attributed through the pod's LocalQueue label and the flavor of its node."""
        claims = {c.metadata.name: c for c in self.plane.resource.list_namespaced_resource_claim(self.namespace).items}
        usage: dict[str, Counter[str]] = {}
        for pod in self.plane.core.list_namespaced_pod(self.namespace).items:
            if not pod.spec.node_name or pod.status.phase in ("Succeeded", "Failed") or pod.metadata.deletion_timestamp:
                continue
            cq = self.cluster_queues.get((pod.metadata.labels or {}).get(QUEUE_LABEL, ""))
            flavor = self.flavor_of(pod.spec.node_name)
            if cq is None or flavor is None:
                continue
            for status in pod.status.resource_claim_statuses or []:
                claim = claims.get(status.resource_claim_name or "")
                if claim is not None and claim.status and claim.status.allocation:
                    usage.setdefault(cq, Counter())[flavor] += len(claim.status.allocation.devices.results)
        return {cq: dict(c) for cq, c in usage.items()}

    def claim_nodes(self, pod: k8s.V1Pod) -> set[str]:
        """The nodes of the devices allocated to the pod's claims (pool = node for the example driver)."""
        nodes = set()
        for claim in self.plane.pod_claims(self.namespace, pod.metadata.name):
            assert claim.status and claim.status.allocation, f"claim {claim.metadata.name} is not allocated"
            nodes.update(r.pool for r in claim.status.allocation.devices.results)
        return nodes

    def failed_scheduling(self, pod: str) -> list[str]:
        return [e.message or "" for e in self.plane.events_for(self.namespace, pod, "FailedScheduling")]

    # teardown ---------------------------------------------------------------------------------------------

    def cleanup(self) -> None:
        for job in self.batch.list_namespaced_job(self.namespace).items:
            try:
                self.batch.delete_namespaced_job(job.metadata.name, self.namespace, propagation_policy="Background")
            except ApiException as exc:
                if exc.status != 404:
                    raise
        self.plane.delete_namespace(self.namespace)
        for name in self.cluster_queues.values():
            delete_cluster_object(self.plane, "clusterqueues", name)
        for name in self.flavors:
            delete_cluster_object(self.plane, "resourceflavors", name)


@pytest.fixture
def scenario(kueue_control_plane: KueueControlPlane, request: pytest.FixtureRequest) -> Iterator[KueueScenario]:
    name = "kq-" + "-".join(request.node.name.removeprefix("test_").split("_")[:2])
    namespace = f"{name}-{uuid.uuid4().hex[:6]}"
    kueue_control_plane.plane.create_namespace(namespace)
    scenario = KueueScenario(kueue_control_plane.plane, kueue_control_plane.extender_url, name, namespace)
    try:
        yield scenario
    finally:
        print(f"scenario {name}: {time.monotonic() - scenario.started:.1f}s")
        kueue_control_plane.plane.check_alive()
        scenario.cleanup()


# --- helpers for assertions --------------------------------------------------------------------------------


def assert_admitted(workload: dict[str, Any], cq: str, flavor: str, pods: int, gpus_per_pod: int) -> None:
    """Kueue admitted the Workload into ``flavor`` of ``cq`` and charged pods x gpus_per_pod example.com/gpu."""
    assert is_true(workload, "QuotaReserved") and is_true(workload, "Admitted"), workload["status"]
    admission = workload["status"]["admission"]
    assert admission["clusterQueue"] == cq
    (assignment,) = admission["podSetAssignments"]
    assert assignment["flavors"] == {GPU: flavor}
    assert int(assignment["resourceUsage"][GPU]) == pods * gpus_per_pod, assignment
    assert assignment["count"] == pods


def wait_usage_agrees(scenario: KueueScenario, expected: dict[str, dict[str, int]]) -> None:
    """The extender's /diagnostics/queues usage equals ``expected`` (ClusterQueue -> flavor -> devices) and
    equals what a fresh list of the API shows allocated to bound pods."""
    queues = list(scenario.cluster_queues.values())

    def agrees() -> bool:
        ours = {cq: extender_usage(scenario.url, cq) for cq in queues}
        allocated = scenario.allocated()
        return ours == {cq: expected.get(cq, {}) for cq in queues} and all(
            allocated.get(cq, {}) == expected.get(cq, {}) for cq in queues
        )

    try:
        wait_until(agrees, timeout=SYNC_TIMEOUT, message=f"extender usage = allocated = {expected}")
    except TimeoutError as exc:
        ours = {cq: extender_usage(scenario.url, cq) for cq in queues}
        raise AssertionError(f"{exc}; extender usage {ours}, allocated {scenario.allocated()}") from exc


def wait_kueue_totals(scenario: KueueScenario, cq: str, field_name: str, expected: dict[str, int]) -> dict:
    """The ClusterQueue once Kueue's status.<field_name> (flavorsReservation / flavorsUsage) equals ``expected``."""

    def matches() -> dict[str, Any] | None:
        queue = scenario.cluster_queue(cq)
        return queue if flavor_totals(queue, field_name) == expected else None

    return wait_until(
        matches,
        timeout=KUEUE_TIMEOUT,
        message=f"ClusterQueue {cq} status.{field_name} = {expected}",
    )


def assert_placed(scenario: KueueScenario, job: str, flavor: str) -> dict[str, str]:
    """Every bound pod of the Job is on a node of ``flavor`` and its claim's devices are on that node."""
    placed = {}
    for pod in scenario.job_pods(job):
        if not pod.spec.node_name:
            continue
        node = pod.spec.node_name
        assert scenario.flavor_of(node) == flavor, f"{pod.metadata.name} on {node}, not in flavor {flavor}"
        assert scenario.claim_nodes(pod) == {node}, f"{pod.metadata.name}'s devices are not on {node}"
        # Kueue injected the flavor's nodeLabels and its queue labels into the pod template
        assert pod.spec.node_selector.get(POOL_LABEL) == scenario.flavors[flavor][POOL_LABEL]
        placed[pod.metadata.name] = node
    return placed


# --- scenarios ---------------------------------------------------------------------------------------------


def test_admit_and_place_two_queues_in_a_cohort(scenario: KueueScenario) -> None:
    """Two ClusterQueues (nominal 4 each) share a cohort over one flavor of 3 nodes x 4 GPUs. Kueue admits
    a 2x2-GPU Job in a and a 1x2 Job in b, then a third Job in a by borrowing b's unused 2; our extender places
    every pod where its devices are free, and its usage equals what is allocated and Kueue's flavorsUsage."""
    s = scenario
    s.add_nodes("gpu", 3, gpus=4)
    flavor = s.add_flavor(f"{s.name}-gpu", "gpu")
    cohort = f"{s.name}-cohort"
    a = s.add_queue(f"{s.name}-a", {flavor: 4}, cohort)
    b = s.add_queue(f"{s.name}-b", {flavor: 4}, cohort)
    two = s.add_template("two-gpus", [builders.exact_request("gpu", 2)])

    s.create_job("a1", a, two, pods=2)
    s.create_job("b1", b, two, pods=1)
    for job, cq, pods in (("a1", a, 2), ("b1", b, 1)):
        assert_admitted(s.wait_workload(job, "Admitted"), cq, flavor, pods, 2)
        s.wait_job_pods_bound(job, pods)
        pod = s.job_pods(job)[0]
        assert pod.metadata.labels.get(CLUSTER_QUEUE_LABEL) == cq  # Kueue's AssignQueueLabelsForPods
        assert pod.metadata.labels.get(LOCAL_QUEUE_LABEL) == cq
        assert not s.job(job).spec.suspend
    assert len(assert_placed(s, "a1", flavor)) == 2 and len(assert_placed(s, "b1", flavor)) == 1
    wait_usage_agrees(s, {a: {flavor: 4}, b: {flavor: 2}})

    s.create_job("a2", a, two, pods=1)  # a is at its nominal 4: Kueue admits by borrowing 2 of b's
    assert_admitted(s.wait_workload("a2", "Admitted"), a, flavor, 1, 2)
    s.wait_job_pods_bound("a2", 1)
    assert_placed(s, "a2", flavor)
    wait_usage_agrees(s, {a: {flavor: 6}, b: {flavor: 2}})
    cq_a = wait_kueue_totals(s, a, "flavorsUsage", {flavor: 6})
    assert flavor_totals(cq_a, "flavorsReservation") == {flavor: 6}
    (usage_row,) = [r for f in cq_a["status"]["flavorsUsage"] for r in f["resources"] if r["name"] == GPU]
    assert int(usage_row.get("borrowed") or 0) == 2, cq_a["status"]["flavorsUsage"]
    assert cq_a["status"]["admittedWorkloads"] == 2
    assert flavor_totals(wait_kueue_totals(s, b, "flavorsUsage", {flavor: 2}), "flavorsReservation") == {flavor: 2}
    (row,) = [r for r in queue_rows(s.url, a).values()]
    assert row["usage"] == 6 and row["reserved"] == 0, row  # every pod bound: nothing left in flight


def test_admitted_flavor_without_free_device(scenario: KueueScenario) -> None:
    """Kueue admits on quota alone: a 1-GPU Job is admitted into a flavor whose 2 nodes x 2 GPUs are all held
    by pods outside Kueue. The Workload is Admitted, its pod stays Pending (FailedScheduling from the in-tree
    DynamicResources filter, which runs before the extender) and the extender explains it node by node; Kueue's
    ClusterQueue counts the GPU as reserved and used while nothing is allocated. Freeing devices places the pod."""
    s = scenario
    nodes = s.add_nodes("gpu", 2, gpus=2)
    flavor = s.add_flavor(f"{s.name}-gpu", "gpu")
    q = s.add_queue(f"{s.name}-q", {flavor: 8})
    two, one = (
        s.add_template("two-gpus", [builders.exact_request("gpu", 2)]),
        s.add_template("one-gpu", [builders.exact_request("gpu", 1)]),
    )
    blockers = []
    for i, _ in enumerate(nodes):  # not Kueue's (no queue label): the extender decides devices only
        manifest = pod_manifest(s.namespace, f"blocker-{i}", claim_templates={"gpu": two})
        manifest["spec"]["nodeSelector"] = {SCENARIO_LABEL: s.name}
        s.plane.create_pod(manifest)
        blockers.append(f"blocker-{i}")
    held = {s.plane.wait_for_pod_scheduled(s.namespace, p, timeout=SCHEDULE_TIMEOUT).spec.node_name for p in blockers}
    assert held == set(nodes)

    s.create_job("starved", q, one, pods=1)
    workload = s.wait_workload("starved", "Admitted")
    assert_admitted(workload, q, flavor, 1, 1)
    pod = wait_until(lambda: next(iter(s.job_pods("starved")), None), timeout=KUEUE_TIMEOUT, message="starved's pod")
    name = pod.metadata.name
    # kube-scheduler's in-tree DynamicResources filter already rejects both nodes, so the extender is not asked
    # (it sees only nodes that pass the in-tree filters); what the user sees is the plugin's reason ...
    messages = wait_until(
        lambda: [m for m in s.failed_scheduling(name) if "2 cannot allocate all claims" in m],
        timeout=SCHEDULE_TIMEOUT,
        message=f"a FailedScheduling event for {name} from the DynamicResources plugin",
    )
    assert not s.plane.core.read_namespaced_pod(name, s.namespace).spec.node_name, messages
    # ... and the extender explains it per node, for the flavor Kueue admitted the Workload to
    live = s.plane.client.sanitize_for_serialization(s.plane.core.read_namespaced_pod(name, s.namespace))
    explained = extender_post(s.url, "/diagnostics/explain?" + "&".join(f"node={n}" for n in nodes), live)
    verdicts = {v["node"]: v for v in explained["nodes"]}
    assert set(verdicts) == set(nodes), explained
    for verdict in verdicts.values():
        assert not verdict["passed"] and "2 match on this node, 0 free" in verdict["detail"], verdict
    # Kueue's view: the GPU is reserved and in use by an admitted Workload; ours: nothing allocated, nothing used
    cq = wait_kueue_totals(s, q, "flavorsUsage", {flavor: 1})
    assert flavor_totals(cq, "flavorsReservation") == {flavor: 1} and cq["status"]["admittedWorkloads"] == 1
    assert is_true(s.workload_of("starved"), "Admitted")
    wait_usage_agrees(s, {})

    s.plane.core.delete_namespaced_pod(blockers[0], s.namespace, grace_period_seconds=0)
    (node,) = s.wait_job_pods_bound("starved", 1).values()
    assert node == next(iter(held - {s.plane.core.read_namespaced_pod(blockers[1], s.namespace).spec.node_name}))
    assert_placed(s, "starved", flavor)
    wait_usage_agrees(s, {q: {flavor: 1}})


def test_all_and_first_available_are_refused_by_kueue(scenario: KueueScenario) -> None:
    """Kueue v0.19.2's DRA integration charges ExactCount requests only: a Job whose claim template uses
    allocationMode All or firstAvailable gets a Workload that is not admitted (QuotaReserved False, the reason
    in the message), stays suspended and has no pods. Run outside Kueue (LocalQueue label on the pod template
    only), the same Job is scheduled by our extender alone, which charges what was allocated on the node; Kueue's
    ClusterQueue does not see that usage, so Kueue then admits a Job into quota those pods hold and the extender
    refuses its pod ("quota exhausted")."""
    s = scenario
    s.add_nodes("gpu", 3, gpus=3)
    flavor = s.add_flavor(f"{s.name}-gpu", "gpu")
    q = s.add_queue(f"{s.name}-q", {flavor: 6})
    every = s.add_template("all", [builders.exact_request("gpu", mode="All")])
    alternatives = s.add_template(
        "first-available",
        [builders.first_available_request("gpu", [builders.subrequest("four", 4), builders.subrequest("two", 2)])],
    )
    s.create_job("all", q, every)
    s.create_job("first-available", q, alternatives)
    refusals = {
        "all": "AllocationMode 'All' is not supported",
        "first-available": "FirstAvailable device selection is not supported",
    }
    for job, text in refusals.items():
        workload = wait_until(
            lambda j=job, t=text: (
                (w := s.workload_of(j)) and t in ((condition(w, "QuotaReserved") or {}).get("message") or "") and w
            ),
            timeout=KUEUE_TIMEOUT,
            message=f"Workload of Job {job} refused with {text!r}",
        )
        reserved = condition(workload, "QuotaReserved")
        assert reserved is not None and reserved["status"] == "False", workload["status"]
        assert not is_true(workload, "Admitted") and not workload["status"].get("admission")
        assert s.job(job).spec.suspend is True
        assert s.job_pods(job) == []
    assert flavor_totals(s.cluster_queue(q), "flavorsReservation") == {}

    # the same Jobs without Kueue: the pods carry the LocalQueue label, the Job does not
    for job, template in (("all-direct", every), ("first-available-direct", alternatives)):
        manifest = s.job_manifest(job, q, template)
        # not empty: a Job without labels is given its pod template's (batch/v1 defaulting), queue label included
        manifest["metadata"]["labels"] = {"app": job}
        s.batch.create_namespaced_job(s.namespace, manifest)
    nodes = {
        job: next(iter(s.wait_job_pods_bound(job, 1).values())) for job in ("all-direct", "first-available-direct")
    }
    assert nodes["all-direct"] != nodes["first-available-direct"]  # All takes the whole node
    assert s.workload_of("all-direct") is None and s.workload_of("first-available-direct") is None
    wait_usage_agrees(s, {q: {flavor: 3 + 2}})  # All: the node's 3; firstAvailable: its second subrequest, 2
    assert flavor_totals(s.cluster_queue(q), "flavorsUsage") == {}  # Kueue never saw them

    # So Kueue admits into quota those pods hold: 2 more of the 6 (Kueue: 0 used), and our extender, counting 5
    # used, refuses the pod although the third node has 3 free devices: the Workload is Admitted, its pod
    # waits with "quota exhausted".
    two = s.add_template("two-gpus", [builders.exact_request("gpu", 2)])
    s.create_job("over", q, two)
    assert_admitted(s.wait_workload("over", "Admitted"), q, flavor, 1, 2)
    over = wait_until(lambda: next(iter(s.job_pods("over")), None), timeout=KUEUE_TIMEOUT, message="over's pod")
    wait_until(
        lambda: [m for m in s.failed_scheduling(over.metadata.name) if "quota exhausted" in m],
        timeout=SCHEDULE_TIMEOUT,
        message=f"a FailedScheduling event with 'quota exhausted' for {over.metadata.name}",
    )
    assert not s.plane.core.read_namespaced_pod(over.metadata.name, s.namespace).spec.node_name
    wait_kueue_totals(s, q, "flavorsUsage", {flavor: 2})
    wait_usage_agrees(s, {q: {flavor: 5}})


def test_quota_reclaimed_when_jobs_finish(scenario: KueueScenario) -> None:
    """Cohort of two ClusterQueues (nominal 2 each): a1 and a2 (2 GPUs each) fill it, a2 borrowing b's 2, and
    b1 waits (not admitted, suspended, no pods). a2's pod succeeds: the Job controller marks the Job Complete,
    Kueue marks its Workload Finished and admits b1, whose pod our extender places. Deleting Job a1 (its pods
    go with it) releases a's quota in Kueue and in the extender."""
    s = scenario
    s.add_nodes("gpu", 2, gpus=4)
    flavor = s.add_flavor(f"{s.name}-gpu", "gpu")
    cohort = f"{s.name}-cohort"
    a = s.add_queue(f"{s.name}-a", {flavor: 2}, cohort)
    b = s.add_queue(f"{s.name}-b", {flavor: 2}, cohort)
    two = s.add_template("two-gpus", [builders.exact_request("gpu", 2)])
    for job in ("a1", "a2"):  # one after the other, so a1 is the one within a's own quota
        s.create_job(job, a, two)
        assert_admitted(s.wait_workload(job, "Admitted"), a, flavor, 1, 2)
        s.wait_job_pods_bound(job, 1)
    s.create_job("b1", b, two)
    pending = wait_until(
        lambda: (w := s.workload_of("b1")) and (condition(w, "QuotaReserved") or {}).get("status") == "False" and w,
        timeout=KUEUE_TIMEOUT,
        message="Workload of b1 pending",
    )
    assert "insufficient" in condition(pending, "QuotaReserved")["message"], condition(pending, "QuotaReserved")
    time.sleep(2)  # Kueue requeues; b1 must stay out while the cohort is full
    assert not is_true(s.workload_of("b1"), "QuotaReserved") and s.job("b1").spec.suspend and not s.job_pods("b1")
    wait_usage_agrees(s, {a: {flavor: 4}})

    s.finish_job("a2")
    wait_until(
        lambda: any(c.type == "Complete" and c.status == "True" for c in s.job("a2").status.conditions or []),
        timeout=KUEUE_TIMEOUT,
        message="Job a2 Complete",
    )
    finished = s.wait_workload("a2", "Finished")
    assert condition(finished, "Finished")["reason"] == "Succeeded", finished["status"]
    assert_admitted(s.wait_workload("b1", "Admitted"), b, flavor, 1, 2)
    s.wait_job_pods_bound("b1", 1)
    assert_placed(s, "b1", flavor)
    wait_usage_agrees(s, {a: {flavor: 2}, b: {flavor: 2}})
    wait_kueue_totals(s, a, "flavorsUsage", {flavor: 2})
    wait_kueue_totals(s, b, "flavorsUsage", {flavor: 2})

    s.batch.delete_namespaced_job("a1", s.namespace, propagation_policy="Background")
    wait_until(lambda: not s.job_pods("a1"), timeout=KUEUE_TIMEOUT, message="Job a1's pods deleted")
    wait_kueue_totals(s, a, "flavorsReservation", {})
    wait_usage_agrees(s, {b: {flavor: 2}})


class ExtenderDisagreesError(AssertionError):
    """The extender's view differs from Kueue's where it should not (the xfail below expects only this)."""


def test_job_labelled_only_on_the_job_is_quota_governed(scenario: KueueScenario) -> None:
    """The Job carries the LocalQueue label, its pod template does not (Kueue's documented usage). Kueue admits
    it and labels its pods with the local and cluster queue names; the extender places the pod, but should also
    count its devices as the ClusterQueue's usage, as Kueue's flavorsUsage does."""
    s = scenario
    s.add_nodes("gpu", 1, gpus=4)
    flavor = s.add_flavor(f"{s.name}-gpu", "gpu")
    q = s.add_queue(f"{s.name}-q", {flavor: 4})
    two = s.add_template("two-gpus", [builders.exact_request("gpu", 2)])
    s.create_job("job-label-only", q, two, pods=1, pod_label=False)
    assert_admitted(s.wait_workload("job-label-only", "Admitted"), q, flavor, 1, 2)
    (pod,) = wait_until(lambda: s.job_pods("job-label-only"), timeout=KUEUE_TIMEOUT, message="the Job's pod")
    assert QUEUE_LABEL not in (pod.metadata.labels or {})
    assert pod.metadata.labels.get(LOCAL_QUEUE_LABEL) == q and pod.metadata.labels.get(CLUSTER_QUEUE_LABEL) == q
    s.wait_job_pods_bound("job-label-only", 1)
    assert_placed(s, "job-label-only", flavor)
    wait_kueue_totals(s, q, "flavorsUsage", {flavor: 2})
    explained = extender_get(s.url, f"/diagnostics/pods/{s.namespace}/{pod.metadata.name}")
    time.sleep(1)  # the extender's watch has long seen the bound pod and its allocated claim
    ours = extender_usage(s.url, q)
    if ours != {flavor: 2}:
        raise ExtenderDisagreesError(
            f"Kueue's flavorsUsage for {q} is {{{flavor!r}: 2}}, the extender's usage is {ours}; "
            f"its decision for the pod: quota={explained.get('quota')}"
        )


def test_admitted_workload_keeps_its_quota_against_unmanaged_pods(scenario: KueueScenario) -> None:
    """ClusterQueue nominal 2, one flavor of two 2-GPU nodes. Job w (2 GPUs, pods pinned to node 1, whose GPUs
    a pod outside Kueue holds) is admitted: Kueue reserves the 2. A Job outside Kueue (queue label on the pod
    template only) then asks the extender for 2 GPUs of the same ClusterQueue on node 2. Following Kueue's
    accounting the admitted Workload holds its reservation until it finishes, so the outsider should be refused;
    once node 1 frees up w's pod should be placed."""
    s = scenario
    first, second = s.add_nodes("gpu", 2, gpus=2)
    flavor = s.add_flavor(f"{s.name}-gpu", "gpu")
    q = s.add_queue(f"{s.name}-q", {flavor: 2})
    two = s.add_template("two-gpus", [builders.exact_request("gpu", 2)])
    blocker = pod_manifest(s.namespace, "blocker", claim_templates={"gpu": two})
    blocker["spec"]["nodeSelector"] = {"kubernetes.io/hostname": first}
    s.plane.create_pod(blocker)
    s.plane.wait_for_pod_scheduled(s.namespace, "blocker", timeout=SCHEDULE_TIMEOUT)

    admitted = s.job_manifest("w", q, two)
    admitted["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] = first
    s.batch.create_namespaced_job(s.namespace, admitted)
    assert_admitted(s.wait_workload("w", "Admitted"), q, flavor, 1, 2)
    wait_kueue_totals(s, q, "flavorsReservation", {flavor: 2})
    w_pod = wait_until(lambda: next(iter(s.job_pods("w")), None), timeout=KUEUE_TIMEOUT, message="w's pod")
    wait_until(
        lambda: s.failed_scheduling(w_pod.metadata.name), timeout=SCHEDULE_TIMEOUT, message="w's pod to be refused"
    )

    outsider = s.job_manifest("outsider", q, two)
    outsider["metadata"]["labels"] = {"app": "outsider"}  # not Kueue's: no queue label on the Job
    s.batch.create_namespaced_job(s.namespace, outsider)
    o_pod = wait_until(lambda: next(iter(s.job_pods("outsider")), None), timeout=SYNC_TIMEOUT, message="its pod")

    def settled() -> str | None:
        pod = s.plane.core.read_namespaced_pod(o_pod.metadata.name, s.namespace)
        if pod.spec.node_name:
            return f"bound to {pod.spec.node_name}"
        refused = [m for m in s.failed_scheduling(o_pod.metadata.name) if "quota exhausted" in m]
        return f"refused: {refused[0]}" if refused else None

    outcome = wait_until(settled, timeout=SCHEDULE_TIMEOUT, message="the outsider's pod to be bound or refused")
    if outcome.startswith("bound"):
        s.plane.core.delete_namespaced_pod("blocker", s.namespace, grace_period_seconds=0)
        refusal = wait_until(
            lambda: [m for m in s.failed_scheduling(w_pod.metadata.name) if "quota exhausted" in m],
            timeout=SCHEDULE_TIMEOUT,
            message="w's pod refused for quota once node 1 is free",
        )
        raise ExtenderDisagreesError(
            f"the pod outside Kueue was {outcome} ({second}) with quota Kueue reserved for admitted Workload w "
            f"(flavorsReservation {flavor_totals(s.cluster_queue(q), 'flavorsReservation')}, extender usage "
            f"{extender_usage(s.url, q)}); w's pod, devices free on {first}, is refused: {refusal[-1]}"
        )
    s.plane.core.delete_namespaced_pod("blocker", s.namespace, grace_period_seconds=0)
    assert s.wait_job_pods_bound("w", 1) == {w_pod.metadata.name: first}


def test_pod_outside_kueue_bound_first_then_the_admitted_workload_waits(scenario: KueueScenario) -> None:
    """The other order of arrival. ClusterQueue nominal 2; a pod outside Kueue (queue label, pod integration
    off) is bound first with 2 GPUs of the queue. Kueue, which does not see it, admits Job w for 2 more. Both
    count: w's pod is refused with "quota exhausted", the drift report names w with that reason, and the
    queue shows usage 2 plus 2 admitted pending; once the outsider leaves, w's pod is placed."""
    s = scenario
    s.add_nodes("gpu", 3, gpus=2)  # two stay free: "quota exhausted" is what most nodes say
    flavor = s.add_flavor(f"{s.name}-gpu", "gpu")
    q = s.add_queue(f"{s.name}-q", {flavor: 2})
    two = s.add_template("two-gpus", [builders.exact_request("gpu", 2)])
    outsider = pod_manifest(s.namespace, "outsider", claim_templates={"gpu": two}, labels={QUEUE_LABEL: q})
    outsider["spec"]["nodeSelector"] = {SCENARIO_LABEL: s.name}
    s.plane.create_pod(outsider)
    s.plane.wait_for_pod_scheduled(s.namespace, "outsider", timeout=SCHEDULE_TIMEOUT)
    wait_usage_agrees(s, {q: {flavor: 2}})

    s.create_job("w", q, two, pods=1)
    assert_admitted(s.wait_workload("w", "Admitted"), q, flavor, 1, 2)
    w_pod = wait_until(lambda: next(iter(s.job_pods("w")), None), timeout=KUEUE_TIMEOUT, message="w's pod")
    refusals = wait_until(
        lambda: [m for m in s.failed_scheduling(w_pod.metadata.name) if "quota exhausted" in m],
        timeout=SCHEDULE_TIMEOUT,
        message="w's pod refused for quota",
    )
    assert not s.plane.core.read_namespaced_pod(w_pod.metadata.name, s.namespace).spec.node_name, refusals
    report = extender_get(s.url, "/diagnostics/queues")
    (row,) = [r for queue in report["clusterQueues"] if queue["name"] == q for r in queue["resources"]]
    assert (row["usage"], row["admittedPending"], row["available"]) == (2, 2, 0), row
    workload = s.workload_of("w")
    assert workload is not None
    key = f"{s.namespace}/{workload['metadata']['name']}"
    (unplaced,) = [w for w in report["admittedNotPlaced"] if w["workload"] == key]
    assert "quota exhausted" in unplaced["reason"] and unplaced["clusterQueue"] == q, unplaced

    s.plane.core.delete_namespaced_pod("outsider", s.namespace, grace_period_seconds=0)
    assert len(s.wait_job_pods_bound("w", 1)) == 1
    assert_placed(s, "w", flavor)
    wait_usage_agrees(s, {q: {flavor: 2}})
