"""Quota scenarios end to end through the engine (no HTTP): flavors, borrowing, reservations, reasons."""

from __future__ import annotations

from fractions import Fraction

import pytest

from extender.decisions.ranking import score_nodes
from extender.state.core import parse_pod
from extender.transport.wire import ExtenderArgs, filter_result
from testkit import builders as b
from testkit.scenarios import RESOURCE, cluster_queue, gpu_pod, kueue_config, local_queue
from tests.support.quota import allocated_claim, base_objects, filter_pod, recount_usage
from tests.support.scenarios import engine_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_pod_without_queue_label_is_not_governed():
    engine = engine_for(base_objects({"on-demand": {"nominal": 0}}))
    decision = filter_pod(engine, gpu_pod("p", queue=None))
    assert not decision.quota.governed
    assert len(decision.passed) == 4


def test_first_flavor_chosen_and_only_its_nodes_pass():
    engine = engine_for(base_objects({"on-demand": {"nominal": 8}, "spot": {"nominal": 8}}))
    decision = filter_pod(engine, gpu_pod("p"))
    assert decision.quota.chosen_flavor == "on-demand"
    assert sorted(decision.passed) == ["on-demand-0", "on-demand-1"]
    spot = decision.verdicts["spot-0"]
    assert not spot.passed and not spot.unresolvable
    assert spot.reason == decision.verdicts["spot-1"].reason  # aggregatable
    assert "assigned flavor on-demand" in spot.reason
    assert decision.reservation == {("team-a", "on-demand", RESOURCE): Fraction(2)}


def test_reservations_push_the_next_pods_to_the_next_flavor_then_exhaust():
    engine = engine_for(base_objects({"on-demand": {"nominal": 4}, "spot": {"nominal": 2}}))
    first = filter_pod(engine, gpu_pod("p1"))
    second = filter_pod(engine, gpu_pod("p2"))
    third = filter_pod(engine, gpu_pod("p3"))
    fourth = filter_pod(engine, gpu_pod("p4"))
    assert first.quota.chosen_flavor == "on-demand"
    assert second.quota.chosen_flavor == "on-demand"
    assert third.quota.chosen_flavor == "spot"
    assert fourth.passed == []
    reason = fourth.verdicts["on-demand-0"].reason
    assert "quota exhausted" in reason and "requested 2, available 0" in reason
    assert not fourth.verdicts["on-demand-0"].unresolvable


def test_same_pod_filtered_twice_is_charged_once():
    engine = engine_for(base_objects({"on-demand": {"nominal": 2}}))
    pod = gpu_pod("p1")
    assert filter_pod(engine, pod).passed
    again = filter_pod(engine, pod)
    assert sorted(again.passed) == ["on-demand-0", "on-demand-1"]
    assert engine.reservations.totals() == {("team-a", "on-demand", RESOURCE): Fraction(2)}


def test_reservation_expires_after_ttl():
    clock = Clock()
    engine = engine_for(base_objects({"on-demand": {"nominal": 2}}), clock=clock)
    assert filter_pod(engine, gpu_pod("p1")).passed
    assert not filter_pod(engine, gpu_pod("p2")).passed
    clock.now += 61
    assert filter_pod(engine, gpu_pod("p3")).passed


def test_request_above_potential_available_is_unresolvable():
    engine = engine_for(base_objects({"on-demand": {"nominal": 2}}))
    decision = filter_pod(engine, gpu_pod("p", template="four"))
    verdict = decision.verdicts["on-demand-0"]
    assert not verdict.passed and verdict.unresolvable
    assert "can never provide 4" in verdict.reason


def test_borrowing_from_cohort():
    engine = engine_for(base_objects({"on-demand": {"nominal": 2}}, {"on-demand": {"nominal": 6}}))
    decision = filter_pod(engine, gpu_pod("p", template="four"))
    assert sorted(decision.passed) == ["on-demand-0", "on-demand-1"]
    fit = decision.verdicts["on-demand-0"].quota.fits[0]
    assert fit.outcome.value == "FitsByBorrowing"


def test_borrowing_limit_caps_borrowing():
    engine = engine_for(base_objects({"on-demand": {"nominal": 2, "borrowingLimit": 1}}, {"on-demand": {"nominal": 6}}))
    decision = filter_pod(engine, gpu_pod("p", template="four"))
    assert decision.passed == []
    assert decision.verdicts["on-demand-0"].unresolvable  # 4 > potentialAvailable 3


def test_lending_limit_keeps_quota_for_owner():
    engine = engine_for(base_objects({"on-demand": {"nominal": 2}}, {"on-demand": {"nominal": 6, "lendingLimit": 1}}))
    assert not filter_pod(engine, gpu_pod("p", template="four")).passed  # can borrow at most 1
    assert filter_pod(engine, gpu_pod("q", template="two")).passed


def test_try_next_flavor_prefers_flavor_without_borrowing():
    objects = base_objects(
        {"on-demand": {"nominal": 0}, "spot": {"nominal": 4}}, {"on-demand": {"nominal": 8}}, try_next=True
    )
    engine = engine_for(objects)
    decision = filter_pod(engine, gpu_pod("p"))
    assert decision.quota.chosen_flavor == "spot"
    may_stop = engine_for(
        base_objects({"on-demand": {"nominal": 0}, "spot": {"nominal": 4}}, {"on-demand": {"nominal": 8}})
    )
    assert filter_pod(may_stop, gpu_pod("p")).quota.chosen_flavor == "on-demand"


def test_next_flavor_when_first_flavor_has_no_feasible_node():
    objects = base_objects({"on-demand": {"nominal": 8}, "spot": {"nominal": 8}}, gpus=2)
    engine = engine_for(objects)
    decision = filter_pod(engine, gpu_pod("p", template="two"), ["on-demand-0", "spot-0"])
    assert decision.quota.chosen_flavor == "on-demand"
    busy = b.claim(
        "busy",
        "team-b",
        [b.exact_request("gpu", 2)],
        allocated=[("gpu", "on-demand-0", "gpu-0"), ("gpu", "on-demand-0", "gpu-1")],
    )
    engine = engine_for([*objects, busy])
    decision = filter_pod(engine, gpu_pod("p", template="two"), ["on-demand-0", "spot-0"])
    assert decision.quota.chosen_flavor == "spot"
    assert decision.passed == ["spot-0"]


def test_all_and_first_available_are_charged_per_node():
    objects = base_objects({"on-demand": {"nominal": 16}})
    used = b.claim(
        "used", "team-b", [b.exact_request("gpu", 3)], allocated=[("gpu", "on-demand-1", f"gpu-{i}") for i in range(3)]
    )
    engine = engine_for([*objects, used])
    decision = filter_pod(engine, gpu_pod("all", template="all"), ["on-demand-0", "on-demand-1"])
    assert decision.verdicts["on-demand-0"].quota.charges == {("team-a", "on-demand", RESOURCE): 8}
    assert not decision.verdicts["on-demand-1"].passed  # some devices in use
    engine = engine_for(
        [
            *objects,
            b.claim(
                "used",
                "team-b",
                [b.exact_request("gpu", 5)],
                allocated=[("gpu", "on-demand-1", f"gpu-{i}") for i in range(5)],
            ),
        ]
    )
    decision = filter_pod(engine, gpu_pod("fa", template="four-or-two"), ["on-demand-0", "on-demand-1"])
    assert decision.verdicts["on-demand-0"].quota.charges[("team-a", "on-demand", RESOURCE)] == 4
    assert decision.verdicts["on-demand-1"].quota.charges[("team-a", "on-demand", RESOURCE)] == 2
    # the reservation holds the larger charge, so no node's placement can overshoot
    assert decision.reservation == {("team-a", "on-demand", RESOURCE): 4}


def test_usage_counts_bound_pods_by_node_flavor():
    objects = base_objects({"on-demand": {"nominal": 4}})
    pod = b.pod(
        "running",
        "team-a",
        templates={"gpu": "two"},
        queue="q",
        node_name="on-demand-0",
        phase="Running",
        claim_statuses={"gpu": "running-gpu"},
    )
    claim = b.claim(
        "running-gpu",
        "team-a",
        [b.exact_request("gpu", 2)],
        allocated=[("gpu", "on-demand-0", "gpu-0"), ("gpu", "on-demand-0", "gpu-1")],
        reserved_for=[("running", "uid-team-a-running")],
    )
    engine = engine_for([*objects, pod, claim])
    assert engine.quota_view().usage == {("team-a", "on-demand", RESOURCE): 2}
    assert filter_pod(engine, gpu_pod("p1")).passed
    assert not filter_pod(engine, gpu_pod("p2")).passed
    finished = dict(pod, status={"phase": "Succeeded"})
    engine.store.apply("Pod", "MODIFIED", finished)
    # finished, its claim still allocated: the devices count until the controller deallocates them
    assert engine.quota_view().usage == {("team-a", "on-demand", RESOURCE): 2}
    engine.store.apply("ResourceClaim", "DELETED", claim)
    assert engine.quota_view().usage == {}


def test_reservation_released_when_pod_seen_bound_and_usage_takes_over():
    objects = base_objects({"on-demand": {"nominal": 2}})
    engine = engine_for(objects)
    pod = gpu_pod("p1")
    assert filter_pod(engine, pod).passed
    assert len(engine.reservations) == 1
    engine.store.apply("Pod", "ADDED", pod)  # the watch sees it, still pending
    assert not filter_pod(engine, gpu_pod("p2")).passed
    bound = b.pod(
        "p1", "team-a", templates={"gpu": "two"}, queue="q", node_name="on-demand-0", claim_statuses={"gpu": "p1-gpu"}
    )
    engine.store.apply(
        "ResourceClaim",
        "ADDED",
        allocated_claim("p1", 2),
    )
    engine.store.apply("Pod", "MODIFIED", bound)
    decision = filter_pod(engine, gpu_pod("p2"))
    assert not decision.passed  # usage now holds the 2 GPUs instead of the reservation
    assert engine.reservations.get("uid-team-a-p1") is None
    engine.store.apply("Pod", "DELETED", bound)
    engine.store.apply("ResourceClaim", "DELETED", b.claim("p1-gpu", "team-a", [b.exact_request("gpu", 2)]))
    assert filter_pod(engine, gpu_pod("p3")).passed


def test_deleted_pending_pod_releases_its_reservation():
    engine = engine_for(base_objects({"on-demand": {"nominal": 2}}))
    pod = gpu_pod("p1")
    filter_pod(engine, pod)
    engine.store.apply("Pod", "ADDED", pod)
    filter_pod(engine, gpu_pod("other", queue=None))
    engine.store.apply("Pod", "DELETED", pod)
    assert filter_pod(engine, gpu_pod("p2")).passed


def test_stopped_cluster_queue_rejects_everywhere():
    objects = base_objects({"on-demand": {"nominal": 8}})
    objects = [o for o in objects if o.get("kind") != "ClusterQueue"]
    objects.append(cluster_queue("team-a", {"on-demand": {"nominal": 8}}, stop="Hold"))
    engine = engine_for(objects)
    decision = filter_pod(engine, gpu_pod("p"))
    assert decision.passed == []
    assert all("stopped (Hold)" in v.reason and v.unresolvable for v in decision.verdicts.values())


def test_missing_local_queue_and_cluster_queue():
    engine = engine_for(base_objects({"on-demand": {"nominal": 8}}))
    decision = filter_pod(engine, gpu_pod("p", queue="nope"))
    assert all(v.reason == "LocalQueue team-a/nope does not exist" for v in decision.verdicts.values())
    decision = filter_pod(engine, gpu_pod("p", namespace="team-b"))
    assert all(
        v.reason == "ClusterQueue team-b of LocalQueue team-b/q does not exist" for v in decision.verdicts.values()
    )


def test_namespace_not_selected():
    objects = [o for o in base_objects({}) if o.get("kind") != "ClusterQueue"]
    objects.append(
        cluster_queue("team-a", {"on-demand": {"nominal": 8}}, namespace_selector={"matchLabels": {"team": "a"}})
    )
    decision = filter_pod(engine_for(objects), gpu_pod("p"))
    assert all("does not admit workloads from namespace team-a" in v.reason for v in decision.verdicts.values())


def test_resource_not_covered():
    objects = [o for o in base_objects({}) if o.get("kind") not in ("ClusterQueue", "ConfigMap")]
    objects += [
        kueue_config({"other.com/thing": ["gpu.example.com"]}),
        cluster_queue("team-a", {"on-demand": {"nominal": 8}}),
    ]
    decision = filter_pod(engine_for(objects), gpu_pod("p"))
    assert decision.passed == []
    assert "no quota for other.com/thing" in decision.verdicts["on-demand-0"].reason


def test_v1beta1_cluster_queue_cohort_field():
    objects = [o for o in base_objects({}) if o.get("kind") != "ClusterQueue"]
    objects += [
        cluster_queue("team-a", {"on-demand": {"nominal": 2}}, api_version="kueue.x-k8s.io/v1beta1"),
        cluster_queue("team-b", {"on-demand": {"nominal": 6}}, api_version="kueue.x-k8s.io/v1beta1"),
    ]
    decision = filter_pod(engine_for(objects), gpu_pod("p", template="four"))
    assert decision.passed  # borrowed from team-b through the v1beta1 `cohort` field


def test_hierarchical_cohort_quota():
    objects = [o for o in base_objects({}) if o.get("kind") != "ClusterQueue"]
    objects += [
        cluster_queue("team-a", {"on-demand": {"nominal": 0}}, cohort="child"),
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": "child"},
            "spec": {"parentName": "root"},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": "root"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": [RESOURCE],
                        "flavors": [{"name": "on-demand", "resources": [{"name": RESOURCE, "nominalQuota": 4}]}],
                    }
                ]
            },
        },
    ]
    engine = engine_for(objects)
    assert filter_pod(engine, gpu_pod("p1", template="four")).passed
    assert not filter_pod(engine, gpu_pod("p2", template="one")).passed


def test_unmapped_class_ignored_or_rejected():
    from extender.service import ExtenderConfig
    from extender.service.config import QuotaSection

    objects = [o for o in base_objects({"on-demand": {"nominal": 0}}) if o.get("kind") != "ConfigMap"]
    objects.append(kueue_config({"other.com/x": ["other-class"]}))
    assert filter_pod(engine_for(objects), gpu_pod("p")).passed
    strict = ExtenderConfig(quota=QuotaSection(unmapped_device_classes="reject"))
    decision = filter_pod(engine_for(objects, strict), gpu_pod("p"))
    assert not decision.passed and "no deviceClassMapping" in decision.verdicts["on-demand-0"].reason


def test_no_sequence_overcommits():
    """Many pods filtered back to back never reserve more than Kueue's available."""
    engine = engine_for(
        base_objects({"on-demand": {"nominal": 5}, "spot": {"nominal": 3}}, {"on-demand": {"nominal": 2}})
    )
    for index in range(20):
        filter_pod(engine, gpu_pod(f"p{index}", template="one" if index % 2 else "two"))
    totals = engine.reservations.totals()
    on_demand = totals.get(("team-a", "on-demand", RESOURCE), 0)
    spot = totals.get(("team-a", "spot", RESOURCE), 0)
    assert on_demand <= 7 and spot <= 3  # 5 nominal + 2 borrowable from team-b; spot has no lender
    assert on_demand + spot == 10  # and everything that fits was handed out


def test_admitted_workload_keeps_kueue_flavor():
    objects = base_objects({"on-demand": {"nominal": 8}, "spot": {"nominal": 8}})
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "pod-p",
            "namespace": "team-a",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-team-a-p", "controller": True}
            ],
        },
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]},
        "status": {
            "admission": {
                "clusterQueue": "team-a",
                "podSetAssignments": [{"name": "main", "flavors": {RESOURCE: "spot"}, "count": 1}],
            },
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "x",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        },
    }
    engine = engine_for([*objects, workload])
    decision = filter_pod(engine, gpu_pod("p"))
    assert sorted(decision.passed) == ["spot-0", "spot-1"]
    assert "Kueue admitted this pod's workload to flavor spot" in decision.verdicts["on-demand-0"].reason


def test_deadline_fails_unreached_nodes_with_a_resolvable_reason():
    from extender.service import ExtenderConfig
    from extender.service.config import LimitsSection

    engine = engine_for(
        base_objects({"on-demand": {"nominal": 8}}), ExtenderConfig(limits=LimitsSection(request_deadline_seconds=0.0))
    )
    decision = filter_pod(engine, gpu_pod("p"))
    assert decision.passed == []
    verdict = decision.verdicts["on-demand-0"]
    assert verdict.category == "deadline" and not verdict.unresolvable
    assert "ran out of time" in verdict.reason


def test_bind_confirms_the_charge_of_the_chosen_node_and_failure_releases():
    from extender.service import BindError

    objects = base_objects({"on-demand": {"nominal": 16}})
    used = b.claim(
        "used", "team-b", [b.exact_request("gpu", 5)], allocated=[("gpu", "on-demand-1", f"gpu-{i}") for i in range(5)]
    )
    engine = engine_for([*objects, used])
    bound: list[tuple[str, str, str, str]] = []
    engine.binder = lambda *args: bound.append(args)
    pod = parse_pod(gpu_pod("fa", template="four-or-two"))
    engine.filter(pod, ["on-demand-0", "on-demand-1"])
    key = ("team-a", "on-demand", RESOURCE)
    assert engine.reservations.totals() == {key: 4}
    engine.bind("team-a", "fa", pod.uid, "on-demand-1")
    assert bound == [("team-a", "fa", pod.uid, "on-demand-1")]
    assert engine.reservations.totals() == {key: 2}  # on-demand-1 takes the 2-GPU subrequest
    assert engine.reservations.get(pod.uid).node == "on-demand-1"

    def refuse(*_args):
        raise RuntimeError("conflict: pod already bound")

    engine.binder = refuse
    other = parse_pod(gpu_pod("other"))
    engine.filter(other, ["on-demand-0"])
    with pytest.raises(BindError, match="conflict"):
        engine.bind("team-a", "other", other.uid, "on-demand-0")
    assert engine.reservations.get(other.uid) is None


def test_dangling_references_do_not_break_decisions():
    """A claim of a missing class, a bound pod on a missing node, a LocalQueue of a missing ClusterQueue."""
    objects = base_objects({"on-demand": {"nominal": 8}})
    ghost_pod = b.pod(
        "ghost",
        "team-a",
        templates={"gpu": "two"},
        queue="q",
        node_name="no-such-node",
        phase="Running",
        claim_statuses={"gpu": "ghost-gpu"},
    )
    ghost_claim = b.claim(
        "ghost-gpu",
        "team-a",
        [b.exact_request("gpu", 2, device_class_name="no-such-class")],
        allocated=[("gpu", "no-such-node", "gpu-0")],
        reserved_for=[("ghost", "uid-team-a-ghost")],
    )
    engine = engine_for(
        [
            *objects,
            ghost_pod,
            ghost_claim,
            local_queue("team-a", "no-such-cq", name="orphan"),
            b.claim_template("bad-class", "team-a", [b.exact_request("gpu", 1, device_class_name="nope")]),
        ]
    )
    assert filter_pod(engine, gpu_pod("p")).passed
    decision = filter_pod(engine, gpu_pod("q", template="bad-class"))
    assert decision.passed == [] and "DeviceClass nope does not exist" in decision.verdicts["on-demand-0"].reason
    decision = filter_pod(engine, gpu_pod("r", queue="orphan"))
    assert all("ClusterQueue no-such-cq" in v.reason for v in decision.verdicts.values())


def test_pod_being_bound_counts_as_usage_after_an_extender_restart():
    """A pod whose claim kube-scheduler already allocated (PreBind) but whose binding is not visible yet holds
    quota even for a fresh extender that never saw its filter call and has no reservation for it."""
    objects = base_objects({"on-demand": {"nominal": 2}})
    in_flight = b.pod("p1", "team-a", templates={"gpu": "two"}, queue="q", claim_statuses={"gpu": "p1-gpu"})
    claim = b.claim(
        "p1-gpu",
        "team-a",
        [b.exact_request("gpu", 2)],
        allocated=[("gpu", "on-demand-0", "gpu-0"), ("gpu", "on-demand-0", "gpu-1")],
        allocated_node="on-demand-0",
        reserved_for=[("p1", "uid-team-a-p1")],
    )
    restarted = engine_for([*objects, in_flight, claim])
    assert restarted.quota_view().usage == {("team-a", "on-demand", RESOURCE): 2}
    assert not filter_pod(restarted, gpu_pod("p2")).passed


def test_in_flight_allocation_replaces_the_reservation_without_double_counting():
    engine = engine_for(base_objects({"on-demand": {"nominal": 4}}))
    pod = gpu_pod("p1")
    assert filter_pod(engine, pod).passed
    engine.store.apply(
        "Pod", "ADDED", b.pod("p1", "team-a", templates={"gpu": "two"}, queue="q", claim_statuses={"gpu": "p1-gpu"})
    )
    engine.store.apply(
        "ResourceClaim",
        "ADDED",
        allocated_claim("p1", 2),
    )
    assert filter_pod(engine, gpu_pod("p2")).passed  # 2 in flight + 2 for p2 = 4: not 2 + 2 + 2
    assert engine.reservations.get("uid-team-a-p1") is None
    assert not filter_pod(engine, gpu_pod("p3")).passed


def test_without_any_mappings_a_class_is_charged_to_a_covered_resource_of_its_name():
    objects = [o for o in base_objects({}) if o.get("kind") not in ("ClusterQueue", "ConfigMap")]
    for resource in ("gpu.example.com", "deviceclass.resource.kubernetes.io/gpu.example.com"):
        queue = cluster_queue("team-a", {"on-demand": {"nominal": 2}}, cohort=None)
        queue["spec"]["resourceGroups"][0]["coveredResources"] = [resource]
        queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["name"] = resource
        engine = engine_for([*objects, queue])
        assert filter_pod(engine, gpu_pod("p1")).reservation == {("team-a", "on-demand", resource): 2}
        assert not filter_pod(engine, gpu_pod("p2")).passed
    unrelated = cluster_queue("team-a", {"on-demand": {"nominal": 0}}, cohort=None)
    assert not filter_pod(engine_for([*objects, unrelated]), gpu_pod("p")).quota.reservation  # not governed


def test_verdicts_read_as_a_mapping_in_the_order_asked():
    """decide_pod builds only the failed nodes' verdicts; the passing ones are made when read
    (pod_decision.NodeVerdicts). Read any way, they must be the decision a look at each node gives: every node
    once in the order asked, the passing ones with their allocation and their NodeQuota, the failing ones the
    verdicts the answers use (quota's refusals of a bucket of nodes made from one template, with each node's
    own allocation and NodeQuota); and a pod refused everywhere (its queue is gone) fails every node."""
    busy = b.claim(
        "busy", "team-a", [b.exact_request("gpu", 8)], allocated=[("gpu", "on-demand-1", f"gpu-{i}") for i in range(8)]
    )
    engine = engine_for([*base_objects({"on-demand": {"nominal": 8}, "spot": {"nominal": 8}}), busy])
    asked = ["spot-1", "on-demand-1", "ghost", "on-demand-0", "spot-0", "spot-1"]
    decision = filter_pod(engine, gpu_pod("p"), asked)
    verdicts = decision.verdicts
    assert list(verdicts) == list(dict.fromkeys(asked)) and len(verdicts) == 5
    assert verdicts.keys() >= set(asked) and "ghost" in verdicts and "nowhere" not in verdicts
    assert verdicts.get("nowhere") is None
    with pytest.raises(KeyError):
        verdicts["nowhere"]
    read = dict(verdicts.items())
    assert read == {name: verdicts[name] for name in verdicts}
    assert [name for name, verdict in read.items() if verdict.passed] == decision.passed == ["on-demand-0"]
    assert {name: verdict for name, verdict in read.items() if not verdict.passed} == decision.failures
    assert all(read[name] is decision.failures.built[name] for name in decision.failures.built)
    assert [sorted(names) for _template, names in decision.failures.groups] == [["spot-0", "spot-1"]]
    assert decision.failures.category_counts() == {"other-flavor": 2, "devices-in-use": 1, "unknown-node": 1}
    answer = filter_result(ExtenderArgs(parse_pod(gpu_pod("p")), asked, None), decision)
    answered = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    assert answered == {name: verdict.reason for name, verdict in read.items() if not verdict.passed}
    assert set(answer["FailedAndUnresolvableNodes"]) == {
        name for name, verdict in read.items() if not verdict.passed and verdict.unresolvable
    }
    assert {read[name].category for name in ("spot-0", "spot-1")} == {"other-flavor"}
    assert read["on-demand-1"].category == "devices-in-use" and read["ghost"].category == "unknown-node"
    # The answer for the very list decided (the filter verb's, known by identity) equals the one for a copy.
    unique = list(dict.fromkeys(asked))
    once = filter_pod(engine, gpu_pod("p"), unique)
    same = filter_result(ExtenderArgs(parse_pod(gpu_pod("p")), unique, None), once)
    assert once.verdicts.asked is unique
    assert same == filter_result(ExtenderArgs(parse_pod(gpu_pod("p")), list(unique), None), once)
    assert same["NodeNames"] == ["on-demand-0"] and {**same["FailedNodes"], **same["FailedAndUnresolvableNodes"]} == {
        name: verdict.reason for name, verdict in read.items() if not verdict.passed
    }
    passed = read["on-demand-0"]
    assert passed.node == "on-demand-0" and passed.allocation is not None
    assert passed.quota is decision.quota.per_node["on-demand-0"] and passed.quota.flavor == "on-demand"
    assert read["spot-0"].quota is decision.quota.per_node["spot-0"] and read["spot-0"].allocation is not None

    engine.store.apply("LocalQueue", "DELETED", local_queue("team-a", "team-a"))
    refused = filter_pod(engine, gpu_pod("p2"), asked)
    assert refused.passed == [] and set(refused.failures) == set(asked)
    assert refused.verdicts["spot-0"].category == "queue-config" and refused.reservation == {}
    # prioritize scores no node the pod may not take (a refused node scored above 0 would be chosen)
    assert score_nodes(refused, asked, engine.snapshot(), engine.caches, engine.options.weights).scores == {}


def test_a_shared_claim_stays_charged_while_any_consumer_runs():
    """A shared claim is charged once, to its first consumer still running. When that consumer finishes or is
    deleted, the resourceclaim controller drops it from reservedFor only afterwards, and the device stays with
    the others: the charge must pass on at once (were it to lapse until the claim's event, a filter in between
    would hand the same quota out again). Pods arriving in any order against reservedFor's order charge the
    claim once, and the index agrees with a recount."""
    gpu = ("team-a", "on-demand", RESOURCE)

    def shared(reserved: list[str]) -> dict:
        return b.claim(
            "shared",
            "team-a",
            [b.exact_request("gpu", 1)],
            allocated=[("gpu", "on-demand-0", "gpu-0")],
            allocated_node="on-demand-0",
            reserved_for=[(name, f"uid-team-a-{name}") for name in reserved],
        )

    def consumer(name: str, phase: str = "Running") -> dict:
        return b.pod(name, "team-a", claims={"gpu": "shared"}, queue="q", node_name="on-demand-0", phase=phase)

    def usage(engine) -> dict:
        view = engine.quota_view()
        assert dict(view.usage) == recount_usage(engine)  # the index, event by event, agrees with a recount
        return dict(view.usage)

    engine = engine_for([*base_objects({"on-demand": {"nominal": 2}}), shared(["p1", "p2", "p3"])])
    for name in ("p3", "p2", "p1"):  # the pods' events in the reverse order of reservedFor
        engine.store.apply("Pod", "ADDED", consumer(name))
        assert usage(engine) == {gpu: 1}
    assert filter_pod(engine, gpu_pod("one-more", template="one")).passed  # 1 shared + 1 = 2
    engine.reservations.release("uid-team-a-one-more")

    engine.store.apply("Pod", "MODIFIED", consumer("p1", phase="Succeeded"))  # reservedFor still names it first
    assert usage(engine) == {gpu: 1}
    assert not filter_pod(engine, gpu_pod("two-more", template="two")).passed  # 1 still held: 2 would make 3
    engine.store.apply("Pod", "DELETED", consumer("p2"))
    assert usage(engine) == {gpu: 1}
    engine.store.apply("ResourceClaim", "MODIFIED", shared(["p3"]))  # the controller catches up
    assert usage(engine) == {gpu: 1}
    engine.store.apply("Pod", "ADDED", consumer("p2"))  # a pod of the same name the claim no longer names
    assert usage(engine) == {gpu: 1}

    engine.store.apply("Pod", "DELETED", consumer("p3"))  # nobody running holds the claim any more ...
    assert usage(engine) == {gpu: 1}  # ... but it is allocated: it stays charged where it was booked
    assert not filter_pod(engine, gpu_pod("two-more", template="two")).passed
    engine.store.apply("ResourceClaim", "MODIFIED", b.claim("shared", "team-a", [b.exact_request("gpu", 1)]))
    assert usage(engine) == {}  # the controller deallocated it


def test_a_reconcile_looks_only_at_the_reservations_whose_pods_changed(monkeypatch):
    """Every filter reconciles, and a burst whose bindings lag behind holds hundreds of reservations: a
    reconcile asks about the new ones and those whose pod, or an allocated claim naming it, changed since the
    last; everything when a ResourceSlice changed (pools and their nodes); the expired ones once the earliest
    TTL has passed. What it lets go is what a look at every reservation would."""
    import extender.service.view_builder as service_module

    asked: list[str] = []
    real_state = service_module.reservation_state

    def counting(snapshot, reservation, **options):
        asked.append(reservation.pod_key.split("/")[1])
        return real_state(snapshot, reservation, **options)

    monkeypatch.setattr(service_module, "reservation_state", counting)
    clock = Clock()
    engine = engine_for(base_objects({"on-demand": {"nominal": 16}}), clock=clock)
    names = [f"p{i}" for i in range(6)]
    for name in names:
        engine.store.apply("Pod", "ADDED", gpu_pod(name, template="one"))
        assert filter_pod(engine, gpu_pod(name, template="one")).passed
    engine.quota_view()
    asked.clear()
    engine.quota_view()
    assert asked == []  # nothing changed: nobody asked about
    assert len(engine.reservations) == 6

    bound = gpu_pod("p3", template="one", node_name="on-demand-0", claim_statuses={"gpu": "p3-gpu"})
    allocated = b.claim(
        "p3-gpu",
        "team-a",
        [b.exact_request("gpu", 1)],
        allocated=[("gpu", "on-demand-0", "gpu-0")],
        reserved_for=[("p3", "uid-team-a-p3")],
        owner_uid="uid-team-a-p3",
    )
    engine.store.apply("ResourceClaim", "ADDED", allocated)
    engine.store.apply("Pod", "MODIFIED", bound)
    view = engine.quota_view()
    assert asked == ["p3"]
    assert sorted(r.pod_key for r in view.reservations) == [f"team-a/{n}" for n in names if n != "p3"]
    assert view.usage == {("team-a", "on-demand", RESOURCE): 1}

    asked.clear()
    engine.store.apply("Node", "MODIFIED", b.node("on-demand-1", {"example.com/capacity-type": "on-demand"}))
    engine.store.apply("ResourceClaim", "ADDED", b.claim("unrelated", "team-a", [b.exact_request("gpu", 1)]))
    engine.quota_view()
    assert asked == []
    engine.store.apply("ResourceSlice", "MODIFIED", b.gpu_slice("on-demand-1", 8))
    engine.quota_view()
    assert sorted(asked) == [n for n in names if n != "p3"]

    clock.now += engine.reservations.ttl_seconds + 1
    assert engine.quota_view().reservations == ()
    assert engine.released_reservations == {"bound": 1, "expired": 5}


def test_a_quota_view_keeps_the_reservations_it_was_taken_with():
    """The view holds the ledger's reservations by pod and the keys holding them as they were when it was
    taken (persistent maps, not per-filter copies of every reservation): reservations made or released later
    do not show in it, and a pod filtered again is charged against what the view says it held."""
    engine = engine_for(base_objects({"on-demand": {"nominal": 4}}))
    assert filter_pod(engine, gpu_pod("p1")).passed
    before = engine.quota_view()
    assert [r.pod_key for r in before.reservations] == ["team-a/p1"]

    assert filter_pod(engine, gpu_pod("p2")).passed
    engine.reservations.release("uid-team-a-p1")
    after = engine.quota_view()
    assert [r.pod_key for r in after.reservations] == ["team-a/p2"]
    assert [r.pod_key for r in before.reservations] == ["team-a/p1"]  # unchanged by what came later
    assert (
        before.reservations_by_pod.get("uid-team-a-p1") is not None
        and before.reservations_by_pod.get("uid-team-a-p2") is None
    )
    assert "team-a/p1" not in engine.reservations.pod_keys()
    assert "team-a/p2" in engine.reservations.pod_keys()

    key = ("team-a", "on-demand", RESOURCE)
    # p1's own 2 GPUs are taken out of the ledger the view was taken with: the whole nominal quota is left
    assert before.ledger_excluding("uid-team-a-p1", "team-a/p1").available("team-a", "on-demand", RESOURCE) == 4
    assert before.reserved == {key: 2} and after.reserved == {key: 2}


def test_the_view_keeper_lets_a_bound_pods_reservation_go_without_a_verb():
    """With keep_view_current (serve against a live cluster), the usage indexes and the reservations follow the
    watch events in their own thread: a binding's events release the pod's reservation before any filter asks,
    so the next filter inside kube-scheduler's cycle finds that work done."""
    import time

    engine = engine_for(base_objects({"on-demand": {"nominal": 2}}), keep_view_current=True)
    try:
        assert filter_pod(engine, gpu_pod("p1")).passed
        engine.store.apply("Pod", "ADDED", gpu_pod("p1"))
        engine.store.apply("ResourceClaim", "ADDED", allocated_claim("p1", 2))
        engine.store.apply("Pod", "MODIFIED", gpu_pod("p1", node_name="on-demand-0", claim_statuses={"gpu": "p1-gpu"}))
        deadline = time.monotonic() + 5
        while engine.reservations.get("uid-team-a-p1") is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.reservations.get("uid-team-a-p1") is None
        assert engine.released_reservations == {"bound": 1}
        assert engine.quota_view().usage == {("team-a", "on-demand", RESOURCE): 2}
    finally:
        engine.stop()


def test_the_view_keeper_waits_for_the_next_change_while_the_view_is_incomplete():
    """Before the initial lists are in (or past the watches' grace) the keeper has nothing to keep; it waits for
    the store's next change rather than asking again at once (it spun through thousands of checks per second
    while a 1000-node cluster was being listed, slowing that list), and catches up once synced."""
    import time

    engine = engine_for(base_objects({"on-demand": {"nominal": 2}}), keep_view_current=True)
    try:
        asked: list[str] = []
        sync_problem = engine.sync_problem

        def counted() -> str:
            problem = sync_problem()
            asked.append(problem)
            return problem

        engine.sync_problem = counted  # type: ignore[method-assign]
        engine.store.set_synced(False)
        engine.store.apply("Pod", "ADDED", gpu_pod("p1"))  # a watch event wakes the keeper
        deadline = time.monotonic() + 5
        while not asked and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # the old keeper asked again at once: over a hundred thousand times in this pause
        assert 1 <= len(asked) <= 2 and all(asked)
        engine.store.apply("ResourceClaim", "ADDED", allocated_claim("p1", 2))
        engine.store.apply("Pod", "MODIFIED", gpu_pod("p1", node_name="on-demand-0", claim_statuses={"gpu": "p1-gpu"}))
        engine.store.set_synced(True)
        deadline = time.monotonic() + 5
        while engine.views.reconciled_version != engine.store.version and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.views.reconciled_version == engine.store.version
        assert len(asked) <= 8 and asked[-1] == ""
    finally:
        engine.stop()
