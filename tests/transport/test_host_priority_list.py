"""prioritize's answer joined from the request's names and a separator per score must be byte for byte what
orjson makes of the HostPriorityList (transport/wire.py host_priority_list), name only the nodes above the lowest
score asked about, each with its score less that lowest, and leave kube-scheduler's ranking of the nodes as the
plain scores would (wire.relative_scores)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.decisions.scoring import MAX_SCORE
from extender.transport.wire import ExtenderArgs, host_priority_list, prioritize_result


def ranking(scores: dict[str, int], *, fast_path: bool = False) -> Any:
    """What host_priority_list reads of a Ranking: the scores by node, each with its total, and whether the decision
    was the fast path (a pod with nothing of ours to decide)."""
    return SimpleNamespace(
        scores={name: SimpleNamespace(total=total) for name, total in scores.items()},
        decision=SimpleNamespace(fast_path=fast_path),
    )


def args(names: list[str]) -> ExtenderArgs:
    return ExtenderArgs(pod=None, node_names=names, node_objects=None)  # type: ignore[arg-type]


def expected(names: list[str], scores: dict[str, int]) -> bytes:
    return orjson.dumps(prioritize_result(args(names), ranking(scores)))


any_names = st.lists(st.text(max_size=12), max_size=30)
# Kubernetes node names (DNS subdomains): the answer is joined from them as they are
node_names = st.lists(st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,10}[a-z0-9])?", fullmatch=True), max_size=30)


def relative(names: list[str], scores: dict[str, int]) -> list[dict[str, Any]]:
    """The answer written out plainly: every node asked above the lowest score, less that lowest."""
    plain = [scores.get(name, 0) for name in names]
    lowest = min(plain, default=0)
    return [{"Host": name, "Score": score - lowest} for name, score in zip(names, plain, strict=True) if score > lowest]


def check(names: list[str], data: st.DataObject) -> None:
    scored = data.draw(st.lists(st.sampled_from(names), unique=True) if names else st.just([]))
    scores = {name: data.draw(st.integers(0, MAX_SCORE)) for name in scored}
    encoded = host_priority_list(names, ranking(scores))
    assert encoded == expected(names, scores)
    assert orjson.loads(encoded) == relative(names, scores)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(names=node_names, data=st.data())
def test_node_names_answer_equals_the_dict_answer(names: list[str], data: st.DataObject) -> None:
    """Node names, repeats among them, every node scored or only some (the others get 0)."""
    check(names, data)


@settings(max_examples=200, deadline=None)
@given(names=any_names, data=st.data())
def test_any_names_answer_equals_the_dict_answer(names: list[str], data: st.DataObject) -> None:
    """Any names (quotes, backslashes, control characters, non-ASCII, empty ones) are escaped as JSON needs."""
    check(names, data)


def kube_scheduler_totals(answer: list[dict[str, Any]], in_tree: dict[str, int], weight: int) -> dict[str, int]:
    """pkg/scheduler/schedule_one.go prioritizeNodes: each node's in-tree total, plus score x weight x
    (MaxNodeScore / MaxExtenderPriority) for each node the extender's answer names."""
    totals = dict(in_tree)
    for entry in answer:
        totals[entry["Host"]] += entry["Score"] * weight * (100 // MAX_SCORE)
    return totals


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    scores=st.dictionaries(st.from_regex(r"node-[0-9]{1,3}", fullmatch=True), st.integers(0, MAX_SCORE), min_size=1),
    data=st.data(),
)
def test_kube_scheduler_ranks_the_nodes_as_with_the_plain_scores(scores: dict[str, int], data: st.DataObject) -> None:
    """Every two nodes compare the same in kube-scheduler's totals (its in-tree plugins' scores plus ours, at
    any extender weight) whether the answer says the plain scores for every node or the relative ones: the
    node kube-scheduler picks, and its order of the rest, only differ among ties."""
    names = list(scores)
    in_tree = {name: data.draw(st.integers(0, 300)) for name in names}
    weight = data.draw(st.integers(1, 5))
    plain = [{"Host": name, "Score": scores[name]} for name in names]
    answer = orjson.loads(host_priority_list(names, ranking(scores)))
    assert len(answer) == sum(score > min(scores.values()) for score in scores.values())
    with_plain = kube_scheduler_totals(plain, in_tree, weight)
    with_relative = kube_scheduler_totals(answer, in_tree, weight)
    for first in names:
        for second in names:
            assert (with_plain[first] > with_plain[second]) == (with_relative[first] > with_relative[second])


def test_no_scores_or_equal_scores_name_no_node() -> None:
    """Every node asked at the same score: nothing to add to any, the answer is empty (kube-scheduler ranks by
    its own plugins alone)."""
    for names in (["node-1", "node-2.zone", "node-1"], ["node-1", 'we"ird\\name', "node-1", "nöde-é"]):
        assert host_priority_list(names, ranking({})) == expected(names, {}) == b"[]"
        assert host_priority_list(names, ranking(dict.fromkeys(names, 7))) == b"[]"


def test_binpacking_names_only_the_nodes_above_the_lowest() -> None:
    """A large cluster mostly empty: the empty nodes share the lowest score and are left out."""
    names = [f"node-{i}" for i in range(1000)]
    scores = dict.fromkeys(names, 6) | {"node-17": 9, "node-500": 7}
    assert host_priority_list(names, ranking(scores)) == b'[{"Host":"node-17","Score":3},{"Host":"node-500","Score":1}]'


def test_a_pod_with_nothing_to_decide_gets_an_empty_list() -> None:
    """kube-scheduler adds nothing, and no tie-breaker, for nodes an answer does not name: the pod ranks as
    without an extender, and kube-scheduler decodes no entry per node."""
    names = ["node-1", "node-2"]
    assert host_priority_list(names, ranking({}, fast_path=True)) == b"[]"
    assert prioritize_result(args(names), ranking({}, fast_path=True)) == []


def test_score_outside_the_range_falls_back_to_encoding_the_list() -> None:
    """scoring.combine clamps every total into 0..MAX_SCORE; should one ever escape, the answer still says it."""
    names = ["a", "b"]
    for scores in ({"a": MAX_SCORE + 1}, {"b": -1}, {"a": 2, "b": -MAX_SCORE - 1}):
        assert host_priority_list(names, ranking(scores)) == expected(names, scores)
        assert orjson.loads(host_priority_list(names, ranking(scores))) == relative(names, scores)
