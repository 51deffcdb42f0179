"""Admitted Workloads hold their quota until their pods hold it on nodes.

Kueue charges a Workload at admission and keeps it charged until it finishes; the extender charges what is
allocated on nodes. These tests drive the service with watch events in both orders of arrival and check the one
quota view: an admitted Workload's hold keeps pods outside Kueue from taking its quota, its own pods replace the
hold as they are filtered and bound (never counted twice), and what Kueue gives back (finished, reclaimable
pods, eviction) is released.
"""

from __future__ import annotations

import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.decisions.quota.workload_holds import admitted_quota, governed_resources
from extender.service import SchedulingService
from extender.state.core import parse_pod
from extender.state.kueue.workload import parse_workload
from testkit import builders as b
from testkit.scenarios import RESOURCE, gpu_pod
from tests.support.quota import base_objects, filter_pod
from tests.support.scenarios import engine_for

KEY = ("team-a", "on-demand", RESOURCE)
JOB = "uid-job-w"


def job_pod(name: str, template: str = "two", owner: str = JOB) -> dict[str, Any]:
    return b.owned_by(gpu_pod(name, template=template), owner)


def admitted(gpus: int, *, pods: int = 1, **kwargs: Any) -> dict[str, Any]:
    return b.workload("job-w", "team-a", "team-a", {RESOURCE: gpus}, "on-demand", owner_uid=JOB, pods=pods, **kwargs)


def bound(engine: SchedulingService, pod_obj: dict[str, Any], node: str, devices: list[str]) -> None:
    """What kube-scheduler's binding cycle leaves in the API: the pod's claim allocated on the node and reserved
    for it, the pod bound."""
    name = pod_obj["metadata"]["name"]
    uid = pod_obj["metadata"]["uid"]
    claim = b.claim(
        f"{name}-gpu",
        "team-a",
        [b.exact_request("gpu", len(devices))],
        allocated=[("gpu", node, device) for device in devices],
        allocated_node=node,
        reserved_for=[(name, uid)],
    )
    engine.store.apply("ResourceClaim", "ADDED", claim)
    pod_obj = dict(pod_obj, spec=dict(pod_obj["spec"], nodeName=node))
    pod_obj["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]}
    engine.store.apply("Pod", "MODIFIED", pod_obj)


def test_admitted_workload_holds_its_quota_against_a_pod_outside_kueue() -> None:
    engine = engine_for([*base_objects({"on-demand": {"nominal": 4}}), admitted(4, pods=2)])
    view = engine.quota_view()
    assert view.admitted_holds == {KEY: 4} and view.usage == {}
    outsider = filter_pod(engine, gpu_pod("outsider"))
    assert outsider.passed == []
    reason = outsider.verdicts["on-demand-0"].reason
    assert "quota exhausted" in reason and "requested 2, available 0" in reason
    # the Workload's own pods are what the hold is for
    first = filter_pod(engine, job_pod("w-0"))
    assert sorted(first.passed) == ["on-demand-0", "on-demand-1"]
    assert engine.quota_view().admitted_holds == {KEY: 2}  # its reservation replaced half of the hold
    second = filter_pod(engine, job_pod("w-1"))
    assert sorted(second.passed) == ["on-demand-0", "on-demand-1"]
    view = engine.quota_view()
    assert view.admitted_holds == {} and view.reserved == {KEY: 4}
    assert view.ledger.available(*KEY) == 0
    assert filter_pod(engine, gpu_pod("outsider")).passed == []


def test_binding_replaces_the_hold_and_finishing_releases_it() -> None:
    engine = engine_for([*base_objects({"on-demand": {"nominal": 4}}), admitted(2)])
    pod = job_pod("w-0")
    engine.store.apply("Pod", "ADDED", pod)
    assert filter_pod(engine, pod).passed
    bound(engine, pod, "on-demand-0", ["gpu-0", "gpu-1"])
    view = engine.quota_view()
    assert view.usage == {KEY: 2} and view.admitted_holds == {} and view.reserved == {}
    assert view.ledger.available(*KEY) == 2  # never twice: usage replaced the hold
    assert filter_pod(engine, gpu_pod("outsider")).passed  # the other 2 are free
    engine.reservations.release("uid-team-a-outsider")
    # Kueue keeps a Workload charged until it finishes: its pod done, its claim still allocated counts for it ...
    engine.store.apply(
        "Pod", "MODIFIED", dict(pod, spec=dict(pod["spec"], nodeName="on-demand-0"), status={"phase": "Succeeded"})
    )
    view = engine.quota_view()
    assert view.usage == {KEY: 2} and view.admitted_holds == {}
    # ... and once the claim is deallocated the hold is back
    engine.store.apply("ResourceClaim", "DELETED", b.claim("w-0-gpu", "team-a", [b.exact_request("gpu", 2)]))
    assert engine.quota_view().admitted_holds == {KEY: 2}
    # ... until the Workload is Finished
    engine.store.apply("Workload", "MODIFIED", admitted(2, finished=True))
    view = engine.quota_view()
    assert view.admitted_holds == {} and view.ledger.available(*KEY) == 4


def test_pod_outside_kueue_first_then_the_admitted_workload_is_refused() -> None:
    """The other order: Kueue admits without seeing the outsider bound on its quota (usage 2 of 2); both count,
    so the admitted Workload's pod is refused, and the view names the over-commitment Kueue made."""
    engine = engine_for(base_objects({"on-demand": {"nominal": 2}}))
    outsider = gpu_pod("outsider")
    engine.store.apply("Pod", "ADDED", outsider)
    assert filter_pod(engine, outsider).passed
    bound(engine, outsider, "on-demand-1", ["gpu-0", "gpu-1"])
    engine.store.apply("Workload", "ADDED", admitted(2))
    view = engine.quota_view()
    assert view.usage == {KEY: 2} and view.admitted_holds == {KEY: 2}
    refused = filter_pod(engine, job_pod("w-0"))
    assert refused.passed == []
    assert "quota exhausted" in refused.verdicts["on-demand-0"].reason
    # the outsider leaves and its claim is deallocated: the Workload's pod fits, and the hold alone counts again
    engine.store.apply("Pod", "DELETED", outsider)
    assert filter_pod(engine, job_pod("w-0")).passed == []  # its devices are still allocated
    engine.store.apply("ResourceClaim", "DELETED", b.claim("outsider-gpu", "team-a", [b.exact_request("gpu", 2)]))
    assert sorted(filter_pod(engine, job_pod("w-0")).passed) == ["on-demand-0", "on-demand-1"]


def test_workload_seen_after_its_bound_pod_links_the_pod() -> None:
    """Watches deliver in any order (a relist of Workloads after Pods): the Workload arriving later still finds
    its bound pod, whose usage replaces the hold."""
    engine = engine_for(base_objects({"on-demand": {"nominal": 4}}))
    pod = job_pod("w-0")
    engine.store.apply("Pod", "ADDED", pod)
    bound(engine, pod, "on-demand-0", ["gpu-0", "gpu-1"])
    assert engine.quota_view().usage == {KEY: 2}
    engine.store.apply("Workload", "ADDED", admitted(3))
    view = engine.quota_view()
    assert view.usage == {KEY: 2} and view.admitted_holds == {KEY: 1}


def test_workload_that_takes_more_than_admitted_is_charged_what_it_takes() -> None:
    engine = engine_for([*base_objects({"on-demand": {"nominal": 8}}), admitted(2)])
    pod = job_pod("w-0", template="two")
    engine.store.apply("Pod", "ADDED", pod)
    bound(engine, pod, "on-demand-0", ["gpu-0", "gpu-1", "gpu-2"])  # e.g. allocationMode All on a 3-GPU node
    view = engine.quota_view()
    assert view.usage == {KEY: 3} and view.admitted_holds == {}


def test_evicted_or_unreserved_workload_holds_nothing() -> None:
    engine = engine_for([*base_objects({"on-demand": {"nominal": 2}}), admitted(2, quota_reserved=False)])
    assert engine.quota_view().admitted_holds == {}
    assert filter_pod(engine, gpu_pod("outsider")).passed


def test_reclaimable_pods_scale_the_hold_as_kueue_does() -> None:
    """Kueue's totalRequestsFromAdmission: 3 pods admitted with 6 GPUs, 1 reclaimable -> 6 // 3 * 2 = 4."""
    engine = engine_for([*base_objects({"on-demand": {"nominal": 8}}), admitted(6, pods=3, reclaimable=1)])
    assert engine.quota_view().admitted_holds == {KEY: 4}
    engine.store.apply("Workload", "MODIFIED", admitted(6, pods=3, reclaimable=3))
    assert engine.quota_view().admitted_holds == {}


def test_only_resources_the_extender_charges_are_held() -> None:
    engine = engine_for(base_objects({"on-demand": {"nominal": 8}}))
    view = engine.quota_view()
    workload = parse_workload(
        b.workload("w", "team-a", "team-a", {RESOURCE: 2, "cpu": "1500m"}, "on-demand", owner_uid=JOB)
    )
    governed = governed_resources(view.context, view.snapshot.device_classes)
    assert RESOURCE in governed and "cpu" not in governed
    assert admitted_quota(workload, view.context, governed) == {KEY: Fraction(2)}


def test_shared_view_feeds_the_queue_rows() -> None:
    from extender.reports.queues import queue_rows

    engine = engine_for([*base_objects({"on-demand": {"nominal": 4}}), admitted(3)])
    (row,) = [numbers for cq, flavor, resource, numbers in queue_rows(engine.quota_view()) if flavor == "on-demand"]
    assert row["admittedPending"] == 3 and row["usage"] == 0 and row["available"] == 1


# --- incremental == rebuilt ---------------------------------------------------------------------------------

EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["admit", "finish", "evict", "pod", "bind", "delete-pod", "filter"]),
        st.integers(min_value=0, max_value=2),  # which Workload / pod
        st.integers(min_value=1, max_value=3),  # GPUs
    ),
    max_size=25,
)


@pytest.mark.slow  # a long property run (60 event sequences through a fresh service each)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EVENTS)
def test_holds_kept_per_event_equal_holds_rebuilt_from_the_final_objects(events: list[tuple[str, int, int]]) -> None:
    """Whatever order Workloads, pods and bindings arrive in, the holds the indexes keep event by event are the
    holds a restarted extender computes from the same objects and the journal (a restart rebuilds them exactly).
    The journal matters when a pod is deleted before its claim: the claim stays charged to the queue it was
    booked in, which the objects alone no longer name (its reservedFor points at a pod that is gone)."""
    with tempfile.TemporaryDirectory() as directory:
        journal = Path(directory) / "journal.json"
        _holds_kept_per_event_equal_holds_after_a_restart(events, journal)


def _holds_kept_per_event_equal_holds_after_a_restart(events: list[tuple[str, int, int]], journal: Path) -> None:
    base = base_objects({"on-demand": {"nominal": 6}})
    engine = engine_for(base, journal=journal)
    current: dict[tuple[str, str], dict[str, Any]] = {}
    next_device = 0

    def put(kind: str, obj: dict[str, Any]) -> None:
        current[(kind, obj["metadata"]["name"])] = obj
        engine.store.apply(kind, "MODIFIED", obj)

    for action, index, gpus in events:
        owner = f"uid-job-{index}"
        workload = b.workload(f"job-{index}", "team-a", "team-a", {RESOURCE: gpus}, "on-demand", owner_uid=owner)
        pod = b.owned_by(gpu_pod(f"p-{index}", template="one" if gpus == 1 else "two"), owner)
        if action == "admit":
            put("Workload", workload)
        elif action in ("finish", "evict") and ("Workload", f"job-{index}") in current:
            old = current[("Workload", f"job-{index}")]
            usage = int(old["status"]["admission"]["podSetAssignments"][0]["resourceUsage"][RESOURCE])
            changed = b.workload(
                f"job-{index}",
                "team-a",
                "team-a",
                {RESOURCE: usage},
                "on-demand",
                owner_uid=owner,
                finished=action == "finish",
                quota_reserved=action != "evict",
            )
            put("Workload", changed)
        elif action == "pod":
            put("Pod", pod)
        elif (
            action == "bind" and ("Pod", f"p-{index}") in current and ("ResourceClaim", f"p-{index}-gpu") not in current
        ):
            held = current[("Pod", f"p-{index}")]
            count = 1 if held["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "one" else 2
            devices = [f"gpu-{(next_device + i) % 8}" for i in range(count)]
            next_device += count
            node = f"on-demand-{index % 2}"
            bound(engine, held, node, devices)
            claim_obj = engine.store.snapshot().claims[f"team-a/p-{index}-gpu"]
            assert claim_obj.allocation is not None
            current[("ResourceClaim", f"p-{index}-gpu")] = b.claim(
                f"p-{index}-gpu",
                "team-a",
                [b.exact_request("gpu", count)],
                allocated=[("gpu", node, device) for device in devices],
                allocated_node=node,
                reserved_for=[(f"p-{index}", held["metadata"]["uid"])],
            )
            held = dict(held, spec=dict(held["spec"], nodeName=node))
            held["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"p-{index}-gpu"}]}
            current[("Pod", f"p-{index}")] = held
        elif action == "delete-pod" and ("Pod", f"p-{index}") in current:
            engine.store.apply("Pod", "DELETED", current.pop(("Pod", f"p-{index}")))
        elif action == "filter" and ("Pod", f"p-{index}") in current:
            engine.filter(parse_pod(current[("Pod", f"p-{index}")]), ["on-demand-0", "on-demand-1"])
        engine.quota_view()  # the indexes move on event by event, as the verbs drive them
    for reservation in list(engine.reservations.all()):
        engine.reservations.release(reservation.pod_uid)
    kept = engine.quota_view()
    engine.stop()
    rebuilt = engine_for([*base, *current.values()], journal=journal).quota_view()
    assert kept.usage == rebuilt.usage
    assert kept.admitted_holds == rebuilt.admitted_holds
    assert {k: dict(v) for k, v in kept.workload_holds.items()} == {
        k: dict(v) for k, v in rebuilt.workload_holds.items()
    }
