"""Allocated devices count against their queue for as long as they are allocated, whoever holds them.

On the real control plane (kube-apiserver, kube-controller-manager and kube-scheduler v1.37.2):

- A binding that fails. A ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA since 1.30: served and
  its admission plugin on by default, nothing to switch on in the test kit) denies `pods/binding` for pod `p`.
  kube-scheduler's binding cycle for p allocates its claim in PreBind, the binding is denied, and Unreserve takes
  p out of the claim's reservedFor and leaves the allocation (plugins/dynamicresources Unreserve): the device
  stays allocated with no consumer. A second pod `q` of the same 1-GPU queue must wait; once the policy is gone,
  exactly one of the two binds and the namespace never holds more than 1 allocated GPU.
- A PodGroup's claim with no member left. Two members of a gang use the group's 4-GPU claim in a queue of 6;
  deleting both keeps the claim allocated and reserved for podgroups/train (the resourceclaim controller keeps it
  until the PodGroup goes). Two 2-GPU pods of the queue: only one binds; the members re-created take nothing new.
  The namespace never holds more than 6 allocated GPUs.

The samplers count every allocated claim of the namespace, whoever it is reserved for.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from testkit import builders as b
from testkit.control_plane import wait_until
from tests.e2e.scenarios import QUOTA_EXHAUSTED, SCHEDULE_TIMEOUT, SYNC_TIMEOUT, Scenario, extender_get
from tests.e2e.test_gang_scenarios import GangScenario, gang_plane, gangs, setup_queue

pytestmark = pytest.mark.e2e

__all__ = ["gang_plane", "gangs"]  # the gang scenarios' fixtures, used here

SAMPLE_SECONDS = 0.1


class AllocatedSampler:
    """Polls the namespace's ResourceClaims in a thread: the most devices allocated at once, whatever the claims
    are reserved for (or not), and how many samples were taken."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.max_allocated = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def allocated(self) -> int:
        claims = self.scenario.plane.resource.list_namespaced_resource_claim(self.scenario.namespace).items
        return sum(
            len([r for r in c.status.allocation.devices.results if not r.admin_access])
            for c in claims
            if c.status and c.status.allocation
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                found = self.allocated()
            except (ApiException, OSError):
                found = 0
            self.max_allocated = max(self.max_allocated, found)
            self.samples += 1
            self._stop.wait(SAMPLE_SECONDS)

    def __enter__(self) -> AllocatedSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


# --- a failed binding --------------------------------------------------------------------------------------


def deny_binding(scenario: Scenario, pod: str) -> str:
    """A ValidatingAdmissionPolicy and its binding denying pods/binding of `pod` in the scenario's namespace;
    returns the policy's name once the API server enforces it (a binding for the not yet created pod is refused
    by the policy, not with "not found": admission runs before the pod is read)."""
    api = k8s.AdmissionregistrationV1Api(scenario.plane.client)
    name = f"deny-binding-{scenario.namespace}"
    api.create_validating_admission_policy(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": scenario.namespace}},
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/binding"],
                        }
                    ],
                },
                "validations": [{"expression": f"object.metadata.name != '{pod}'", "message": f"no binding of {pod}"}],
            },
        }
    )
    api.create_validating_admission_policy_binding(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }
    )

    def enforced() -> bool:
        body = k8s.V1Binding(
            metadata=k8s.V1ObjectMeta(name=pod), target=k8s.V1ObjectReference(kind="Node", name="nowhere")
        )
        try:
            scenario.plane.core.create_namespaced_pod_binding(pod, scenario.namespace, body)
        except ApiException as exc:
            return f"no binding of {pod}" in (exc.body or "")
        return False

    wait_until(enforced, timeout=SYNC_TIMEOUT, message="the API server to enforce the ValidatingAdmissionPolicy")
    return name


def remove_policy(scenario: Scenario, name: str) -> None:
    api = k8s.AdmissionregistrationV1Api(scenario.plane.client)
    api.delete_validating_admission_policy_binding(name)
    api.delete_validating_admission_policy(name)


def unreserved_allocation(scenario: Scenario, pod: str) -> bool:
    """The pod's claim is allocated and reserved for nobody (what Unreserve leaves after a failed binding)."""
    for claim in scenario.plane.resource.list_namespaced_resource_claim(scenario.namespace).items:
        owners = {ref.name for ref in claim.metadata.owner_references or []}
        if pod in owners and claim.status and claim.status.allocation and not claim.status.reserved_for:
            return True
    return False


def test_a_pod_whose_binding_failed_keeps_its_device_charged(scenario: Scenario) -> None:
    _, queue = scenario.add_one_gpu_queue(1, 2, 1)
    policy = deny_binding(scenario, "p")
    with AllocatedSampler(scenario) as sampler:
        scenario.create_pod("p", "one-gpu", queue)
        wait_until(
            lambda: unreserved_allocation(scenario, "p"),
            timeout=SCHEDULE_TIMEOUT,
            message="p's binding to fail and leave its claim allocated with an empty reservedFor",
        )
        rows = extender_get(scenario.url, "/diagnostics/queues")["allocatedClaimsWithoutPod"]
        wait_until(
            lambda: any(
                row["follows"] == f"{scenario.namespace}/p"
                for row in extender_get(scenario.url, "/diagnostics/queues")["allocatedClaimsWithoutPod"]
            ),
            timeout=SYNC_TIMEOUT,
            message=f"the extender to show p's claim charged with no pod holding it (last seen: {rows})",
        )
        scenario.create_pod("q", "one-gpu", queue)
        wait_until(
            lambda: any(QUOTA_EXHAUSTED in m for m in scenario.failed_scheduling().get("q", [])),
            timeout=SCHEDULE_TIMEOUT,
            message="q to be refused for quota while p's device is allocated",
        )
        assert not scenario.bound(), "a pod bound while the policy denies p and p's device counts"
        remove_policy(scenario, policy)
        wait_until(lambda: scenario.bound(), timeout=SCHEDULE_TIMEOUT, message="a pod to bind once the policy is gone")
        time.sleep(8)  # q, retried meanwhile, must stay out
        bound = scenario.bound()
    assert len(bound) == 1, f"exactly one of p and q binds: {bound}"
    assert sampler.samples > 20 and sampler.max_allocated <= 1, (
        f"{sampler.max_allocated} GPUs allocated at once in a queue of 1 ({sampler.samples} samples)"
    )
    print(f"\nbound {sorted(bound)}; max allocated {sampler.max_allocated} over {sampler.samples} samples")


# --- a PodGroup's claim with no member left ------------------------------------------------------------------


def group_claim_reservation(gangs: GangScenario) -> list[Any]:
    """reservedFor of the PodGroup's allocated claims."""
    found = []
    for claim in gangs.plane.resource.list_namespaced_resource_claim(gangs.namespace).items:
        reserved = claim.status.reserved_for if claim.status else None
        if claim.status and claim.status.allocation and reserved and any(r.resource == "podgroups" for r in reserved):
            found.extend(reserved)
    return found


def test_a_podgroup_claim_with_no_member_left_keeps_counting(gangs: GangScenario) -> None:
    queue = setup_queue(gangs, nodes=2, gpus=4, quota=6)
    gangs.add_template("four-gpus", [b.exact_request("gpu", 4)])
    gangs.wait_extender_sees("four-gpus", queue, gangs.name)
    gangs.add_pod_group("train", 2, claim_templates={"gpu": "four-gpus"})
    with AllocatedSampler(gangs) as sampler:
        members = gangs.create_gang("train", 2, "four-gpus", queue)
        wait_until(lambda: set(members) <= set(gangs.bound()), timeout=SCHEDULE_TIMEOUT, message="the gang")
        for member in members:
            gangs.plane.core.delete_namespaced_pod(member, gangs.namespace, grace_period_seconds=0)
        wait_until(
            lambda: not {p.metadata.name for p in gangs.pods()} & set(members),
            timeout=SYNC_TIMEOUT,
            message="the members to be gone",
        )
        time.sleep(2)  # the resourceclaim controller's turn
        assert [r.name for r in group_claim_reservation(gangs)] == ["train"], "the group's claim was let go"

        def charged_alone() -> dict[str, Any] | None:
            rows = extender_get(gangs.url, "/diagnostics/queues")["allocatedClaimsWithoutPod"]
            return next((row for row in rows if row["podGroup"] == f"{gangs.namespace}/train"), None)

        row = wait_until(charged_alone, timeout=SYNC_TIMEOUT, message="the extender to charge the claim on its own")
        assert row["clusterQueue"] == gangs.name and row["charges"][0]["amount"] == 4
        page = extender_get(gangs.url, f"/diagnostics/podgroups/{gangs.namespace}/train")
        assert [c["carriedBy"] for c in page["claimCharges"]] == [""]

        gangs.create_pods(["s1", "s2"], "two-gpus", queue)
        wait_until(lambda: {"s1", "s2"} & set(gangs.bound()), timeout=SCHEDULE_TIMEOUT, message="a single to bind")
        time.sleep(8)
        singles = {"s1", "s2"} & set(gangs.bound())
        assert len(singles) == 1, f"4 GPUs of the group's claim + 2 x 2 in a queue of 6: {sorted(singles)} bound"

        # the members re-created take nothing new: the claim they use is counted already
        gangs.create_gang("train", 2, "four-gpus", queue)
        wait_until(lambda: set(members) <= set(gangs.bound()), timeout=SCHEDULE_TIMEOUT, message="the re-created gang")
        time.sleep(4)
        assert len({"s1", "s2"} & set(gangs.bound())) == 1
    assert sampler.samples > 20 and sampler.max_allocated <= 6, (
        f"{sampler.max_allocated} GPUs allocated at once in a queue of 6 ({sampler.samples} samples)"
    )
    print(f"\nmax allocated {sampler.max_allocated} over {sampler.samples} samples")
