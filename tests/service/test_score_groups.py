"""Scores a group at a time (decisions/ranking.py `_scores_by_group`, settled.ScoreGroups) against a look at
every node: the commonest pod's remembered answers carry their nodes grouped by score parts, and a decision
whose allocations are exactly those is scored per group and quota headroom with dict updates. Over a seeded
burst whose state changes between every two pods (bindings, releases), with pods inside and outside quota,
both packing strategies, kube-scheduler's rotating node order and filters over part of the nodes, every
prioritize must give the scores the per-node path gives for the same decision."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
import yaml

from extender.decisions.ranking import score_nodes
from extender.decisions.scoring import STRATEGY_ANNOTATION
from extender.service import ExtenderConfig, SchedulingService
from extender.state.core import parse_pod
from extender.state.sources import SnapshotSource
from testkit import builders as b
from testkit.clusters import cluster_objects
from testkit.scenarios import cluster_queue, flavor

NODES = 24


def burst_engine(one_flavor: bool = False) -> tuple[SchedulingService, list[str], dict[str, list[int]]]:
    objects = cluster_objects(NODES, with_quota=True, seed=3)
    if one_flavor:
        # every node in one flavor, as in most GPU clusters: the nodes quota lets through are one bucket, most
        # often every remembered node (scored a group at a time with no intersection)
        objects["ResourceFlavor"].append({**flavor("any"), "spec": {}})
        quota = {"any": {"nominal": 150}}
    else:
        # tight quota, so that headroom differs between the flavors' buckets and moves with every reservation
        quota = {"on-demand": {"nominal": 60}, "spot": {"nominal": 30}}
    objects["ClusterQueue"] = [cluster_queue("bench", quota, cohort=None)]
    free: dict[str, list[int]] = {}
    taken = {
        (result["pool"], result["device"])
        for claim in objects["ResourceClaim"]
        for result in claim["status"]["allocation"]["devices"]["results"]
    }
    for node in objects["Node"]:
        name = node["metadata"]["name"]
        free[name] = [index for index in range(8) if (name, f"gpu-{index}") not in taken]
    text = yaml.safe_dump_all([obj for kind in objects.values() for obj in kind])
    service = SchedulingService(SnapshotSource(text=text), ExtenderConfig())
    service.start()
    return service, sorted(free), free


def pod_object(index: int, rng: random.Random) -> dict[str, Any]:
    template = rng.choice(["one", "one", "two-big"])
    queue = rng.choice(["q", "q", None])
    pod = b.pod(f"burst-{index}", "bench", templates={"gpu": template}, queue=queue)
    if rng.random() < 0.3:
        pod["metadata"].setdefault("annotations", {})[STRATEGY_ANNOTATION] = "LeastAllocated"
    return pod


def queued_pod(name: str, template: str = "") -> Any:
    """A pod of LocalQueue q, parsed, with one claim from `template` (none without)."""
    return parse_pod(b.pod(name, "bench", templates={"gpu": template} if template else None, queue="q"))


def per_node_scores(service: SchedulingService, decision: Any, names: list[str]) -> dict[str, Any]:
    """The same decision scored node by node (no remembered answers to group by, no shortcut for a pod that takes
    no device)."""
    unsettled = dataclasses.replace(decision, settled=None, takes_no_devices=False)
    snapshot = service.snapshot()
    return dict(score_nodes(unsettled, names, snapshot, service.caches, service.options.weights).scores)


@pytest.mark.parametrize("one_flavor", [False, True], ids=["two-flavors", "one-flavor"])
def test_group_scores_equal_a_look_at_every_node_while_the_cluster_changes(one_flavor: bool) -> None:
    rng = random.Random(14)
    service, names, free = burst_engine(one_flavor)
    grouped_decisions = one_bucket = 0
    for index in range(70):
        raw = pod_object(index, rng)
        pod = parse_pod(raw)
        start = index % len(names)  # kube-scheduler starts each cycle at another node
        asked = names[start:] + names[:start]
        if rng.random() < 0.4:  # kube-scheduler's own plugins let only some nodes through
            asked = [name for name in asked if rng.random() < 0.8]
        decision = service.filter(pod, asked)
        passed = list(decision.passed)  # kube-scheduler sends our answer's list back, as a list of its own
        draw = rng.random()
        if draw < 0.2:
            passed = passed[: len(passed) // 2]  # a prioritize over part of them
        elif draw < 0.3:
            passed.reverse()  # the same nodes in another order: not taken for the filter's own list
        ranking = service.prioritize(pod, passed)
        grouped_decisions += decision.settled is not None
        one_bucket += decision.settled is not None and len(decision.quota.passed_groups) == 1
        assert dict(ranking.scores) == per_node_scores(service, decision, passed), index
        if not ranking.scores:
            continue
        best = max(ranking.scores, key=lambda node: (ranking.scores[node].total, node))
        count = 2 if "two-big" in str(raw) else 1
        if len(free[best]) < count:
            continue
        devices = [free[best].pop(0) for _ in range(count)]
        claim = b.claim(
            f"burst-{index}-gpu",
            "bench",
            [b.exact_request("gpu", count)],
            allocated=[("gpu", best, f"gpu-{device}") for device in devices],
            allocated_node=best,
            reserved_for=[(raw["metadata"]["name"], raw["metadata"]["uid"])],
        )
        service.store.apply("ResourceClaim", "ADDED", claim)
        service.store.apply("Pod", "MODIFIED", {**raw, "spec": {**raw["spec"], "nodeName": best}})
        if index % 9 == 8:  # a release elsewhere: that node's answers and scores must be dropped
            service.store.apply("ResourceClaim", "DELETED", claim)
            free[best].extend(devices)
    assert grouped_decisions > 40  # the grouped path was the one under test
    if one_flavor:
        assert one_bucket > 5, one_bucket  # and quota's one bucket of the passing nodes


def test_a_prioritize_scores_the_nodes_asked_never_every_node_remembered() -> None:
    """In the largest clusters kube-scheduler asks about a sample of the nodes (5 % at 65,000): a prioritize
    must cost that sample, so the score groups it publishes for the next pod hold the nodes it was asked about,
    not every node whose answer is remembered (scoring all of them made each call cost the whole cluster)."""
    service, names, _free = burst_engine(one_flavor=True)
    service.filter(queued_pod("first", "one"), names)  # every node's answer remembered
    pod = queued_pod("sampled", "one")
    decision = service.filter(pod, names)
    sample = decision.passed[:6]
    ranking = service.prioritize(pod, sample)
    settled = decision.settled
    assert settled is not None and len(settled.allocations) > 2 * len(sample) > 0
    assert set(settled.scores[decision.strategy].parts.keys()) == set(sample) == set(ranking.scores)
    assert dict(ranking.scores) == per_node_scores(service, decision, sample)


@pytest.mark.parametrize("one_flavor", [False, True], ids=["two-flavors", "one-flavor"])
def test_a_pod_that_takes_no_device_is_scored_by_headroom_alone(one_flavor: bool) -> None:
    """A pod of a LocalQueue with cpu and memory only (kube-scheduler's gang and topology benchmarks are made of
    them) has the same device parts on every node: its scores come from quota's headroom per bucket, and equal
    a look at every node, with quota held elsewhere in between."""
    service, names, _free = burst_engine(one_flavor)
    for index in range(6):
        service.filter(queued_pod(f"gpu-{index}", "one"), names)
        pod = queued_pod(f"cpu-only-{index}")
        decision = service.filter(pod, names)
        assert decision.takes_no_devices and decision.passed
        ranking = service.prioritize(pod, decision.passed)
        assert dict(ranking.scores) == per_node_scores(service, decision, decision.passed)
        assert list(ranking.scores) == decision.passed  # in the order asked
        placement = decision.passed[index % 3 :: 3]  # a placement's nodes: a few of each bucket
        assert list(service.prioritize(pod, placement).scores) == placement
        assert dict(service.prioritize(pod, placement).scores) == per_node_scores(service, decision, placement)
