"""Requeue of pods the extender parked (service/parking.py): when quota or devices free up
through what kube-scheduler does not watch, or through an event it saw before our view did, the service asks
for a requeue once (kube/requeue.py bumps a DeviceClass)."""

from __future__ import annotations

import time

from extender.service import ExtenderConfig
from extender.service.config import ReservationsSection
from extender.state.core import parse_pod
from extender.transport.app import create_app
from testkit import builders as b
from testkit.scenarios import cluster_queue, gpu_pod
from tests.support.quota import allocated_claim
from tests.support.quota import one_queue_objects as quota_objects
from tests.support.scenarios import engine_for

NODES = ["on-demand-0", "on-demand-1"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def parked_service(clock: Clock | None = None):  # type: ignore[no-untyped-def]
    config = ExtenderConfig(reservations=ReservationsSection(ttl_seconds=30))
    service = engine_for(quota_objects(nominal=2), config, clock=clock)
    calls: list[int] = []
    service.requeue = lambda: calls.append(1)
    assert service.filter(parse_pod(gpu_pod("first", template="two")), NODES).passed
    refused = service.filter(parse_pod(gpu_pod("second", template="two")), NODES)
    assert not refused.passed and {v.category for v in refused.verdicts.values()} == {"quota-exhausted"}
    return service, calls


def test_raised_nominal_quota_requeues_parked_pods_once() -> None:
    service, calls = parked_service()
    service.quota_view()
    assert calls == [], "nothing changed: no requeue"
    service.store.apply("ClusterQueue", "MODIFIED", cluster_queue("team-a", {"on-demand": {"nominal": 4}}, cohort=None))
    service.quota_view()
    assert calls == [1]
    service.quota_view()
    assert calls == [1], "once per parking, not per view"
    assert service.filter(parse_pod(gpu_pod("second", template="two")), NODES).passed


def test_a_lapsed_reservation_requeues_parked_pods() -> None:
    clock = Clock()
    service, calls = parked_service(clock)
    clock.now += 31  # the first pod's reservation lapses (never seen bound)
    service.quota_view()
    assert calls == [1] and service.released_reservations.get("expired") == 1


def test_no_requeue_without_parked_pods() -> None:
    service = engine_for(quota_objects(nominal=8))
    calls: list[int] = []
    service.requeue = lambda: calls.append(1)
    assert service.filter(parse_pod(gpu_pod("first", template="two")), NODES).passed
    service.store.apply("ClusterQueue", "MODIFIED", cluster_queue("team-a", {"on-demand": {"nominal": 9}}, cohort=None))
    service.quota_view()
    assert calls == []


def bound_holder(queue: str | None = "q") -> tuple[dict, dict]:
    """A pod bound on on-demand-0 with 2 GPUs of it allocated (its claim reserved for it)."""
    claim = allocated_claim("holder", 2)
    return b.pod("holder", "team-a", claims={"gpu": "holder-gpu"}, queue=queue, node_name="on-demand-0"), claim


def test_quota_freed_by_an_event_our_view_saw_late_requeues_parked_pods() -> None:
    """kube-scheduler saw the holder's deletion first and retried the waiter before our watch delivered it:
    refused again, with no event left to move it. Our view showing the charge gone asks for the requeue."""
    holder, claim = bound_holder()
    service = engine_for([*quota_objects(nominal=2), claim, holder])
    calls: list[int] = []
    service.requeue = lambda: calls.append(1)
    refused = service.filter(parse_pod(gpu_pod("waiter", template="two")), NODES)
    assert not refused.passed and {v.category for v in refused.verdicts.values()} == {"quota-exhausted"}
    service.store.apply("ResourceClaim", "MODIFIED", b.claim("other", "team-a", [b.exact_request("gpu", 1)]))
    service.quota_view()
    assert calls == [], "a change that frees nothing asks for nothing"
    metrics = create_app(service).test_client().get("/metrics").get_data(as_text=True)
    assert "dra_extender_parked_pods 1.0" in metrics and "dra_extender_requeues_total 0.0" in metrics
    service.store.apply("Pod", "DELETED", holder)
    service.quota_view()
    assert calls == [], "its claim is still allocated: still charged"
    service.store.apply("ResourceClaim", "DELETED", claim)  # the resourceclaim controller's part
    service.quota_view()
    assert calls == [1]
    metrics = create_app(service).test_client().get("/metrics").get_data(as_text=True)
    assert "dra_extender_parked_pods 0.0" in metrics and "dra_extender_requeues_total 1.0" in metrics
    assert service.filter(parse_pod(gpu_pod("waiter", template="two")), NODES).passed


def test_quota_taken_by_another_pod_after_the_refusal_asks_for_nothing() -> None:
    service, calls = parked_service()
    assert service.filter(parse_pod(gpu_pod("third", template="two", namespace="team-a")), NODES).verdicts
    service.quota_view()
    assert calls == []


def test_devices_freed_where_our_view_lagged_requeue_a_pod_refused_for_devices() -> None:
    """A pod outside Kueue refused because every device is taken: the claim's deallocation, seen late."""
    objects = [obj for obj in quota_objects() if obj["kind"] != "ResourceSlice"]
    objects.append(b.gpu_slice("on-demand-0", 2))
    holder, claim = bound_holder(queue=None)
    service = engine_for([*objects, claim, holder])
    calls: list[int] = []
    service.requeue = lambda: calls.append(1)
    refused = service.filter(parse_pod(gpu_pod("waiter", template="two", queue=None)), ["on-demand-0"])
    assert not refused.passed and {v.category for v in refused.verdicts.values()} == {"devices-in-use"}
    service.store.apply("Pod", "MODIFIED", {**holder, "status": {"phase": "Running"}})
    service.quota_view()
    assert calls == [], "nothing freed"
    service.store.apply("ResourceClaim", "DELETED", claim)
    service.quota_view()
    assert calls == [1]
    assert service.filter(parse_pod(gpu_pod("waiter", template="two", queue=None)), ["on-demand-0"]).passed


def test_a_slice_published_requeues_a_pod_refused_for_missing_devices() -> None:
    """kube-scheduler requeues an extender's refusals on no ResourceSlice event."""
    objects = [obj for obj in quota_objects() if obj["kind"] != "ResourceSlice"]
    service = engine_for(objects)
    calls: list[int] = []
    service.requeue = lambda: calls.append(1)
    refused = service.filter(parse_pod(gpu_pod("waiter", template="two")), NODES)
    assert not refused.passed and "no-matching-devices" in {v.category for v in refused.verdicts.values()}
    service.store.apply("ResourceSlice", "ADDED", b.gpu_slice("on-demand-1", 4))
    service.quota_view()
    assert calls == [1]


def test_a_pod_that_passes_somewhere_parks_nothing() -> None:
    holder, claim = bound_holder(queue=None)
    service = engine_for([*quota_objects(), claim, holder])
    calls: list[int] = []
    service.requeue = lambda: calls.append(1)
    four = b.claim_template("four", "team-a", [b.exact_request("gpu", 4)])
    service.store.apply("ResourceClaimTemplate", "ADDED", four)
    decision = service.filter(parse_pod(gpu_pod("big", template="four", queue=None)), NODES)
    assert decision.passed == ["on-demand-1"] and service.parked.count == 0
    service.store.apply("ResourceClaim", "DELETED", claim)
    service.quota_view()
    assert calls == []


def test_the_view_keeper_requeues_without_a_verb() -> None:
    holder, claim = bound_holder()
    service = engine_for([*quota_objects(nominal=2), claim, holder], keep_view_current=True)
    calls: list[int] = []
    service.requeue = lambda: calls.append(1)
    try:
        assert not service.filter(parse_pod(gpu_pod("waiter", template="two")), NODES).passed
        service.store.apply("Pod", "DELETED", holder)
        service.store.apply("ResourceClaim", "DELETED", claim)
        service.store.snapshot()  # what a watch event's apply is followed by (the source publishes a snapshot)
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls == [1]
    finally:
        service.stop()
