"""All-or-nothing quota for a gang, and the one hold of its attempt, through the service's filter.

kube-scheduler's pod-group cycle (pkg/scheduler/schedule_one_podgroup.go) filters a gang's pods back to back and
reverts them all when fewer than minCount fit; Kueue admits a pod set whole, one flavor per resource group.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.service.config import parse_config
from extender.service.gang_attempts import WON_PATIENCE, hold_id
from extender.state.core import parse_pod
from testkit import builders as b
from tests.support.quota import base_objects
from tests.support.scenarios import RESOURCE, engine_for, gpu_pod

GANGS_ON = parse_config({"features": {"GenericWorkload": True, "DRAWorkloadResourceClaims": True}})
OD = ("team-a", "on-demand", RESOURCE)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gang(objects_quota: int, min_count: int = 4, *, config: Any = GANGS_ON, clock: Clock | None = None) -> Any:
    objects = [*base_objects({"on-demand": {"nominal": objects_quota}}, od_nodes=4, spot_nodes=0)]
    objects.append(b.pod_group("train", "team-a", min_count=min_count))
    return engine_for(objects, config, clock or Clock())


def member(name: str, template: str = "two", **extra: Any) -> dict[str, Any]:
    return gpu_pod(name, template=template, pod_group="train", **extra)


def filter_(engine: Any, obj: dict[str, Any]) -> Any:
    pod = parse_pod(obj)
    engine.store.apply("Pod", "ADDED", obj)
    return engine.filter(pod, sorted(engine.snapshot().nodes))


def test_a_gang_that_cannot_fit_is_refused_as_a_group_and_holds_nothing() -> None:
    engine = gang(6)  # 4 pods x 2 GPUs = 8 > 6
    decision = filter_(engine, member("w0"))
    assert decision.passed == [] and decision.reservation == {}
    reason = decision.failures[sorted(engine.snapshot().nodes)[0]].reason
    assert "PodGroup team-a/train" in reason and "minCount 4" in reason and "3 more of 2 example.com/gpu" in reason
    assert engine.reservations.totals() == {}
    # a plain pod of the same queue is not kept out by the gang
    assert filter_(engine, gpu_pod("single")).passed


def test_with_the_gates_off_the_same_pods_are_decided_one_by_one() -> None:
    engine = gang(6, config=parse_config({}))
    decision = filter_(engine, member("w0"))
    assert decision.passed and decision.reservation == {OD: 2}
    assert engine.reservations.get(hold_id("team-a/train")) is None


def test_one_hold_for_the_attempt_keeps_other_pods_out_and_members_draw_from_it() -> None:
    engine = gang(8)
    first = filter_(engine, member("w0"))
    assert first.passed and first.reservation == {OD: 2}
    assert engine.reservations.get(hold_id("team-a/train")).charges == {OD: 6}
    assert engine.reservations.totals() == {OD: 8}
    assert not filter_(engine, gpu_pod("single")).passed  # the gang's quota is held between its pods
    for index, left in ((1, 4), (2, 2), (3, 0)):
        assert filter_(engine, member(f"w{index}")).passed
        hold = engine.reservations.get(hold_id("team-a/train"))
        assert (hold.charges[OD] if hold is not None else 0) == left
        assert engine.reservations.totals() == {OD: 8}  # never counted twice
    # filtered again (another placement): replaced, not added
    assert filter_(engine, member("w2")).passed
    assert engine.reservations.totals() == {OD: 8}


def test_a_lost_attempt_is_released_after_the_window_not_the_ttl() -> None:
    clock = Clock()
    engine = gang(8, clock=clock)
    for index in range(3):
        assert filter_(engine, member(f"w{index}")).passed
    assert engine.reservations.totals() == {OD: 8}
    clock.now += 1.0
    engine.quota_view()
    assert engine.reservations.totals() == {OD: 8}  # within the window: the cycle may go on
    clock.now += 1.5
    view = engine.quota_view()
    assert engine.reservations.totals() == {} and dict(view.reserved) == {}
    assert engine.released_reservations["gang-attempt-lost"] == 4  # three members and the hold
    assert engine.gangs.view("team-a/train", clock.now).outcome.startswith("lost")


def test_the_podgroup_condition_releases_the_attempt_at_once() -> None:
    engine = gang(8)
    for index in range(2):
        assert filter_(engine, member(f"w{index}")).passed
    failed = b.pod_group(
        "train",
        "team-a",
        min_count=4,
        conditions=[{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable"}],
    )
    engine.store.apply("PodGroup", "MODIFIED", failed)
    engine.quota_view()
    assert engine.reservations.totals() == {}


def test_a_won_attempt_keeps_the_members_reservations_until_they_bind() -> None:
    clock = Clock()
    engine = gang(8, clock=clock)
    for index in range(4):
        assert filter_(engine, member(f"w{index}")).passed
    for index in range(4):
        engine.store.apply("Pod", "MODIFIED", member(f"w{index}", nominated_node=f"on-demand-{index}"))
    clock.now += 5
    engine.quota_view()
    assert engine.gangs.view("team-a/train", clock.now).outcome == "won"
    assert engine.reservations.totals() == {OD: 8}  # until the allocations show


def test_members_placed_already_count_toward_min_count() -> None:
    for quota, fits in ((7, False), (8, True)):
        engine = gang(quota)
        # w0 is bound, its claim not allocated in the view yet: counted as what it takes there (2)
        engine.store.apply("Pod", "ADDED", member("w0", node_name="on-demand-0"))
        decision = filter_(engine, member("w1"))
        assert bool(decision.passed) is fits  # w1 and 2 more: 3 x 2, besides w0's 2
        if fits:
            assert decision.gang is not None and decision.gang.need.placed == 1
            assert engine.reservations.totals() == {OD: 6}


def test_a_group_claim_is_held_once_for_the_attempt() -> None:
    """A PodGroup claim of 2 GPUs shared by 3 pods fits a queue of 2: each member uses the same devices."""
    objects = [*base_objects({"on-demand": {"nominal": 2}}, od_nodes=2, spot_nodes=0)]
    objects.append(b.pod_group("train", "team-a", min_count=3, claim_templates={"gpu": "two"}))
    engine = engine_for(objects, GANGS_ON, Clock())
    for index in range(3):
        decision = filter_(engine, member(f"w{index}"))
        assert decision.passed, decision.failures
        assert engine.reservations.totals() == {OD: 2}


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(
    quota=st.integers(min_value=0, max_value=16),
    min_count=st.integers(min_value=1, max_value=5),
    per_pod=st.sampled_from(["one", "two"]),
    order=st.permutations(range(5)),
    lose=st.booleans(),
)
def test_the_group_holds_the_sum_of_its_pods_charges_and_every_failure_releases_it(
    quota: int, min_count: int, per_pod: str, order: list[int], lose: bool
) -> None:
    clock = Clock()
    engine = gang(quota, min_count, clock=clock)
    each = 1 if per_pod == "one" else 2
    passed = 0
    for index in order[:min_count]:
        decision = filter_(engine, member(f"w{index}", template=per_pod))
        if not decision.passed:
            # refused as a group: nothing of the attempt stays held
            assert engine.reservations.totals() == {}
            assert quota < min_count * each
            break
        passed += 1  # noqa: SIM113  (the members that passed, up to a refusal)
        held = engine.reservations.totals().get(OD, Fraction(0))
        assert held == min_count * each  # own reservations + the hold = the group's whole charge
    else:
        assert quota >= min_count * each and passed == min_count
    if lose:
        # a complete attempt (every member reserved) waits WON_PATIENCE windows for its bindings, then goes too
        clock.now += engine.gangs.window_seconds * WON_PATIENCE + 0.1
        engine.quota_view()
        assert engine.reservations.totals() == {}


def test_a_gang_kueue_admitted_keeps_its_admitted_hold_and_is_not_decided_again() -> None:
    objects = [*base_objects({"on-demand": {"nominal": 8}}, od_nodes=4, spot_nodes=0)]
    objects.append(b.pod_group("train", "team-a", min_count=4))
    workload = b.workload("job-w", "team-a", "team-a", {RESOURCE: 8}, "on-demand", owner_uid="job-uid", pods=4)
    engine = engine_for([*objects, workload], GANGS_ON, Clock())
    decision = filter_(engine, b.owned_by(member("w0"), "job-uid"))
    assert decision.passed and decision.gang is None  # Kueue's admission was the group's decision
    assert engine.reservations.get(hold_id("team-a/train")) is None


def test_reservations_a_previous_process_held_for_a_gang_join_an_attempt_and_go_after_the_window() -> None:
    """After a restart the attempts are gone but the journal gives the reservations back (with their TTL): gang
    members' reservations and the group's hold join attempts, so a lost attempt still ends after the window."""
    from extender.service.gang_attempts import GangAttempts

    clock = Clock()
    engine = gang(8, clock=clock)
    for index in range(2):
        assert filter_(engine, member(f"w{index}")).passed
    assert engine.reservations.totals() == {OD: 8}
    engine.gangs = GangAttempts(2.0)  # what a new process starts with; the ledger is what the journal restored
    engine.quota_view()
    assert engine.gangs.view("team-a/train", clock.now) is not None  # adopted
    assert engine.reservations.totals() == {OD: 8}
    clock.now += 3
    engine.quota_view()
    assert engine.reservations.totals() == {}


def test_a_complete_attempt_waits_longer_for_its_bindings_to_show() -> None:
    clock = Clock()
    engine = gang(8, clock=clock)
    for index in range(4):
        assert filter_(engine, member(f"w{index}")).passed
    clock.now += engine.gangs.window_seconds + 0.5
    engine.quota_view()
    assert engine.reservations.totals() == {OD: 8}  # all 4 passed: kube-scheduler is likely binding them
    clock.now += engine.gangs.window_seconds * WON_PATIENCE
    engine.quota_view()
    assert engine.reservations.totals() == {}  # nobody showed placed: the attempt was lost after all


def test_a_group_claim_gang_binds_into_usage_of_the_claim_once() -> None:
    """The attempt of a group-claim gang, then what kube-scheduler's PreBind and Bind write: the claim allocated
    once and reserved for the PodGroup, the members bound. Usage takes over from the reservations: 2, not 6."""
    objects = [*base_objects({"on-demand": {"nominal": 2}}, od_nodes=2, spot_nodes=0)]
    group = b.pod_group("train", "team-a", min_count=3, claim_templates={"gpu": "two"})
    objects.append(group)
    engine = engine_for(objects, GANGS_ON, Clock())
    for index in range(3):
        assert filter_(engine, member(f"w{index}")).passed
    claim = b.reserved_for_group(
        b.claim(
            "train-gpu-x",
            "team-a",
            [b.exact_request("gpu", 2)],
            allocated=[("gpu", "on-demand-0", "gpu-0"), ("gpu", "on-demand-0", "gpu-1")],
            allocated_node="on-demand-0",
        ),
        "train",
    )
    group["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "train-gpu-x"}]}
    engine.store.apply("PodGroup", "MODIFIED", group)
    engine.store.apply("ResourceClaim", "ADDED", claim)
    for index in range(3):
        bound = member(f"w{index}", node_name="on-demand-0", claim_statuses={"gpu": "train-gpu-x"})
        engine.store.apply("Pod", "MODIFIED", bound)
    view = engine.quota_view()
    assert dict(view.usage) == {OD: 2} and engine.reservations.totals() == {}
    assert not filter_(engine, gpu_pod("single")).passed  # the queue is full: 2 of 2


def test_members_charging_nothing_count_toward_min_count_for_free() -> None:
    """A launcher without devices beside two 2-GPU workers, minCount 3, in a queue of 4: the group needs 4, not
    three workers' worth (6); a member is never judged as a copy of the one asked about when it charges
    nothing of its own."""
    engine = gang(4, min_count=3)
    launcher = b.pod("launcher", "team-a", queue="q", pod_group="train")
    engine.store.apply("Pod", "ADDED", launcher)
    engine.store.apply("Pod", "ADDED", member("w1"))
    first = filter_(engine, member("w0"))
    assert first.passed and first.reservation == {OD: 2}
    assert engine.reservations.get(hold_id("team-a/train")).charges == {OD: 2}  # w1's share only
    assert engine.reservations.totals() == {OD: 4}
    assert filter_(engine, member("w1")).passed
    assert engine.reservations.totals() == {OD: 4}
    assert filter_(engine, launcher).passed


def test_a_gang_of_workers_beside_a_launcher_that_cannot_fit_is_still_refused() -> None:
    engine = gang(4, min_count=4)  # launcher + 3 workers x 2 GPUs = 6 > 4
    engine.store.apply("Pod", "ADDED", b.pod("launcher", "team-a", queue="q", pod_group="train"))
    for name in ("w1", "w2"):
        engine.store.apply("Pod", "ADDED", member(name))
    decision = filter_(engine, member("w0"))
    assert decision.passed == [] and engine.reservations.totals() == {}
    reason = decision.failures[sorted(engine.snapshot().nodes)[0]].reason
    assert "this pod and 2 more of 2 example.com/gpu" in reason
