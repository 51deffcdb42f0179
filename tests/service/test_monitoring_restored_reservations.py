"""dra_extender_reservations_restored_released_total{reason}: how the reservations a restarted extender took over
from its journal ended. "expired" is quota held for a pod that never came, what the alert
DraExtenderRestoredReservationsExpired (manifests/monitoring/alert-rules.yaml) fires on; reservations the new
process made itself are not counted, however they end."""

from __future__ import annotations

from pathlib import Path

import yaml

from extender.service import ExtenderConfig, SchedulingService
from extender.state.core import parse_pod
from extender.state.reservation_journal import ReservationJournal
from extender.state.sources import SnapshotSource
from extender.transport.app import create_app
from testkit.scenarios import gpu_pod
from tests.support.quota import bind_two_gpus, one_queue_objects

NODES = ["on-demand-0", "on-demand-1"]


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def started(path: Path, objects: list[dict], clock: Clock) -> SchedulingService:
    text = yaml.safe_dump_all(objects)
    config = ExtenderConfig()
    service = SchedulingService(SnapshotSource(text=text), config, journal=ReservationJournal(path), clock=clock)
    service.start()
    return service


def restored_released(service: SchedulingService) -> dict[str, float]:
    text = create_app(service).test_client().get("/metrics").get_data(as_text=True)
    prefix = "dra_extender_reservations_restored_released_total{reason="
    return {
        line[len(prefix) + 1 : line.index('"}')]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def test_restored_reservations_are_counted_by_how_they_end(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    objects = one_queue_objects(nominal=6)
    bound_later, never_came = gpu_pod("bound-later", template="two"), gpu_pod("never-came", template="two")
    old = started(path, [*objects, bound_later, never_came], Clock())
    for pod in (bound_later, never_came):
        assert old.filter(parse_pod(pod), NODES).passed == NODES

    clock = Clock()
    new = started(path, [*objects, bound_later, never_came], clock)
    assert new.restored_reservations == 2
    assert restored_released(new) == {}
    own = gpu_pod("own", template="two")
    assert new.filter(parse_pod(own), NODES).passed == NODES  # the new process's own reservation

    # bound-later's binding shows (with its allocation): its restored reservation is let go as "bound"
    bind_two_gpus(new.store, bound_later, NODES[0])
    new.quota_view()
    assert restored_released(new) == {"bound": 1.0}

    # never-came is never seen bound: its TTL runs out, and so does the new process's own reservation
    clock.now += ExtenderConfig().reservations.ttl_seconds + 1
    new.quota_view()
    assert new.released_reservations == {"bound": 1, "expired": 2}
    assert restored_released(new) == {"bound": 1.0, "expired": 1.0}
