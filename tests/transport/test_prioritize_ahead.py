"""prioritize's answer made once filter's answer is written (transport/verb_answers.py PrioritizeAhead, service
rank_ahead): the bytes kube-scheduler gets must be the ones prioritize would have made itself, for the very list
filter passed, and the work made ahead must never stand in for another decision or another list."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest

from extender.decisions.ranking import Ranking
from extender.service import SchedulingService
from extender.transport.app import create_app
from extender.transport.verb_answers import answer_filter, answer_prioritize
from extender.transport.verb_fast_path import SchedulingVerbs
from extender.transport.wire import host_priority_list
from testkit import builders as b
from testkit.scenarios import gpu_pod
from tests.support.quota import allocated_claim, base_objects
from tests.support.scenarios import engine_for

NODES = [*(f"on-demand-{i}" for i in range(4)), *(f"spot-{i}" for i in range(2))]


def _objects() -> list[dict[str, Any]]:
    """Two flavors; on-demand-1 and on-demand-2 run a pod of another namespace (no queue) on 2 and 1 of their 4
    GPUs, so that binpacking scores the nodes apart and prioritize's answers name nodes (wire.relative_scores)."""
    busy = [
        b.namespace("other"),
        *(
            obj
            for name, node, gpus in (("busy-1", "on-demand-1", 2), ("busy-2", "on-demand-2", 1))
            for obj in (
                allocated_claim(name, gpus, node, namespace="other"),
                b.pod(name, "other", claims={"gpu": f"{name}-gpu"}, node_name=node),
            )
        ),
    ]
    quota = {"on-demand": {"nominal": 6}, "spot": {"nominal": 4}}
    return [*base_objects(quota, od_nodes=4, spot_nodes=2, gpus=4), *busy]


def _verbs(engine: SchedulingService) -> SchedulingVerbs:
    verbs = create_app(engine).extensions["dra_scheduling_verbs"]
    assert isinstance(verbs, SchedulingVerbs)
    return verbs


def _ask(verbs: SchedulingVerbs, path: str, body: dict[str, Any]) -> bytes:
    """One request as the server's direct path makes it: respond, write (here: join), close."""
    status, _headers, answer = verbs.respond(path, orjson.dumps(body))
    assert status == 200
    try:
        return b"".join(answer)
    finally:
        answer.close()


def _reference(engine: SchedulingService, path: str, body: dict[str, Any]) -> bytes:
    """The same verb answered without anything made ahead."""
    metrics = _verbs(engine).metrics
    if path == "/filter":
        return orjson.dumps(answer_filter(engine, metrics, body), option=orjson.OPT_NON_STR_KEYS)
    return answer_prioritize(engine, metrics, body, encoded=True)


def _named_in_order(answer: bytes, asked: list[str]) -> list[str]:
    """The nodes a HostPriorityList names, checked to be nodes asked about, in the order asked."""
    named = [entry["Host"] for entry in orjson.loads(answer)]
    assert named == [name for name in asked if name in set(named)], (named, asked)
    return named


@pytest.fixture()
def count_scoring(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the service scores nodes (service.score_nodes), made ahead or not."""
    import extender.service.service as service_module

    calls = [0]
    real = service_module.score_nodes

    def counted(*args: Any, **kwargs: Any) -> Ranking:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(service_module, "score_nodes", counted)
    return calls


def test_a_burst_gets_the_answers_prioritize_would_make(count_scoring: list[int]) -> None:
    """Pods one after another, each filtered and then prioritized about what filter passed (kube-scheduler's
    order), quota filling up meanwhile (the spot flavor takes over, then everything is refused): every answer
    equals the one made without PrioritizeAhead, and prioritize itself scores nothing when asked about the very
    list filter passed."""
    ahead_engine, plain_engine = engine_for(_objects()), engine_for(_objects())
    verbs = _verbs(ahead_engine)
    passed_counts, named_counts = [], []
    for index in range(12):
        body = {"Pod": gpu_pod(f"p{index}", template="one"), "NodeNames": NODES}
        filtered = _ask(verbs, "/filter", body)
        assert filtered == _reference(plain_engine, "/filter", body)
        passed = orjson.loads(filtered)["NodeNames"]
        passed_counts.append(len(passed))
        if not passed:
            continue
        again = {"Pod": body["Pod"], "NodeNames": passed}
        before = count_scoring[0]
        answered = _ask(verbs, "/prioritize", again)
        assert count_scoring[0] == before, "prioritize scored again what was made ahead"
        assert answered == _reference(plain_engine, "/prioritize", again)
        named_counts.append(len(_named_in_order(answered, passed)))
    # The burst went through the three phases it is meant to cover, and answers named nodes (those above the
    # lowest score asked, wire.relative_scores) once binpacking made the nodes differ.
    assert passed_counts[0] == 4 and 2 in passed_counts and passed_counts[-1] == 0, passed_counts
    assert named_counts[0] == 2, named_counts


@pytest.mark.parametrize(
    "asked",
    [lambda passed: passed[::-1], lambda passed: passed[:1], lambda passed: [*passed, "spot-0"]],
    ids=["reversed", "fewer", "more"],
)
def test_another_list_is_scored_afresh(asked: Any, count_scoring: list[int]) -> None:
    """Asked about a list other than the one filter passed, prioritize scores it itself (the answer made ahead
    names other nodes, in another order)."""
    ahead_engine, plain_engine = engine_for(_objects()), engine_for(_objects())
    verbs = _verbs(ahead_engine)
    body = {"Pod": gpu_pod("p", template="one"), "NodeNames": NODES}
    passed = orjson.loads(_ask(verbs, "/filter", body))["NodeNames"]
    _reference(plain_engine, "/filter", body)
    again = {"Pod": body["Pod"], "NodeNames": asked(passed)}
    before = count_scoring[0]
    answered = _ask(verbs, "/prioritize", again)
    assert count_scoring[0] == before + 1
    assert answered == _reference(plain_engine, "/prioritize", again)
    _named_in_order(answered, asked(passed))


def test_a_later_filter_of_the_pod_is_not_answered_with_the_earlier_ranking() -> None:
    """Two filters of one pod before the first one's answer is closed (another scheduling cycle started): the
    ranking made for the first decision is not kept, and prioritize scores the second one."""
    engine = engine_for(_objects())
    verbs = _verbs(engine)
    pod = gpu_pod("p", template="one")
    _, _, first = verbs.respond("/filter", orjson.dumps({"Pod": pod, "NodeNames": NODES}))
    second = _ask(verbs, "/filter", {"Pod": pod, "NodeNames": NODES[:2]})
    latest = engine.history.recent_filter(pod["metadata"]["uid"])
    first.close()  # the first decision's ranking is made now, too late to be kept
    ranked = engine.history.recent_filter_ranked(pod["metadata"]["uid"])
    assert ranked is not None and ranked[0] is latest
    assert ranked[1] is not None and ranked[1].decision is latest
    passed = orjson.loads(second)["NodeNames"]
    assert passed == NODES[:2]
    assert _ask(verbs, "/prioritize", {"Pod": pod, "NodeNames": passed}) == host_priority_list(passed, ranked[1])


def test_a_failure_made_ahead_only_costs_prioritize_its_own_work(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, count_scoring: list[int]
) -> None:
    engine, plain_engine = engine_for(_objects()), engine_for(_objects())
    verbs = _verbs(engine)

    def broken(decision: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(engine, "rank_ahead", broken)
    body = {"Pod": gpu_pod("p", template="one"), "NodeNames": NODES}
    with caplog.at_level(logging.ERROR):
        passed = orjson.loads(_ask(verbs, "/filter", body))["NodeNames"]
    assert "making prioritize's answer ahead failed" in caplog.text
    _reference(plain_engine, "/filter", body)
    again = {"Pod": body["Pod"], "NodeNames": passed}
    before = count_scoring[0]
    assert _ask(verbs, "/prioritize", again) == _reference(plain_engine, "/prioritize", again)
    assert count_scoring[0] == before + 2  # ours and the reference's


def test_pods_without_our_work_make_nothing_ahead(count_scoring: list[int]) -> None:
    """A pod with nothing for us to decide answers prioritize `[]` without any scoring: nothing is made ahead;
    nor for a pod refused everywhere (nothing to score)."""
    engine = engine_for(_objects())
    verbs = _verbs(engine)
    plain = b.pod("plain", "team-a")
    assert orjson.loads(_ask(verbs, "/filter", {"Pod": plain, "NodeNames": NODES}))["NodeNames"] == NODES
    assert _ask(verbs, "/prioritize", {"Pod": plain, "NodeNames": NODES}) == b"[]"
    nowhere = gpu_pod("p", template="one")
    assert orjson.loads(_ask(verbs, "/filter", {"Pod": nowhere, "NodeNames": ["nowhere"]}))["NodeNames"] == []
    assert count_scoring[0] == 0
    ranked = engine.history.recent_filter_ranked(nowhere["metadata"]["uid"])
    assert ranked is not None and ranked[1] is None
