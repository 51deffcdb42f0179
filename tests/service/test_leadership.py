"""Leader awareness (service/leadership.py): the extender beside a kube-scheduler that does not hold the
scheduler's Lease refuses pods it would reserve for, so quota is never counted from two ledgers."""

from __future__ import annotations

import pytest
import yaml

from extender.kube.scheduler_lease import LeaseReading, parse_lease_name
from extender.service import ExtenderConfig, NotLeadingError, SchedulingService
from extender.service.leadership import Leadership, holder_host, not_leading
from extender.state.core import parse_pod
from extender.state.sources import SnapshotSource
from extender.transport.app import create_app
from testkit.scenarios import gpu_pod
from tests.support.quota import one_queue_objects

NODES = ["on-demand-0", "on-demand-1"]
LEASE = "kube-system/kube-scheduler"


class Reader:
    """A Lease as kube/scheduler_lease.py would have read it."""

    lease = LEASE

    def __init__(self, reading: LeaseReading | None) -> None:
        self.value = reading
        self.next_value: LeaseReading | None = None  # what the next read finds
        self.started = False
        self.reads = 0

    def start(self) -> None:
        self.started = True

    def reading(self) -> LeaseReading | None:
        return self.value

    def read_once(self) -> None:
        self.reads += 1
        if self.next_value is not None:
            self.value, self.next_value = self.next_value, None


def test_the_holder_s_hostname_says_who_leads() -> None:
    assert holder_host("sched-a_0f8c6a8e-1b2c-4d5e-8f90-123456789abc") == "sched-a"
    assert holder_host("plain") == "plain"
    held_by_a = LeaseReading("sched-a_0f8c", True, 100.0)
    assert not_leading(held_by_a, "sched-a", LEASE, 101.0, 10) == ""
    why = not_leading(held_by_a, "sched-b", LEASE, 101.0, 10)
    assert "sched-a_0f8c holds the Lease kube-system/kube-scheduler" in why
    # cannot tell: never read, no leader election, a free Lease, a reading too old
    assert not_leading(None, "sched-b", LEASE, 101.0, 10) == ""
    assert not_leading(LeaseReading("", False, 100.0), "sched-b", LEASE, 101.0, 10) == ""
    assert not_leading(LeaseReading("", True, 100.0), "sched-b", LEASE, 101.0, 10) == ""
    assert not_leading(held_by_a, "sched-b", LEASE, 111.0, 10) == ""
    assert parse_lease_name("default/dra-failover") == ("default", "dra-failover")
    assert parse_lease_name("kube-scheduler") == ("kube-system", "kube-scheduler")


def service_beside(identity: str, reader: Reader) -> SchedulingService:
    objects = one_queue_objects(nominal=2)
    service = SchedulingService(
        SnapshotSource(text=yaml.safe_dump_all(objects)),
        ExtenderConfig(),
        leadership=Leadership(reader, identity, clock=lambda: 101.0),
    )
    service.start()
    return service


def test_the_extender_beside_a_follower_refuses_what_it_would_reserve_for_and_holds_nothing() -> None:
    reader = Reader(LeaseReading("sched-a_0f8c", True, 100.0))
    follower = service_beside("sched-b", reader)
    assert reader.started
    with pytest.raises(NotLeadingError):
        follower.filter(parse_pod(gpu_pod("first", template="two")), NODES)
    assert follower.quota_view().reserved == {}
    # a pod with nothing to reserve passes as before
    plain = gpu_pod("plain", template="two")
    plain["spec"]["resourceClaims"] = []
    plain["metadata"]["labels"] = {}
    assert follower.filter(parse_pod(plain), NODES).passed == NODES
    # the filter answer carries the reason in Error: kube-scheduler retries the pod with backoff
    body = {"Pod": gpu_pod("first", template="two"), "NodeNames": NODES}
    answer = create_app(follower).test_client().post("/filter", json=body).get_json()
    assert "does not lead" in answer["Error"] and not answer.get("NodeNames")
    # its scheduler takes the Lease over: it reserves again
    reader.value = LeaseReading("sched-b_77aa", True, 100.0)
    assert follower.filter(parse_pod(gpu_pod("first", template="two")), NODES).passed == NODES
    assert follower.quota_view().reserved


def test_the_leader_s_extender_reserves() -> None:
    leader = service_beside("sched-a", Reader(LeaseReading("sched-a_0f8c", True, 100.0)))
    assert leader.filter(parse_pod(gpu_pod("first", template="two")), NODES).passed == NODES
    assert leader.quota_view().reserved


def test_a_refusal_reads_the_lease_again_when_the_reading_is_not_fresh() -> None:
    """The new leader's kube-scheduler calls its extender the moment it holds the Lease: the extender reads the
    Lease again before refusing on a reading older than a moment, and answers as the leader's."""
    now = [100.0]
    reader = Reader(LeaseReading("sched-a_0f8c", True, 100.0))
    leadership = Leadership(reader, "sched-b", clock=lambda: now[0])
    assert leadership() and reader.reads == 0  # fresh reading: no read
    now[0] = 100.5
    reader.next_value = LeaseReading("sched-b_77aa", True, 100.5)
    assert leadership() == "" and reader.reads == 1
