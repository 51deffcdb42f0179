"""The preemption oracle and the flavor walk that asks it, against scenarios derived from Kueue v0.19.2's
flavorassigner and preemption test cases (pkg/scheduler/flavorassigner/flavorassigner_test.go, pkg/scheduler/
preemption/*_test.go). Kueue's flavorassigner tests mock the oracle; here the holders are real running pods of
the scenario, given the priorities that make Kueue's classical or fair-sharing preemption find (or not find)
candidates. One test per bullet of "why" in the issue, then the oracle's rules one by one."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import pytest
import yaml

from extender.decisions.quota.ledger import QuotaLedger
from extender.decisions.quota.preemption_oracle import (
    Holder,
    PreemptionOracle,
    PreemptionPossibility,
    Preemptor,
    satisfies_policy,
)
from extender.decisions.quota.tree import QuotaTree
from extender.reports.text import render_table
from extender.state.core import parse_pod
from extender.state.errors import ObjectError
from extender.state.kueue.cluster_queue import parse_cluster_queue
from extender.state.kueue.cohort import parse_cohort
from extender.state.kueue.preemption import PreemptionPolicy, parse_preemption
from testkit import builders as b
from testkit.scenarios import FLAVOR_LABEL, RESOURCE, cohort, local_queue
from tests.support.scenarios import engine_for

OTHER = "example.com/other"
OTHER_CLASS = "other.example.com"


# --- scenario objects ------------------------------------------------------------------------------------------


def rflavor(name: str, labelled: bool = True) -> dict[str, Any]:
    spec = {"nodeLabels": {FLAVOR_LABEL: name}} if labelled else {}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def queue(
    name: str,
    groups: list[tuple[list[str], list[tuple[str, dict[str, Any]]]]],
    *,
    cohort: str | None = "pool",
    preemption: dict[str, Any] | None = None,
    fungibility: dict[str, str] | None = None,
) -> dict[str, Any]:
    """groups: [(covered resources, [(flavor, {"nominal": n, "borrowingLimit": l, ...})])]; one quota per
    covered resource."""
    resource_groups = [
        {
            "coveredResources": covered,
            "flavors": [
                {
                    "name": flavor,
                    "resources": [
                        {"name": r, "nominalQuota": q["nominal"], **{k: v for k, v in q.items() if k != "nominal"}}
                        for r in covered
                    ],
                }
                for flavor, q in flavors
            ],
        }
        for covered, flavors in groups
    ]
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": resource_groups}
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    if fungibility:
        spec["flavorFungibility"] = fungibility
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def gpu_queue(name: str, flavors: list[tuple[str, dict[str, Any]]], **kwargs: Any) -> dict[str, Any]:
    return queue(name, [([RESOURCE], flavors)], **kwargs)


def kueue_config(mappings: dict[str, str], fair_sharing: bool = False) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "resources": {"deviceClassMappings": [{"name": r, "deviceClassNames": [c]} for r, c in mappings.items()]},
    }
    if fair_sharing:
        config["fairSharing"] = {}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
        "data": {"controller_manager_config.yaml": yaml.safe_dump(config)},
    }


def team(namespace: str, cluster_queue: str) -> list[dict[str, Any]]:
    templates = [b.claim_template(f"gpu{n}", namespace, [b.exact_request("gpu", n)]) for n in (1, 2, 4)]
    return [b.namespace(namespace), local_queue(namespace, cluster_queue), *templates]


def nodes(flavor: str, count: int = 1, gpus: int = 8) -> list[dict[str, Any]]:
    objects = []
    for index in range(1, count + 1):
        name = f"{flavor}-{index}"
        objects += [b.node(name, {FLAVOR_LABEL: flavor}), b.gpu_slice(name, gpus)]
    return objects


def running(name: str, namespace: str, node: str, gpus: range, priority: int = 0) -> list[dict[str, Any]]:
    """A bound pod of the namespace's queue holding gpus `gpus` of `node`."""
    uid = f"uid-{namespace}-{name}"
    pod = b.pod(name, namespace, claims={"gpu": f"{name}-gpu"}, queue="q", node_name=node)
    pod["spec"]["priority"] = priority
    claim = b.claim(
        f"{name}-gpu",
        namespace,
        [b.exact_request("gpu", len(gpus))],
        allocated=[("gpu", node, f"gpu-{i}") for i in gpus],
        reserved_for=[(name, uid)],
    )
    return [pod, claim]


def pending(name: str, gpus: int, priority: int = 0, namespace: str = "team-a") -> Any:
    pod = b.pod(name, namespace, templates={"gpu": f"gpu{gpus}"}, queue="q")
    pod["spec"]["priority"] = priority
    return parse_pod(pod)


def decide(objects: list[dict[str, Any]], pod: Any) -> Any:
    engine = engine_for(objects)
    return engine.filter(pod, sorted(engine.snapshot().nodes))


# --- why: MayStopSearch at a flavor reachable only by borrowing, with lower-priority work elsewhere -------------


def borrowing_objects(holder_priority: int, *, threshold: int | None = None, fair_sharing: bool = False) -> list:
    """Flavor one: team-a has no quota of its own (borrowingLimit 4); team-b (nominal 2) runs 4 GPUs at
    `holder_priority`, borrowing team-c's 2. Flavor two: team-a's own 4, empty. Both fungibility policies stop."""
    borrow = {"policy": "LowerPriority"}
    if threshold is not None:
        borrow["maxPriorityThreshold"] = threshold
    preemption: dict[str, Any] = {"reclaimWithinCohort": "LowerPriority", "borrowWithinCohort": borrow}
    if fair_sharing:
        preemption = {"reclaimWithinCohort": "Any"}
    return [
        kueue_config({RESOURCE: b.GPU_CLASS}, fair_sharing=fair_sharing),
        b.device_class(),
        rflavor("one"),
        rflavor("two"),
        *nodes("one"),
        *nodes("two"),
        gpu_queue(
            "team-a",
            [("one", {"nominal": 0, "borrowingLimit": 4}), ("two", {"nominal": 4})],
            preemption=preemption,
            fungibility={"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"},
        ),
        gpu_queue("team-b", [("one", {"nominal": 2})]),
        gpu_queue("team-c", [("one", {"nominal": 2})]),
        *team("team-a", "team-a"),
        *team("team-b", "team-b"),
        *running("b1", "team-b", "one-1", range(0, 2), holder_priority),
        *running("b2", "team-b", "one-1", range(2, 4), holder_priority),
    ]


def test_may_stop_search_stops_at_a_borrowing_flavor_where_lower_priority_work_can_be_reclaimed():
    """Kueue: 'when borrowing while preemption is needed for flavor one; WhenCanBorrow=MayStopSearch,
    WhenCanPreempt=MayStopSearch' -> flavor one, mode Preempt. The pod waits for flavor one; the second flavor's
    node does not pass, and every node names the flavor, whom Kueue would preempt and that we never evict."""
    decision = decide(borrowing_objects(holder_priority=0), pending("p", 2, priority=100))
    assert decision.passed == []
    assert decision.quota.chosen_flavor == "one"
    reason = decision.verdicts["two-1"].reason
    assert reason == decision.verdicts["one-1"].reason
    assert not decision.verdicts["two-1"].unresolvable
    assert "in flavor one" in reason and "(ClusterQueue team-b, priority 0)" in reason
    assert "Workload" not in reason and "Pod team-b/b" in reason
    assert "the extender never evicts: Kueue (or an operator) must make the room" in reason


def test_borrowing_flavor_without_lower_priority_work_moves_on():
    """team-b's work has the pod's priority: no candidates, so the walk tries flavor two, which fits."""
    decision = decide(borrowing_objects(holder_priority=100), pending("p", 2, priority=100))
    assert decision.passed == ["two-1"] and decision.quota.chosen_flavor == "two"


def test_max_priority_threshold_below_the_holders_keeps_them_from_a_borrowing_pod():
    """borrowWithinCohort.maxPriorityThreshold -1 (negative thresholds are valid): priority-0 work is above it,
    so a pod that must borrow cannot reclaim it (isAboveBorrowingThreshold) and moves on to flavor two."""
    decision = decide(borrowing_objects(holder_priority=0, threshold=-1), pending("p", 2, priority=100))
    assert decision.passed == ["two-1"]
    at_threshold = decide(borrowing_objects(holder_priority=0, threshold=0), pending("p", 2, priority=100))
    assert at_threshold.passed == [] and at_threshold.quota.chosen_flavor == "one"


def test_fair_sharing_with_reclaim_any_stops_at_the_borrowing_flavor():
    """Kueue: '... fair sharing enabled, reclaimWithinCohort=Any' -> flavor one, Preempt. With fair sharing the
    queue may preempt while borrowing without borrowWithinCohort; team-b borrows, so its work is a candidate
    whatever its priority."""
    decision = decide(borrowing_objects(holder_priority=1000, fair_sharing=True), pending("p", 2, priority=0))
    assert decision.passed == [] and decision.quota.chosen_flavor == "one"
    assert "reclaim quota from" in decision.verdicts["one-1"].reason
    without = decide(borrowing_objects(holder_priority=1000), pending("p", 2, priority=0))
    assert without.passed == ["two-1"]  # classical: higher-priority work cannot be reclaimed while borrowing


# --- why: within nominal, but the only holders have the pod's priority (hierarchical cohorts) -----------------


def hierarchical_objects(holder_priority: int) -> list[dict[str, Any]]:
    """Kueue's 'Select deeper-borrowing flavor that fits when shallower-borrowing flavor has no preemption
    candidates': cohorts one < two < three each provide 4 of their flavor; team-a in cohort one has 4 of flavor
    one (all used) and none of two or three of its own; PreemptionOverBorrowing."""
    return [
        kueue_config({RESOURCE: b.GPU_CLASS}),
        b.device_class(),
        *(rflavor(name) for name in ("one", "two", "three")),
        *nodes("one"),
        *nodes("two"),
        *nodes("three"),
        cohort("three", None, {"three": 4}),
        cohort("two", "three", {"two": 4}),
        cohort("one", "two", {"one": 4}),
        gpu_queue(
            "team-a",
            [("one", {"nominal": 4, "borrowingLimit": 0}), ("two", {"nominal": 0}), ("three", {"nominal": 0})],
            cohort="one",
            preemption={"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "LowerPriority"},
            fungibility={
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "TryNextFlavor",
                "preference": "PreemptionOverBorrowing",
            },
        ),
        gpu_queue("other", [("one", {"nominal": 0}), ("two", {"nominal": 0}), ("three", {"nominal": 0})], cohort="two"),
        *team("team-a", "team-a"),
        *running("a1", "team-a", "one-1", range(0, 4), holder_priority),
    ]


def test_no_candidates_within_nominal_picks_the_flavor_that_fits_by_borrowing():
    decision = decide(hierarchical_objects(holder_priority=0), pending("p", 4, priority=0))
    # flavor two borrows from cohort two (height 2), flavor three from the root (height 3): two is preferred
    assert decision.passed == ["two-1"] and decision.quota.chosen_flavor == "two"


def test_lower_priority_holder_within_nominal_is_preferred_over_borrowing():
    """PreemptionOverBorrowing: preempting within nominal quota (borrowing 0) beats borrowing."""
    decision = decide(hierarchical_objects(holder_priority=0), pending("p", 4, priority=10))
    assert decision.passed == [] and decision.quota.chosen_flavor == "one"
    assert "Pod team-a/a1 (ClusterQueue team-a, priority 0)" in decision.verdicts["two-1"].reason


# --- why: several resource groups, one could fit with preemption, the other never ----------------------------


def two_group_objects() -> list[dict[str, Any]]:
    return [
        kueue_config({RESOURCE: b.GPU_CLASS, OTHER: OTHER_CLASS}),
        b.device_class(),
        b.device_class(OTHER_CLASS),
        rflavor("one", labelled=False),
        rflavor("b_one", labelled=False),
        b.node("n1"),
        b.gpu_slice("n1", 8),
        queue(
            "team-a",
            [([RESOURCE], [("one", {"nominal": 2})]), ([OTHER], [("b_one", {"nominal": 1})])],
            cohort=None,
            preemption={"withinClusterQueue": "LowerPriority"},
        ),
        *team("team-a", "team-a"),
        b.claim_template("other2", "team-a", [b.exact_request("other", 2, device_class_name=OTHER_CLASS)]),
        *running("low", "team-a", "n1", range(0, 2), 0),
    ]


def test_a_group_that_can_never_fit_makes_the_pod_unresolvable():
    """Kueue: 'multiple resource groups, one could fit with preemption, other doesn't fit' -> NoFit,
    ExceedsMaxQuota. Waiting cannot help, whatever preemption would do for the first group."""
    pod = b.pod("p", "team-a", templates={"gpu": "gpu2", "other": "other2"}, queue="q")
    pod["spec"]["priority"] = 10
    decision = decide(two_group_objects(), parse_pod(pod))
    verdict = decision.verdicts["n1"]
    assert decision.passed == []
    assert verdict.unresolvable and verdict.category == "quota-exceeds-maximum"
    assert OTHER in verdict.reason


def test_a_group_that_needs_preemption_alone_stays_resolvable():
    pod = b.pod("p", "team-a", templates={"gpu": "gpu2"}, queue="q")
    pod["spec"]["priority"] = 10
    verdict = decide(two_group_objects(), parse_pod(pod)).verdicts["n1"]
    assert not verdict.unresolvable and "Pod team-a/low (ClusterQueue team-a, priority 0)" in verdict.reason


# --- reasons: quota exhausted in every flavor ------------------------------------------------------------------


def test_exhausted_in_every_flavor_lists_each_flavor_with_its_shortfall():
    objects = [
        kueue_config({RESOURCE: b.GPU_CLASS}),
        b.device_class(),
        rflavor("on-demand"),
        rflavor("spot"),
        *nodes("on-demand"),
        *nodes("spot"),
        gpu_queue("team-a", [("on-demand", {"nominal": 2}), ("spot", {"nominal": 2})], cohort=None),
        *team("team-a", "team-a"),
        *running("od", "team-a", "on-demand-1", range(0, 2)),
        *running("sp", "team-a", "spot-1", range(0, 1)),
    ]
    decision = decide(objects, pending("p", 2))
    spot = decision.verdicts["spot-1"]
    assert decision.passed == [] and decision.quota.chosen_flavor == ""
    assert "assigned flavor" not in spot.reason and spot.reason == decision.verdicts["on-demand-1"].reason
    assert spot.reason.startswith(f"no flavor of ClusterQueue team-a fits this pod's {RESOURCE} now")
    assert "on-demand: quota exhausted" in spot.reason and "2 more needed" in spot.reason
    assert "spot: quota exhausted" in spot.reason and "1 more needed" in spot.reason
    assert not spot.unresolvable


# --- the oracle's rules ----------------------------------------------------------------------------------------


def oracle_for(
    queues: list[dict[str, Any]],
    usage: dict[tuple[str, str, str], int],
    holders: list[Holder],
    preemptor: Preemptor,
    cohorts: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> tuple[PreemptionOracle, dict[str, Any]]:
    parsed = {q["metadata"]["name"]: parse_cluster_queue(q) for q in queues}
    tree = QuotaTree(parsed.values(), [parse_cohort(c) for c in cohorts])
    ledger = QuotaLedger.from_usage(tree, usage)

    def lookup(cq: str, flavor: str, resource: str) -> list[Holder]:
        return [h for h in holders if h.cluster_queue == cq]

    return PreemptionOracle(tree, ledger, lookup, preemptor), parsed


def holder(unit: str, cq: str, priority: int, amount: int, created: str = "") -> Holder:
    return Holder(unit, cq, priority, created, Fraction(amount))


def test_only_the_targets_needed_are_kept():
    """fillBackWorkloads: of the lower-priority holders taken in order, those the pod does not need gone stay."""
    cq = gpu_queue("a", [("f", {"nominal": 4})], cohort=None, preemption={"withinClusterQueue": "LowerPriority"})
    holders = [holder("small", "a", 0, 1), holder("big", "a", 1, 3)]
    oracle, queues = oracle_for([cq], {("a", "f", RESOURCE): 4}, holders, Preemptor(5))
    answer = oracle.simulate(queues["a"], "f", RESOURCE, Fraction(3))
    assert answer.possibility is PreemptionPossibility.PREEMPT
    assert [t.unit for t in answer.targets] == ["big"]  # "small" (tried first, lower priority) is given back
    assert answer.borrow == 0


def test_never_policy_finds_no_candidates():
    cq = gpu_queue("a", [("f", {"nominal": 4})], cohort=None)
    oracle, queues = oracle_for([cq], {("a", "f", RESOURCE): 4}, [holder("x", "a", 0, 4)], Preemptor(5))
    answer = oracle.simulate(queues["a"], "f", RESOURCE, Fraction(1))
    assert answer == (PreemptionPossibility.NO_CANDIDATES, 0, ())


def test_reclaim_only_from_queues_that_borrow():
    """A cohort peer within its nominal quota is never a candidate (IsWithinNominalInResources)."""
    a = gpu_queue("a", [("f", {"nominal": 2})], preemption={"reclaimWithinCohort": "Any"})
    b_queue = gpu_queue("b", [("f", {"nominal": 2})])
    borrowing = {("b", "f", RESOURCE): 4}
    oracle, queues = oracle_for([a, b_queue], borrowing, [holder("y", "b", 0, 4)], Preemptor(0))
    answer = oracle.simulate(queues["a"], "f", RESOURCE, Fraction(2))
    assert answer.possibility is PreemptionPossibility.RECLAIM and answer.borrow == 0
    within = {("b", "f", RESOURCE): 2}
    oracle, queues = oracle_for([a, b_queue], within, [holder("y", "b", 0, 2)], Preemptor(0))
    assert oracle.simulate(queues["a"], "f", RESOURCE, Fraction(3)).possibility is PreemptionPossibility.NO_CANDIDATES


@pytest.mark.parametrize(
    "policy, preemptor, candidate, expected",
    [
        (PreemptionPolicy.LOWER_PRIORITY, (10, ""), (5, ""), True),
        (PreemptionPolicy.LOWER_PRIORITY, (10, ""), (10, ""), False),
        (
            PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY,
            (10, "2026-01-01T00:00:00Z"),
            (10, "2026-01-01T00:01:00Z"),
            True,
        ),
        (
            PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY,
            (10, "2026-01-01T00:01:00Z"),
            (10, "2026-01-01T00:00:00Z"),
            False,
        ),
        (
            PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY,
            (10, "2026-01-01T00:00:00Z"),
            (10, "2026-01-01T00:00:00Z"),
            False,
        ),
        (PreemptionPolicy.ANY, (1, ""), (100, ""), True),
        (PreemptionPolicy.NEVER, (100, ""), (1, ""), False),
    ],
)
def test_satisfies_preemption_policy(policy, preemptor, candidate, expected):
    assert satisfies_policy(Preemptor(*preemptor), holder("c", "q", candidate[0], 1, candidate[1]), policy) is expected


def test_preemption_policies_are_parsed_and_validated_as_the_crd_does():
    parsed = parse_preemption(
        {
            "preemption": {
                "withinClusterQueue": "LowerOrNewerEqualPriority",
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": -5},
            }
        },
        "spec",
    )
    assert parsed.within_cluster_queue is PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
    assert parsed.max_priority_threshold == -5 and not parsed.borrowing_within_cohort_forbidden
    with pytest.raises(ObjectError, match=re.escape("spec.preemption.withinClusterQueue")):
        parse_preemption({"preemption": {"withinClusterQueue": "Any"}}, "spec")
    with pytest.raises(ObjectError, match=re.escape("borrowWithinCohort.Policy!=Never")):
        parse_preemption({"preemption": {"borrowWithinCohort": {"policy": "LowerPriority"}}}, "spec")
    with pytest.raises(ObjectError, match="maxPriorityThreshold"):
        parse_preemption(
            {
                "preemption": {
                    "reclaimWithinCohort": "Any",
                    "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 2**31},
                }
            },
            "spec",
        )


def test_a_cluster_queue_with_a_bad_policy_is_refused_with_its_field_path():
    """Bad input never reaches the oracle: the ClusterQueue is refused as the API server's CRD would."""
    bad = gpu_queue("a", [("f", {"nominal": 1})], preemption={"reclaimWithinCohort": "Sometimes"})
    with pytest.raises(ObjectError, match=re.escape("spec.preemption.reclaimWithinCohort")):
        parse_cluster_queue(bad)


def test_a_pod_that_passes_without_a_flavor_is_not_told_none_fits():
    """A governed pod without devices is charged nothing, so it has no flavor; beside "N node(s) pass" the
    table must not say that no flavor fits."""
    decision: dict[str, Any] = {
        "pod": "team-a/p",
        "strategy": "MostAllocated",
        "quota": {"governed": True, "clusterQueue": "team-a", "chosenFlavor": ""},
        "passed": 4,
        "failed": 0,
        "nodes": [],
    }
    assert "(none fits)" not in render_table(decision) and "(none: nothing charged)" in render_table(decision)
    decision["passed"], decision["failed"] = 0, 4
    assert "flavor (none fits)" in render_table(decision)


# --- priorities as Kueue reads them: the Workload's spec.priority --------------------------------------------


def workload_objects(held_by: dict[str, Any]) -> list[dict[str, Any]]:
    """Flavor one (nominal 2) held entirely by `held_by`; flavor two empty; the queue stops where it could
    preempt and may preempt lower priority work within itself."""
    return [
        kueue_config({RESOURCE: b.GPU_CLASS}),
        b.device_class(),
        rflavor("one"),
        rflavor("two"),
        *nodes("one"),
        *nodes("two"),
        gpu_queue(
            "team-a",
            [("one", {"nominal": 2}), ("two", {"nominal": 2})],
            cohort=None,
            preemption={"withinClusterQueue": "LowerPriority"},
            fungibility={"whenCanPreempt": "MayStopSearch"},
        ),
        *team("team-a", "team-a"),
        held_by,
    ]


def admitted_workload(priority: int) -> dict[str, Any]:
    obj = b.workload("trainer", "team-a", "team-a", {RESOURCE: 2}, "one", owner_uid="uid-job-trainer")
    obj["spec"]["priority"] = priority
    return obj


@pytest.mark.parametrize("priority, stops", [(0, True), (200, False)])
def test_an_admitted_workloads_hold_is_one_holder_with_the_workloads_priority(priority: int, stops: bool):
    decision = decide(workload_objects(admitted_workload(priority)), pending("p", 1, priority=100))
    if stops:
        assert decision.passed == [] and decision.quota.chosen_flavor == "one"
        assert "Workload team-a/trainer (ClusterQueue team-a, priority 0)" in decision.verdicts["two-1"].reason
    else:
        assert decision.passed == ["two-1"]


def test_a_pending_pods_own_workload_priority_is_its_priority():
    """Kueue compares the preemptor Workload's spec.priority (from a WorkloadPriorityClass here), not the
    pod's: a pod of priority 0 whose pending Workload has priority 100 may preempt priority-50 work."""
    pod = b.pod("p", "team-a", templates={"gpu": "gpu1"}, queue="q")
    own = b.workload("p-wl", "team-a", "team-a", {RESOURCE: 1}, "one", owner_uid="uid-team-a-p", owner_kind="Pod")
    own["status"] = {}  # pending: not admitted yet
    own["spec"]["priority"] = 100
    decision = decide([*workload_objects(admitted_workload(50)), own], parse_pod(pod))
    assert decision.passed == [] and decision.quota.chosen_flavor == "one"
    without = decide(workload_objects(admitted_workload(50)), parse_pod(pod))
    assert without.passed == ["two-1"]


def shared_cohort_queues() -> list[dict[str, Any]]:
    """Kueue's preemption tests' 'with_shared_cq' cohort, for one resource: two queues with 1 each and room to
    borrow 12 (borrowWithinCohort LowerPriority up to priority 0), and a lender of 10 more."""
    borrow = {"policy": "LowerPriority", "maxPriorityThreshold": 0}
    a = gpu_queue(
        "a_standard",
        [("default", {"nominal": 1, "borrowingLimit": 12})],
        cohort="with_shared_cq",
        preemption={
            "withinClusterQueue": "Never",
            "reclaimWithinCohort": "LowerPriority",
            "borrowWithinCohort": borrow,
        },
    )
    b_queue = gpu_queue(
        "b_standard",
        [("default", {"nominal": 1, "borrowingLimit": 12})],
        cohort="with_shared_cq",
        preemption={"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any", "borrowWithinCohort": borrow},
    )
    shared = gpu_queue("shared", [("default", {"nominal": 10})], cohort="with_shared_cq")
    return [a, b_queue, shared]


@pytest.mark.parametrize(
    "held, asked, possibility",
    [
        # the holder (priority 1) is above the threshold and the pod would still borrow after preempting it
        (10, 10, PreemptionPossibility.NO_CANDIDATES),
        # the pod fits within its nominal quota once the borrower is gone: the threshold does not apply
        (12, 1, PreemptionPossibility.RECLAIM),
    ],
)
def test_max_priority_threshold_as_kueue_applies_it(held: int, asked: int, possibility: PreemptionPossibility):
    holders = [holder("Workload b_standard", "b_standard", 1, held)]
    usage = {("b_standard", "default", RESOURCE): held}
    oracle, queues = oracle_for(shared_cohort_queues(), usage, holders, Preemptor(2))
    answer = oracle.simulate(queues["a_standard"], "default", RESOURCE, Fraction(asked))
    assert answer.possibility is possibility


def test_a_node_whose_own_charge_can_never_fit_stays_unresolvable_beside_the_pods_reason():
    """allocationMode All charges each node what it holds: on the 8-GPU node more than the queue could ever
    have. Every other node shares the pod's reason (with one flavor, that flavor's own: quota exhausted, how much
    more is needed, nothing to preempt); that node keeps its own."""
    objects = [
        kueue_config({RESOURCE: b.GPU_CLASS}),
        b.device_class(),
        rflavor("one"),
        b.node("small", {FLAVOR_LABEL: "one"}),
        b.gpu_slice("small", 2),
        b.node("big", {FLAVOR_LABEL: "one"}),
        b.gpu_slice("big", 8),
        *nodes("one", gpus=4),
        gpu_queue("team-a", [("one", {"nominal": 4})], cohort=None),
        *team("team-a", "team-a"),
        b.claim_template("all", "team-a", [b.exact_request("gpu", mode="All")]),
        *running("holder", "team-a", "one-1", range(0, 4)),
    ]
    pod = parse_pod(b.pod("p", "team-a", templates={"gpu": "all"}, queue="q"))
    decision = decide(objects, pod)
    small, big = decision.verdicts["small"], decision.verdicts["big"]
    assert decision.passed == []
    assert not small.unresolvable and small.reason == (
        "ClusterQueue team-a quota exhausted for example.com/gpu in flavor one: requested 2, available 0, "
        "2 more needed, nothing Kueue may preempt for it"
    )
    assert big.unresolvable and "can never provide 8" in big.reason
