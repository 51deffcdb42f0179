"""prioritize's answer joined from the request's names and a separator per score must be byte for byte what
orjson makes of the HostPriorityList (transport/wire.py host_priority_list)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
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


def check(names: list[str], data: st.DataObject) -> None:
    scored = data.draw(st.lists(st.sampled_from(names), unique=True) if names else st.just([]))
    scores = {name: data.draw(st.integers(0, MAX_SCORE)) for name in scored}
    encoded = host_priority_list(names, ranking(scores))
    assert encoded == expected(names, scores)
    assert orjson.loads(encoded) == [{"Host": name, "Score": scores.get(name, 0)} for name in names]


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


def test_no_scores_answers_zero_for_every_node_asked() -> None:
    for names in (["node-1", "node-2.zone", "node-1"], ["node-1", 'we"ird\\name', "node-1", "nöde-é"]):
        assert host_priority_list(names, ranking({})) == expected(names, {})
        assert orjson.loads(host_priority_list(names, ranking({}))) == [{"Host": n, "Score": 0} for n in names]


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
        assert orjson.loads(host_priority_list(names, ranking(scores)))[0]["Score"] == scores.get("a", 0)
