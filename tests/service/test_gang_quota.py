"""All-or-nothing quota for a gang, and the one hold of its attempt, through the service's filter.

kube-scheduler's pod-group cycle (pkg/scheduler/schedule_one_podgroup.go) filters a gang's pods back to back and
reverts them all when fewer than minCount fit; Kueue admits a pod set whole, one flavor per resource group.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.decisions.gang.quota import CATEGORY_GANG_WAITING
from extender.decisions.quota.context import QuotaContext
from extender.service.config import parse_config
from extender.service.gang_attempts import WON_PATIENCE, GangAttempts, hold_id, placed
from extender.state.core import Pod, parse_pod
from extender.state.snapshot import ClusterSnapshot
from extender.state.store import ClusterStore
from testkit import builders as b
from testkit.scenarios import (
    RESOURCE,
    cluster_queue,
    flavor,
    gpu_pod,
    kueue_config,
    local_queue,
    nodes_in_flavor,
    templates,
)
from tests.support.quota import allocated_claim, base_objects
from tests.support.scenarios import engine_for

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


def filter_(engine: Any, obj: dict[str, Any], nodes: list[str] | None = None) -> Any:
    pod = parse_pod(obj)
    engine.store.apply("Pod", "ADDED", obj)
    return engine.filter(pod, nodes if nodes is not None else sorted(engine.snapshot().nodes))


def add_members(engine: Any, count: int, template: str = "two", prefix: str = "w") -> list[dict[str, Any]]:
    """The gang's pods, all in the view before any is asked about (kube-scheduler's GangScheduling PreEnqueue
    lets a gang's pods in only once minCount of them exist)."""
    pods = [member(f"{prefix}{index}", template) for index in range(count)]
    for obj in pods:
        engine.store.apply("Pod", "ADDED", obj)
    return pods


def held(engine: Any) -> dict[Any, Fraction]:
    hold = engine.reservations.get(hold_id("team-a/train"))
    return dict(hold.charges) if hold is not None else {}


def test_a_gang_that_cannot_fit_is_refused_as_a_group_and_holds_nothing() -> None:
    engine = gang(6)  # 4 pods x 2 GPUs = 8 > 6
    pods = add_members(engine, 4)
    decision = filter_(engine, pods[0])
    assert decision.passed == [] and decision.reservation == {}
    reason = decision.failures[sorted(engine.snapshot().nodes)[0]].reason
    assert "PodGroup team-a/train" in reason and "minCount 4" in reason and "3 more of 2 example.com/gpu" in reason
    assert engine.reservations.totals() == {}
    # a plain pod of the same queue is not kept out by the gang
    assert filter_(engine, gpu_pod("single")).passed


def test_a_group_short_of_min_count_waits_for_its_members_and_holds_nothing() -> None:
    engine = gang(16, min_count=6)
    pods = add_members(engine, 4)
    decision = filter_(engine, pods[0])
    assert decision.passed == [] and engine.reservations.totals() == {}
    verdict = decision.failures[sorted(engine.snapshot().nodes)[0]]
    assert "waiting for its members: 4 of 6 exist" in verdict.reason
    assert decision.gang is not None and decision.gang.waiting and not decision.gang.refused
    assert verdict.category == CATEGORY_GANG_WAITING and not verdict.unresolvable


def test_with_the_gates_off_the_same_pods_are_decided_one_by_one() -> None:
    engine = gang(6, config=parse_config({}))
    decision = filter_(engine, member("w0"))
    assert decision.passed and decision.reservation == {OD: 2}
    assert engine.reservations.get(hold_id("team-a/train")) is None


def test_one_hold_for_the_attempt_covers_the_whole_group_and_keeps_other_pods_out() -> None:
    engine = gang(8)
    pods = add_members(engine, 4)
    first = filter_(engine, pods[0])
    assert first.passed and first.reservation == {OD: 2}  # the pod's own part
    assert held(engine) == {OD: 8} and engine.reservations.get(pods[0]["metadata"]["uid"]) is None
    assert engine.reservations.totals() == {OD: 8}
    assert not filter_(engine, gpu_pod("single")).passed  # the gang's quota is held between its pods
    for obj in pods[1:]:
        assert filter_(engine, obj).passed
        assert engine.reservations.totals() == {OD: 8}  # never counted twice
    # filtered again (another placement in the same flavor): not added
    assert filter_(engine, pods[2]).passed
    assert engine.reservations.totals() == {OD: 8}


def test_a_lost_attempt_is_released_after_the_window_not_the_ttl() -> None:
    clock = Clock()
    engine = gang(8, clock=clock)
    pods = add_members(engine, 4)
    for obj in pods[:3]:
        assert filter_(engine, obj).passed
    assert engine.reservations.totals() == {OD: 8}
    clock.now += 1.0
    engine.quota_view()
    assert engine.reservations.totals() == {OD: 8}  # within the window: the cycle may go on
    clock.now += 1.5
    view = engine.quota_view()
    assert engine.reservations.totals() == {} and dict(view.reserved) == {}
    assert engine.released_reservations["gang-attempt-lost"] == 1  # the one hold
    assert engine.gangs.view("team-a/train", clock.now).outcome.startswith("lost")


def test_the_podgroup_condition_releases_the_attempt_at_once() -> None:
    engine = gang(8)
    pods = add_members(engine, 4)
    for obj in pods[:2]:
        assert filter_(engine, obj).passed
    failed = b.pod_group(
        "train",
        "team-a",
        min_count=4,
        conditions=[{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable"}],
    )
    engine.store.apply("PodGroup", "MODIFIED", failed)
    engine.quota_view()
    assert engine.reservations.totals() == {}


def test_placed_members_leave_the_hold_for_usage_and_the_attempt_is_won() -> None:
    clock = Clock()
    engine = gang(8, clock=clock)
    pods = add_members(engine, 4)
    for obj in pods:
        assert filter_(engine, obj).passed
    for index in range(3):
        engine.store.apply("Pod", "MODIFIED", member(f"w{index}", nominated_node=f"on-demand-{index}"))
        view = engine.quota_view()
        assert held(engine) == {OD: 8 - 2 * (index + 1)}  # what the members not placed yet take
        assert view.ledger.usage(*OD) == 8  # never counted twice, never less than the group takes
    engine.store.apply("Pod", "MODIFIED", member("w3", nominated_node="on-demand-3"))
    view = engine.quota_view()
    assert engine.gangs.view("team-a/train", clock.now).outcome == "won"
    assert engine.reservations.totals() == {} and dict(view.provisional) == {OD: 8}


def test_members_placed_already_count_toward_min_count() -> None:
    for quota, fits in ((7, False), (8, True)):
        engine = gang(quota)
        add_members(engine, 4)
        # w0 is bound, its claim not allocated in the view yet: counted as what it takes there (2)
        engine.store.apply("Pod", "MODIFIED", member("w0", node_name="on-demand-0"))
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
    pods = add_members(engine, 3)
    for obj in pods:
        decision = filter_(engine, obj)
        assert decision.passed, decision.failures
        assert engine.reservations.totals() == {OD: 2}


def test_unlike_members_are_judged_by_their_own_charges() -> None:
    """A 2-GPU driver and four 1-GPU workers (minCount 5) need 6 of a queue of 6, whichever is asked first; the
    rest of the gang is never copies of the pod asked about."""
    for first_asked in ("driver", "w0"):
        engine = gang(6, min_count=5)
        workers = add_members(engine, 4, template="one")
        driver = member("driver", "two")
        engine.store.apply("Pod", "ADDED", driver)
        order = [driver, *workers] if first_asked == "driver" else [*workers, driver]
        for obj in order:
            decision = filter_(engine, obj)
            assert decision.passed, decision.failures
            assert engine.reservations.totals() == {OD: 6}
        assert held(engine) == {OD: 6}


def test_an_unlike_gang_that_cannot_fit_holds_nothing_and_a_plain_pod_passes() -> None:
    engine = gang(6, min_count=4)  # three 1-GPU workers and a 4-GPU driver: 7 > 6
    workers = add_members(engine, 3, template="one")
    driver = member("driver", "four")
    engine.store.apply("Pod", "ADDED", driver)
    for obj in (driver, workers[0]):
        decision = filter_(engine, obj)
        assert decision.passed == [] and engine.reservations.totals() == {}
        assert "does not fit its queue as a whole" in decision.failures["on-demand-0"].reason
    assert "3 more (3 of 1 example.com/gpu)" in filter_(engine, driver).failures["on-demand-0"].reason
    assert filter_(engine, gpu_pod("single")).passed


def test_with_more_members_than_min_count_the_cheapest_make_it_up() -> None:
    """minCount 3 of a 4-GPU pod and three 1-GPU pods: asked about a 1-GPU pod, the group is it and the two
    other 1-GPU pods (3), not the 4-GPU one."""
    engine = gang(3, min_count=3)
    workers = add_members(engine, 3, template="one")
    engine.store.apply("Pod", "ADDED", member("big", "four"))
    decision = filter_(engine, workers[0])
    assert decision.passed and held(engine) == {OD: 3}
    assert decision.gang is not None and decision.gang.counted.alike == 2


def test_a_charge_that_depends_on_the_node_is_sized_in_the_flavor_the_group_takes() -> None:
    """firstAvailable [4 GPUs | 2 GPUs]: 2 on the 2-GPU nodes of the first flavor, 4 on the 8-GPU nodes of the
    second. A gang of 4 does not fit the first (8 > 2) and takes 4 x 4 = 16 in the second, more than its 10:
    refused, not held at 2 per member there."""
    objects = [
        b.namespace("team-a"),
        b.device_class(),
        kueue_config(),
        flavor("on-demand"),
        flavor("spot"),
        *nodes_in_flavor("on-demand", 2, 2),
        *nodes_in_flavor("spot", 4, 8),
        cluster_queue("team-a", {"on-demand": {"nominal": 2}, "spot": {"nominal": 10}}),
        local_queue("team-a", "team-a"),
        *templates("team-a"),
        b.pod_group("train", "team-a", min_count=4),
    ]
    engine = engine_for(objects, GANGS_ON, Clock())
    pods = add_members(engine, 4, template="four-or-two")
    decision = filter_(engine, pods[0])
    assert decision.passed == [] and engine.reservations.totals() == {}
    # with room for it (16), the group holds 16 in spot
    objects[-4] = cluster_queue("team-a", {"on-demand": {"nominal": 2}, "spot": {"nominal": 16}})
    engine = engine_for(objects, GANGS_ON, Clock())
    pods = add_members(engine, 4, template="four-or-two")
    decision = filter_(engine, pods[0])
    assert decision.passed and held(engine) == {("team-a", "spot", RESOURCE): 16}
    assert decision.reservation == {("team-a", "spot", RESOURCE): 4}


SPOT = ("team-a", "spot", RESOURCE)


def racks(quota: int, min_count: int = 3, clock: Clock | None = None) -> Any:
    """Two racks, each its own flavor (on-demand, spot) of 3 nodes x 4 GPUs, `quota` GPUs of each."""
    objects = [
        *base_objects({"on-demand": {"nominal": quota}, "spot": {"nominal": quota}}, od_nodes=3, spot_nodes=3, gpus=4)
    ]
    objects.append(b.pod_group("train", "team-a", min_count=min_count))
    return engine_for(objects, GANGS_ON, clock or Clock())


def rack_nodes(engine: Any, rack: str) -> list[str]:
    return sorted(name for name in engine.snapshot().nodes if name.startswith(rack))


def test_every_placement_evaluated_is_held_until_the_winner_shows() -> None:
    """kube-scheduler evaluates the gang once per placement (one rack each), then binds the best one: until it
    shows, both racks' flavors hold the group whole; single pods of the queue fit in neither. The first member
    placed names the winner, and the other rack is let go at once."""
    engine = racks(6)
    pods = add_members(engine, 3)
    for rack in ("on-demand", "spot"):
        for obj in pods:
            assert filter_(engine, obj, rack_nodes(engine, rack)).passed
    assert held(engine) == {OD: 6, SPOT: 6}
    assert not filter_(engine, gpu_pod("single")).passed
    engine.store.apply("Pod", "MODIFIED", member("w0", nominated_node="on-demand-0"))
    engine.quota_view()
    assert held(engine) == {OD: 4}  # the winner's two members not placed yet
    single = filter_(engine, gpu_pod("single"))
    assert single.passed and set(single.passed) <= set(rack_nodes(engine, "spot"))
    assert engine.gangs.view("team-a/train", 0).branches[0].flavors == ("on-demand",)


def test_a_placement_refused_for_quota_leaves_the_others_held() -> None:
    engine = racks(6)
    pods = add_members(engine, 3)
    engine.store.apply("Pod", "ADDED", gpu_pod("other", node_name="spot-0"))
    engine.store.apply("ResourceClaim", "ADDED", allocated_claim("other", 2, "spot-0"))
    for obj in pods:
        assert filter_(engine, obj, rack_nodes(engine, "on-demand")).passed
    refused = filter_(engine, pods[0], rack_nodes(engine, "spot"))  # 2 + 6 > 6 in spot
    assert refused.passed == [] and refused.gang is not None and refused.gang.refused
    assert held(engine) == {OD: 6}


def test_a_gang_kueue_admitted_keeps_its_admitted_hold_and_is_not_decided_again() -> None:
    objects = [*base_objects({"on-demand": {"nominal": 8}}, od_nodes=4, spot_nodes=0)]
    objects.append(b.pod_group("train", "team-a", min_count=4))
    workload = b.workload("job-w", "team-a", "team-a", {RESOURCE: 8}, "on-demand", owner_uid="job-uid", pods=4)
    engine = engine_for([*objects, workload], GANGS_ON, Clock())
    for index in range(1, 4):
        engine.store.apply("Pod", "ADDED", b.owned_by(member(f"w{index}"), "job-uid"))
    decision = filter_(engine, b.owned_by(member("w0"), "job-uid"))
    assert decision.passed and decision.gang is None  # Kueue's admission was the group's decision
    assert engine.reservations.get(hold_id("team-a/train")) is None


def test_a_hold_a_previous_process_kept_rejoins_its_attempt_before_any_reconcile() -> None:
    """After a restart the journal gives the hold back (restored, with its TTL): it joins an attempt before the
    first reconcile on a complete view could take it for a reservation whose pod is gone, so another pod cannot
    take the quota between two members; a lost attempt still ends after the window."""
    from extender.service.gang_attempts import GangAttempts

    clock = Clock()
    engine = gang(8, clock=clock)
    pods = add_members(engine, 4)
    for obj in pods[:2]:
        assert filter_(engine, obj).passed
    kept = [(r.pod_uid, r.pod_key, r.cluster_queue, dict(r.charges)) for r in engine.reservations.all()]
    assert kept == [(hold_id("team-a/train"), hold_id("team-a/train"), "team-a", {OD: 8})]
    restarted = gang(8, clock=clock)
    add_members(restarted, 4)
    restarted.gangs = restarted.views.gangs = GangAttempts(2.0)  # what a new process starts with
    for uid, key, queue, charges in kept:
        restarted.reservations.restore(uid, key, queue, charges, 4.0)
    restarted.quota_view()
    assert restarted.gangs.view("team-a/train", clock.now) is not None  # adopted
    assert restarted.reservations.totals() == {OD: 8}
    assert not filter_(restarted, gpu_pod("single")).passed
    assert filter_(restarted, pods[2]).passed and restarted.reservations.totals() == {OD: 8}
    clock.now += 3
    restarted.quota_view()
    assert restarted.reservations.totals() == {}


def test_a_complete_attempt_waits_longer_for_its_bindings_to_show() -> None:
    clock = Clock()
    engine = gang(8, clock=clock)
    for obj in add_members(engine, 4):
        assert filter_(engine, obj).passed
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
    for obj in add_members(engine, 3):
        assert filter_(engine, obj).passed
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
    assert held(engine) == {OD: 4}  # w0's and w1's, the launcher's nothing
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


RACKS = ("r0", "r1", "r2")


def rack_objects(quotas: list[int], min_count: int) -> list[dict[str, Any]]:
    """Three racks, each its own flavor of 2 nodes x 8 GPUs, with the given quota of each for team-a."""
    objects: list[dict[str, Any]] = [b.namespace("team-a"), b.device_class(), kueue_config(), *templates("team-a")]
    for rack in RACKS:
        objects += [flavor(rack), *nodes_in_flavor(rack, 2, 8)]
    objects.append(cluster_queue("team-a", {rack: {"nominal": q} for rack, q in zip(RACKS, quotas, strict=True)}))
    objects += [local_queue("team-a", "team-a"), b.pod_group("train", "team-a", min_count=min_count)]
    return objects


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(
    quotas=st.lists(st.integers(min_value=0, max_value=12), min_size=3, max_size=3),
    shapes=st.lists(st.sampled_from(["one", "two", "four"]), min_size=1, max_size=5),
    placements=st.lists(st.sampled_from(RACKS), min_size=1, max_size=4),
    ending=st.sampled_from(["won", "window", "condition", "deleted"]),
    winner_pick=st.integers(min_value=0, max_value=10),
)
def test_the_attempt_holds_every_placement_evaluated_and_every_ending_releases_it(
    quotas: list[int], shapes: list[str], placements: list[str], ending: str, winner_pick: int
) -> None:
    """Members of random shapes, evaluated placement by placement (a rack each) as kube-scheduler's pod-group cycle
    does: whatever placement wins, the hold covers its whole group in its flavor, never more than the group
    takes in a flavor evaluated, nothing in a flavor not evaluated; the winner's members placed, the rest goes;
    every way the attempt ends lets it all go."""
    clock = Clock()
    engine = engine_for(rack_objects(quotas, len(shapes)), GANGS_ON, clock)
    pods = [member(f"w{index}", shape) for index, shape in enumerate(shapes)]
    for obj in pods:
        engine.store.apply("Pod", "ADDED", obj)
    size = {"one": 1, "two": 2, "four": 4}
    need = sum(size[shape] for shape in shapes)
    succeeded: list[str] = []
    for rack in placements:
        nodes = rack_nodes(engine, rack)
        passed = [bool(filter_(engine, obj, nodes).passed) for obj in pods]
        if all(passed):
            assert need <= quotas[RACKS.index(rack)]
            succeeded.append(rack)
        else:
            assert need > quotas[RACKS.index(rack)]
        hold = held(engine)
        for evaluated in set(succeeded):
            assert hold.get(("team-a", evaluated, RESOURCE), 0) == need  # the winner's whole group, if it wins
        assert all(flavor_name in succeeded for _, flavor_name, _ in hold)  # never where nothing passed
    if not succeeded:
        assert engine.reservations.totals() == {}
        return
    if ending == "won":
        winner = succeeded[winner_pick % len(succeeded)]
        for index in range(len(pods)):
            placed = member(f"w{index}", shapes[index], nominated_node=f"{winner}-{index % 2}")
            engine.store.apply("Pod", "MODIFIED", placed)
            engine.quota_view()
            left = sum(size[shape] for shape in shapes[index + 1 :])
            assert held(engine) == ({("team-a", winner, RESOURCE): left} if left else {})
        assert engine.gangs.view("team-a/train", clock.now).outcome == "won"
    elif ending == "window":
        clock.now += engine.gangs.window_seconds * WON_PATIENCE + 0.1
        engine.quota_view()
    elif ending == "condition":
        failed = b.pod_group(
            "train",
            "team-a",
            min_count=len(shapes),
            conditions=[{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable"}],
        )
        engine.store.apply("PodGroup", "MODIFIED", failed)
        engine.quota_view()
    else:
        engine.store.apply("PodGroup", "DELETED", b.pod_group("train", "team-a", min_count=len(shapes)))
        engine.quota_view()
    assert engine.reservations.totals() == {}


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("call"), st.integers(min_value=0, max_value=3), st.sampled_from(["on-demand", "spot"])),
            st.tuples(st.just("wait"), st.floats(min_value=0.1, max_value=6.0), st.just("")),
            st.tuples(st.just("other"), st.integers(min_value=0, max_value=1), st.just("")),
        ),
        min_size=1,
        max_size=12,
    ),
    quota=st.integers(min_value=4, max_value=10),
)
def test_what_a_member_is_credited_is_exactly_what_the_ledger_holds_for_its_attempt(
    steps: list[tuple[str, Any, str]], quota: int
) -> None:
    """Members' calls (in either rack), time passing (windows, TTLs) and other pods' calls, in any order: what
    a member is credited (held_for) is what the ledger holds for its group, and an attempt in progress holds
    something exactly when the ledger does."""
    from extender.service.gang_attempts import GangAttempts

    clock = Clock()
    engine = racks(quota, min_count=2, clock=clock)
    pods = add_members(engine, 2)
    for kind, value, rack in steps:
        if kind == "call":
            filter_(engine, pods[value % 2], rack_nodes(engine, rack))
        elif kind == "wait":
            clock.now += value
        else:
            filter_(engine, gpu_pod(f"single-{value}"))
        engine.quota_view()
        ledger = held(engine)
        assert dict(GangAttempts.held_for("team-a/train", engine.reservations)) == ledger
        attempt = engine.gangs.view("team-a/train", clock.now)
        if attempt is not None and attempt.outcome == "in progress":
            assert dict(attempt.hold) == ledger
        else:
            assert ledger == {}


def test_the_condition_turning_true_keeps_the_hold_until_the_members_show_placed() -> None:
    """kube-scheduler writes PodGroupInitiallyScheduled=True when its cycle ends, before any member is nominated:
    the hold stays (every placement evaluated) until the members show where the group went."""
    engine = racks(6)
    pods = add_members(engine, 3)
    for rack in ("on-demand", "spot"):
        for obj in pods:
            assert filter_(engine, obj, rack_nodes(engine, rack)).passed
    scheduled = b.pod_group(
        "train", "team-a", min_count=3, conditions=[{"type": "PodGroupInitiallyScheduled", "status": "True"}]
    )
    engine.store.apply("PodGroup", "MODIFIED", scheduled)
    engine.quota_view()
    assert held(engine) == {OD: 6, SPOT: 6}
    assert not filter_(engine, gpu_pod("single")).passed
    for index in range(3):
        engine.store.apply("Pod", "MODIFIED", member(f"w{index}", nominated_node=f"on-demand-{index}"))
    engine.quota_view()
    assert held(engine) == {} and engine.gangs.view("team-a/train", 0).outcome == "won"
    single = filter_(engine, gpu_pod("single"))
    assert single.passed and set(single.passed) <= set(rack_nodes(engine, "spot"))


def test_members_beyond_min_count_are_refused_on_their_own_and_leave_the_hold() -> None:
    """kube-scheduler tries every pod of a group in its cycle, more than minCount when there are: members asked
    before count as they are, so a member beyond minCount that the queue cannot take is refused, the group's
    hold for the others stays, and the queue never holds more than it has."""
    engine = gang(6, min_count=3)
    pods = add_members(engine, 5)
    for obj in pods[:3]:
        assert filter_(engine, obj).passed
    assert held(engine) == {OD: 6}
    for obj in pods[3:]:
        decision = filter_(engine, obj)
        assert decision.passed == [] and decision.gang is not None and decision.gang.extra
        assert held(engine) == {OD: 6}
    engine = gang(8, min_count=3)
    pods = add_members(engine, 5)
    for obj in pods[:4]:
        assert filter_(engine, obj).passed
    assert held(engine) == {OD: 8}  # four asked and passed: kube-scheduler binds the four
    assert not filter_(engine, pods[4]).passed


# --- a member's need from its group's census ------------------------------------------------------------------

CENSUS_MEMBERS = 6
CENSUS_STATES = ("pending", "nominated", "bound", "finished")


def census_member(index: int, state: str) -> dict[str, Any]:
    return b.pod(
        f"w{index}",
        "ns",
        queue="q",
        pod_group="train",
        node_name="n1" if state == "bound" else "",
        nominated_node="n2" if state == "nominated" else "",
        phase="Succeeded" if state == "finished" else "",
    )


def walked(snapshot: ClusterSnapshot, pod: Pod, group_key: str) -> tuple[int, int, tuple[str, ...]]:
    """(placed, present, pending uids) counted for this pod alone."""
    live = [member for member in snapshot.members_of(group_key) if not member.is_terminal]
    others = [member for member in live if member.uid != pod.uid]
    present = len(live) + (0 if any(member.uid == pod.uid for member in live) else 1)
    return (
        sum(1 for member in others if placed(member)),
        present,
        tuple(member.uid for member in others if not placed(member)),
    )


census_steps = st.lists(
    st.tuples(
        st.integers(0, CENSUS_MEMBERS - 1),
        st.sampled_from((*CENSUS_STATES, "deleted")),
        st.integers(0, CENSUS_MEMBERS),  # the member asked about; CENSUS_MEMBERS is never in the view
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(census_steps)
def test_a_members_need_from_the_census_equals_a_walk_for_that_member(history: list[tuple[int, str, int]]) -> None:
    """A member's need, read from its group's census kept per snapshot (GangAttempts.need), equals a walk over
    the members made for that member alone, through any history of members arriving, being placed and
    finishing."""
    store = ClusterStore()
    store.apply("PodGroup", "ADDED", b.pod_group("train", "ns", min_count=CENSUS_MEMBERS))
    attempts = GangAttempts(30.0)
    context = cast(QuotaContext, None)  # read only for a group's own claims, which these members have none of
    present: set[int] = set()
    for index, state, asked in history:
        if state == "deleted":
            if index in present:
                store.apply("Pod", "DELETED", census_member(index, "pending"))
                present.discard(index)
        else:
            store.apply("Pod", "MODIFIED" if index in present else "ADDED", census_member(index, state))
            present.add(index)
        snapshot = store.snapshot()
        group = snapshot.pod_groups["ns/train"]
        # twice per snapshot: the second time from the census the first call made
        for pod in (parse_pod(census_member(asked, "pending")), parse_pod(census_member(asked, "pending"))):
            need = attempts.need(snapshot, pod, group, context, group_claims=False)
            assert (need.placed, need.present, tuple(m.uid for m in need.pending)) == walked(snapshot, pod, group.key)
