"""The per-node shortcuts of a burst: the commonest pod's allocation on a node is one object shared by every
pod asking the same (devices/pod_allocator.py, PodAllocator._one_request and settle_remembered), and the answers
read only the failed verdicts (PodDecision.failures). What may be shared, what may not, and that whoever reads
a decision still sees the pod's own claims and the same answer as a look at every verdict."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from extender.decisions.devices.results import Allocation
from extender.reports.decisions import decision_json
from extender.state.core import parse_pod
from extender.transport.wire import ExtenderArgs, filter_result
from testkit import builders as b
from tests.support.scenarios import engine_for

NODES = ("node-a", "node-b", "node-c")


def cluster(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [b.namespace("team"), b.device_class()]
    for name in NODES:
        objects += [b.node(name), b.gpu_slice(name, 4)]
    objects += [
        b.claim_template("one", "team", [b.exact_request("gpu", 1)]),
        b.claim_template("also-one", "team", [b.exact_request("gpu", 1)]),
        b.claim_template("two", "team", [b.exact_request("gpu", 2)]),
    ]
    return objects + list(extra)


def own_claim_pod(index: int, count: int = 1) -> tuple[dict[str, Any], dict[str, Any]]:
    claim = b.claim(f"claim-{index}", "team", [b.exact_request("gpu", count)])
    return claim, b.pod(f"pod-{index}", "team", claims={"gpu": f"claim-{index}"})


def allocations(decision) -> dict[str, Allocation]:
    return {name: v.allocation for name, v in decision.verdicts.items() if v.allocation is not None}


def device_claims(service, pod_object: dict[str, Any]) -> set[str]:
    """The claim names /diagnostics shows for the pod's devices on every node (what people read)."""
    ranking = service.explain(parse_pod(pod_object), list(NODES))
    shown = decision_json(ranking)
    return {device["claim"] for node in shown["nodes"] for device in node.get("devices", ())}


def test_pods_with_their_own_claims_of_one_spec_share_each_nodes_allocation_and_keep_their_own_names():
    first_claim, first = own_claim_pod(1)
    second_claim, second = own_claim_pod(2)
    service = engine_for(cluster(first_claim, second_claim, first, second))
    one = service.filter(parse_pod(first), list(NODES))
    two = service.filter(parse_pod(second), list(NODES))
    assert one.passed == two.passed == list(NODES)
    for name in NODES:
        assert allocations(two)[name] is allocations(one)[name]  # shared: no new objects per node
        (claim,) = allocations(two)[name].claims
        assert [chosen.device.name for chosen in claim.devices] == ["gpu-0"]
    # The shared allocation names no pod's claim; the decision says whose it is.
    assert one.claim_labels == ("claim team/claim-1",) and two.claim_labels == ("claim team/claim-2",)
    assert device_claims(service, first) == {"claim team/claim-1"}
    assert device_claims(service, second) == {"claim team/claim-2"}


def test_a_node_whose_allocations_changed_gets_a_new_answer_and_the_others_keep_theirs():
    first_claim, first = own_claim_pod(1)
    second_claim, second = own_claim_pod(2)
    service = engine_for(cluster(first_claim, second_claim, first, second))
    before = allocations(service.filter(parse_pod(first), list(NODES)))
    taken = b.claim("elsewhere", "team", [b.exact_request("gpu", 1)], allocated=[("gpu", "node-b", "gpu-0")])
    service.store.apply("ResourceClaim", "ADDED", taken)
    after = allocations(service.filter(parse_pod(second), list(NODES)))
    assert after["node-a"] is before["node-a"] and after["node-c"] is before["node-c"]
    assert after["node-b"] is not before["node-b"]
    assert [chosen.device.name for chosen in after["node-b"].claims[0].devices] == ["gpu-1"]


def test_pods_asking_differently_never_share():
    """Another count, another pod claim name, another template's claim: each is its own answer."""
    two_claim, two = own_claim_pod(3, count=2)
    own_claim, own = own_claim_pod(4)
    accel_claim = b.claim("claim-5", "team", [b.exact_request("gpu", 1)])
    objects = cluster(
        two_claim,
        two,
        own_claim,
        own,
        accel_claim,
        b.pod("pod-5", "team", claims={"accel": "claim-5"}),
        b.pod("from-one", "team", templates={"gpu": "one"}),
        b.pod("from-also-one", "team", templates={"gpu": "also-one"}),
        b.pod("other-entry", "team", templates={"accel": "one"}),
    )
    service = engine_for(objects)
    by_pod = {
        obj["metadata"]["name"]: service.filter(parse_pod(obj), list(NODES)) for obj in objects if obj["kind"] == "Pod"
    }
    seen: dict[int, str] = {}
    for pod_name, decision in by_pod.items():
        allocation = allocations(decision)["node-a"]
        assert id(allocation) not in seen, f"{pod_name} shares {seen.get(id(allocation))}'s allocation"
        seen[id(allocation)] = pod_name
    assert [c.device.name for c in allocations(by_pod["pod-3"])["node-a"].claims[0].devices] == ["gpu-0", "gpu-1"]
    assert allocations(by_pod["other-entry"])["node-a"].claims[0].claim.pod_claim_name == "accel"
    assert allocations(by_pod["pod-5"])["node-a"].claims[0].claim.pod_claim_name == "accel"
    from_one = decision_json(service.explain(parse_pod(objects[-3]), ["node-a"]))
    assert from_one["nodes"][0]["devices"][0]["claim"] == "claim gpu (from template one)"
    also_one = decision_json(service.explain(parse_pod(objects[-2]), ["node-a"]))
    assert also_one["nodes"][0]["devices"][0]["claim"] == "claim gpu (from template also-one)"


def looked_at_every_verdict(asked: list[str], decision) -> tuple[list[str], dict[str, str], dict[str, str], Counter]:
    """The answers as a look at every verdict gives them: passed names, FailedNodes, FailedAndUnresolvableNodes
    and the filter metrics' counts."""
    passed, failed, unresolvable = [], {}, {}
    for name in asked:
        verdict = decision.verdicts.get(name)
        if verdict is None:
            continue
        if verdict.passed:
            passed.append(name)
        elif verdict.unresolvable:
            unresolvable[name] = verdict.reason
        else:
            failed[name] = verdict.reason
    counts = Counter("passed" if v.passed else v.category for v in decision.verdicts.values())
    return passed, failed, unresolvable, counts


def test_answers_built_from_the_failures_alone_equal_a_look_at_every_verdict():
    """filter_result, `passed` and the filter metrics read only the failed verdicts; on a mix of passing, busy,
    unknown and device-less nodes (and a pod without claims) they say exactly what a look at every verdict
    says."""
    taken = b.claim(
        "busy",
        "team",
        [b.exact_request("gpu", 4)],
        allocated=[("gpu", "node-b", f"gpu-{i}") for i in range(4)],
    )
    first_claim, first = own_claim_pod(1)
    objects = cluster(taken, first_claim, first, b.node("bare"), b.pod("plain", "team"))
    service = engine_for(objects)
    asked = ["node-a", "node-b", "ghost", "bare", "node-c", "node-a"]
    for pod_object in (first, objects[-1]):
        pod = parse_pod(pod_object)
        decision = service.filter(pod, asked)
        passed, failed, unresolvable, counts = looked_at_every_verdict(asked, decision)
        answer = filter_result(ExtenderArgs(pod, asked, None), decision)
        assert (answer["NodeNames"], answer["FailedNodes"], answer["FailedAndUnresolvableNodes"]) == (
            passed,
            failed,
            unresolvable,
        )
        assert decision.passed == [name for name in decision.verdicts if decision.verdicts[name].passed]
        assert decision.outcome_counts() == counts
    answer = filter_result(ExtenderArgs(parse_pod(first), asked, None), service.filter(parse_pod(first), asked))
    assert answer["NodeNames"] == ["node-a", "node-c", "node-a"]
    assert set(answer["FailedNodes"]) | set(answer["FailedAndUnresolvableNodes"]) == {"node-b", "ghost", "bare"}


def test_remembered_score_parts_follow_the_nodes_allocations():
    """score_nodes remembers a node's device-fit part by the devices-taken tuple of the node's free-list entry
    and by the allocation kept there (ranking.py): once a node's allocations change, its score must be what
    a fresh computation says, and under the packing strategy the fuller node must rank higher (a memo keyed by
    the node's name fails here)."""
    claims_and_pods = [own_claim_pod(index) for index in range(4)]
    objects = [obj for pair in claims_and_pods for obj in pair]
    service, fresh = engine_for(cluster(*objects)), engine_for(cluster(*objects))
    for index, (_claim, pod_object) in enumerate(claims_and_pods[:3]):
        pod = parse_pod(pod_object)
        service.filter(pod, list(NODES))
        ranking = service.prioritize(pod, list(NODES))
        expected = fresh.explain(pod, list(NODES))
        assert {name: score.total for name, score in ranking.scores.items()} == {
            name: score.total for name, score in expected.scores.items()
        }
        # this pod's claim lands on node-b, which the next pod must see fuller
        taken = b.claim(
            f"claim-{index}", "team", [b.exact_request("gpu", 1)], allocated=[("gpu", "node-b", f"gpu-{index}")]
        )
        for engine in (service, fresh):
            engine.store.apply("ResourceClaim", "MODIFIED", taken)
    last = service.prioritize(parse_pod(claims_and_pods[3][1]), list(NODES))
    assert last.scores["node-b"].total > last.scores["node-a"].total == last.scores["node-c"].total


def test_a_full_node_refuses_each_pod_by_its_own_claim():
    """A full node's answer is remembered per request shape as numbers (settled.Shortfall), not as a refusal:
    pods whose claims exist already share the shape, and each refusal must name the pod's own claim, the same
    text a fresh engine gives, until the node has room again."""
    full = b.claim(
        "busy", "team", [b.exact_request("gpu", 4)], allocated=[("gpu", "node-b", f"gpu-{i}") for i in range(4)]
    )
    pairs = [own_claim_pod(index) for index in range(3)]
    objects = cluster(full, *(obj for pair in pairs for obj in pair))
    service, fresh = engine_for(objects), engine_for(objects)
    for index, (_claim, pod_object) in enumerate(pairs):
        pod = parse_pod(pod_object)
        refused = service.filter(pod, list(NODES)).failures["node-b"]
        assert refused == fresh.filter(pod, list(NODES)).failures["node-b"]
        assert refused.category == "devices-in-use" and f"claim team/claim-{index} request gpu" in refused.reason
        assert "4 match on this node, 0 free" in refused.detail
    service.store.apply("ResourceClaim", "DELETED", full)
    assert "node-b" in service.filter(parse_pod(pairs[0][1]), list(NODES)).passed


@pytest.mark.slow
def test_remembered_answers_follow_every_kind_of_change_a_node_sees():
    """settle_remembered keeps the commonest pod's answers per shape across pods and drops the nodes that the
    snapshot's change list names (state/snapshot.py NODE_CHANGE_KINDS). Against a fresh engine built from the same
    objects after every step, over a scripted start (a node three quarters full whose slice then shrinks under
    the free device and grows again) and a seeded run of claim allocations and releases, slices shrinking and
    growing, node label changes, and nodes leaving and coming back: every filter (every third one asking about
    all nodes but one) must give the same passed nodes, the same devices and the same refusals."""
    rng = random.Random(14)
    names = [f"node-{index}" for index in range(6)]
    nodes = {name: b.node(name) for name in names}
    slices = {name: b.gpu_slice(name, 4) for name in names}
    generations = dict.fromkeys(names, 1)
    claims: dict[str, dict[str, Any]] = {}
    base = [b.namespace("team"), b.device_class()]
    service = engine_for([*base, *nodes.values(), *slices.values()])

    def act(step: int, action: str, name: str, size: int) -> None:
        if action == "allocate":
            claim = b.claim(
                f"held-{step}", "team", [b.exact_request("gpu", 1)], allocated=[("gpu", name, f"gpu-{size}")]
            )
            claims[f"held-{step}"] = claim
            service.store.apply("ResourceClaim", "ADDED", claim)
        elif action == "release" and claims:
            service.store.apply("ResourceClaim", "DELETED", claims.pop(sorted(claims)[size % len(claims)]))
        elif action == "slice":
            generations[name] += 1
            slices[name] = b.gpu_slice(name, size, generation=generations[name])
            service.store.apply("ResourceSlice", "MODIFIED", slices[name])
        elif action == "label":
            nodes[name] = b.node(name, {"step": str(step)})
            service.store.apply("Node", "MODIFIED", nodes[name])
        elif action == "node" and name in nodes:
            service.store.apply("Node", "DELETED", nodes.pop(name))
        elif action == "node":
            nodes[name] = b.node(name)
            service.store.apply("Node", "ADDED", nodes[name])

    scripted = [("allocate", "node-0", 0), ("allocate", "node-0", 1), ("allocate", "node-0", 2)]
    scripted += [("slice", "node-0", 3), ("slice", "node-0", 2), ("slice", "node-0", 6), ("label", "node-0", 0)]
    actions = ["allocate", "allocate", "release", "slice", "label", "node"]
    randomised = [(rng.choice(actions), rng.choice(names), rng.choice([2, 3, 4, 6])) for _ in range(45)]
    for step, (action, name, size) in enumerate(scripted + randomised):
        act(step, action, name, size % 4 if action == "allocate" else size)
        claim, pod_object = own_claim_pod(1000 + step, 1 + step % 2)
        service.store.apply("ResourceClaim", "ADDED", claim)
        service.store.apply("Pod", "ADDED", pod_object)
        fresh = engine_for([*base, *nodes.values(), *slices.values(), *claims.values(), claim, pod_object])
        pod = parse_pod(pod_object)
        # Every third pod asks about all nodes but one: most remembered nodes asked, one remembered left out.
        asked = names if step % 3 else [n for n in names if n != names[step % len(names)]]
        ours, theirs = service.filter(pod, asked), fresh.filter(pod, asked)
        where = (step, action, name, size)
        assert ours.passed == theirs.passed, where
        assert {n: [c.device.key for c in ours.verdicts[n].allocation.claims[0].devices] for n in ours.passed} == {
            n: [c.device.key for c in theirs.verdicts[n].allocation.claims[0].devices] for n in theirs.passed
        }, where
        assert {n: (v.category, v.reason) for n, v in ours.failures.items()} == {
            n: (v.category, v.reason) for n, v in theirs.failures.items()
        }, where
        service.store.apply("Pod", "DELETED", pod_object)
        service.store.apply("ResourceClaim", "DELETED", claim)
