"""Requeue of pods the extender parked for quota (issue 15, point 3): when quota frees up through what
kube-scheduler does not watch, the service asks for a requeue once (state/live/requeue.py bumps a DeviceClass)."""

from __future__ import annotations

from extender.service import ExtenderConfig
from extender.service.config import ReservationsSection
from extender.state.core import parse_pod
from tests.support.quota import one_queue_objects as quota_objects
from tests.support.scenarios import cluster_queue, engine_for, gpu_pod

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
