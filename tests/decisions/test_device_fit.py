"""The device-fit score by what is left (decisions/scoring.py device_fit over state/indexes/device_room.py), on
hand-made nodes ranked by the service's explain: the allocator's first fit decides which devices a pod takes on
each node, the score says how usable the node's GPUs stay afterwards."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.decisions.ranking import Ranking
from extender.decisions.scoring import MAX_SCORE, STRATEGY_ANNOTATION
from extender.service import ExtenderConfig, SchedulingService
from extender.state.core import parse_pod
from extender.state.sources import SnapshotSource
from testkit import builders as b
from testkit import placement as p


def service_over(objects: list[dict[str, Any]]) -> SchedulingService:
    text = yaml.safe_dump_all([b.namespace("ns"), b.namespace("other"), b.device_class(), *objects])
    service = SchedulingService(SnapshotSource(text=text), ExtenderConfig())
    service.start()
    return service


def explain(service: SchedulingService, request: dict[str, Any], name: str = "p") -> Ranking:
    template = b.claim_template("t-" + name, "ns", [request])
    service.store.apply("ResourceClaimTemplate", "ADDED", template)
    return service.explain(parse_pod(b.pod(name, "ns", templates={"gpu": "t-" + name})))


def totals(ranking: Ranking) -> dict[str, int]:
    return {node: score.total for node, score in ranking.scores.items()}


def taken_devices(ranking: Ranking, node: str) -> list[str]:
    allocation = ranking.decision.verdicts[node].allocation
    assert allocation is not None
    return [chosen.device.name for claim in allocation.claims for chosen in claim.devices]


def test_a_partition_goes_beside_partitions_rather_than_onto_an_empty_gpu() -> None:
    """`beside`: a 3g on GPU 0 (one device of 26 in use): a 1g lands beside it. `fresh`: seven 1g fill GPU 0
    (seven devices in use, so counting devices calls it fuller): a 1g would break GPU 1."""
    service = service_over(
        [
            *p.partitioned_node("beside", [40, 40]),
            *p.partitioned_node("fresh", [40, 40]),
            p.holding_claim("held-3g", "beside", ["gpu0-3g-0"]),
            p.holding_claim("held-1g", "fresh", [f"gpu0-1g-{i}" for i in range(7)]),
        ]
    )
    ranking = explain(service, p.profile_request("1g"))
    assert taken_devices(ranking, "beside") == ["gpu0-1g-0"]
    assert taken_devices(ranking, "fresh") == ["gpu1-1g-0"]
    beside, fresh = ranking.scores["beside"], ranking.scores["fresh"]
    assert beside.fit_parts.kept_whole == 1.0 and fresh.fit_parts.kept_whole == 0.0
    assert beside.total > fresh.total, totals(ranking)


def test_a_whole_gpu_is_kept_whole_and_a_whole_shape_fills_one() -> None:
    """A 2g goes onto the GPU another partition broke, not onto a node's untouched GPU; a whole-GPU pod fills
    a GPU (nothing broken), so it ranks high on an empty node too."""
    service = service_over(
        [
            *p.partitioned_node("untouched", [40]),
            *p.partitioned_node("broken", [40, 40]),
            p.holding_claim("held", "broken", ["gpu0-1g-0"]),
        ]
    )
    ranking = explain(service, p.profile_request("2g"))
    assert taken_devices(ranking, "broken") == ["gpu0-2g-0"]
    assert ranking.scores["broken"].total > ranking.scores["untouched"].total, totals(ranking)
    whole = explain(service, p.profile_request("whole"), name="w")
    assert whole.scores["untouched"].fit_parts.kept_whole == 1.0
    assert whole.scores["untouched"].fit_parts.unit_fill == 1.0


def test_consumable_capacity_is_packed_onto_the_fullest_shared_gpu() -> None:
    service = service_over(
        [
            *p.shared_node("half", [40]),
            *p.shared_node("empty", [40]),
            *p.shared_node("nearly", [40]),
            p.holding_claim("held-a", "half", ["gpu-0"], share_memory_gi=20),
            p.holding_claim("held-b", "nearly", ["gpu-0"], share_memory_gi=30),
        ]
    )
    ranking = explain(service, p.share_request(10))
    scores = ranking.scores
    assert scores["nearly"].fit_parts.unit_fill == 1.0 and scores["half"].fit_parts.unit_fill == 0.75
    assert scores["nearly"].total > scores["half"].total > scores["empty"].total, totals(ranking)
    # a share larger than what is left is refused there, never ranked
    too_big = explain(service, p.share_request(15), name="big")
    assert "nearly" not in too_big.scores and not too_big.decision.verdicts["nearly"].passed


def test_the_bigger_gpu_is_kept_for_the_bigger_shape() -> None:
    """A 20Gi partition fits a 40Gi GPU's 3g and an 80Gi GPU's 2g: the 40Gi GPU takes it, the 80Gi one stays
    whole for a shape only it can hold."""
    service = service_over([*p.partitioned_node("small", [40]), *p.partitioned_node("big", [80])])
    ranking = explain(service, p.memory_at_least_request(20))
    assert taken_devices(ranking, "small") == ["gpu0-3g-0"] and taken_devices(ranking, "big") == ["gpu0-2g-0"]
    assert ranking.scores["small"].total > ranking.scores["big"].total, totals(ranking)


def test_plain_gpus_pack_nodes_so_a_big_node_stays_whole() -> None:
    """Plain devices: a node's GPUs are the unit a many-GPU pod needs whole. A 2-GPU pod fills a 2-GPU node
    rather than breaking an empty 8-GPU node; a 1-GPU pod goes where GPUs are already in use."""
    service = service_over(
        [
            *p.plain_node("two", 2),
            *p.plain_node("eight", 8),
            *p.plain_node("busy", 8),
            p.holding_claim("held", "busy", ["gpu-0", "gpu-1"]),
        ]
    )
    pair = explain(service, b.exact_request("gpu", 2))
    assert pair.scores["two"].total > pair.scores["eight"].total, totals(pair)
    one = explain(service, b.exact_request("gpu", 1), name="one")
    assert one.scores["busy"].total > one.scores["eight"].total, totals(one)


def test_the_parts_are_shown_in_diagnostics() -> None:
    from extender.reports.decisions import decision_json
    from extender.reports.text import render_table

    service = service_over([*p.partitioned_node("n1", [40])])
    report = decision_json(explain(service, p.profile_request("1g")))
    parts = report["nodes"][0]["score"]["deviceFitParts"]
    # one slice of seven taken (the fuller of slices and memory, 1/7 against 1/8) on the node's only GPU, which
    # leaves 6/7 of 40Gi idle: 0.995 * (1 - 34.29Gi / 1Ti) + 0.004 * 0.14 + 0.001 * (1 - 40Gi / 1Ti)
    assert parts == {
        "value": 0.963188,
        "keptWhole": 0.0,
        "unitFill": 0.14,
        "nodeFill": 0.14,
        "smallLeft": 0.9665,
        "smallUnit": 0.9609,
    }
    assert "| fit 0.963: smallLeft 0.9665, smallUnit 0.9609, nodeFill 0.14" in render_table(report)


def holdable(profiles: list[str], gpus: int) -> list[str]:
    """Device names for as many of `profiles` as the GPUs' counters and device counts take, each on the first
    GPU with room."""
    slices_of = {name: slices for name, slices, _, _ in p.PROFILES}
    count_of = {name: count for name, _, _, count in p.PROFILES}
    used = [[0, 0] for _ in range(gpus)]  # slices, eighths of memory
    taken: dict[tuple[int, str], int] = {}
    names = []
    for wanted in profiles:
        for gpu, (slices, eighths) in enumerate(used):
            index = taken.get((gpu, wanted), 0)
            fits = slices + slices_of[wanted] <= 7 and eighths + p.PROFILE_EIGHTHS[wanted] <= 8
            if fits and index < count_of[wanted]:
                names.append(f"gpu{gpu}-{wanted}-{index}")
                taken[(gpu, wanted)] = index + 1
                used[gpu] = [slices + slices_of[wanted], eighths + p.PROFILE_EIGHTHS[wanted]]
                break
    return names


_PROFILES = st.sampled_from(["1g", "2g", "3g", "whole"])


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    held=st.lists(st.lists(_PROFILES, max_size=6), min_size=1, max_size=4),
    profile=_PROFILES,
    strategy=st.sampled_from(["MostAllocated", "LeastAllocated"]),
)
def test_the_score_stays_in_range_and_only_nodes_that_fit_are_ranked(
    held: list[list[str]], profile: str, strategy: str
) -> None:
    """Nodes of one or two 40Gi partitionable GPUs with partitions held at random (each as many as fit, on the
    first GPU with room): every score is 0..10, its parts 0..1, and only nodes where the pod fits are scored."""
    objects: list[dict[str, Any]] = []
    for index, profiles in enumerate(held):
        node = f"n{index}"
        objects.extend(p.partitioned_node(node, [40] * (1 + index % 2)))
        names = holdable(profiles, gpus=1 + index % 2)
        if names:
            objects.append(p.holding_claim(f"held-{index}", node, names))
    service = service_over(objects)
    template = b.claim_template("t", "ns", [p.profile_request(profile)])
    service.store.apply("ResourceClaimTemplate", "ADDED", template)
    pod = b.pod("p", "ns", templates={"gpu": "t"}, annotations={STRATEGY_ANNOTATION: strategy})
    ranking = service.explain(parse_pod(pod))
    for node, score in ranking.scores.items():
        assert ranking.decision.verdicts[node].passed
        assert 0 <= score.total <= MAX_SCORE
        assert all(0.0 <= part <= 1.0 for part in score.fit_parts)
    passed = {node for node, verdict in ranking.decision.verdicts.items() if verdict.passed}
    assert set(ranking.scores) == passed
