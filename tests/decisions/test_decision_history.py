"""The decision history's bounds, and evicted records let go of off the verb's thread (service/history.py)."""

from __future__ import annotations

import time
import weakref

from extender.decisions.pod_decision import NO_FAILURES, NodeVerdicts, PodDecision
from extender.decisions.ranking import Ranking
from extender.service.history import EVICTED_KEPT, DecisionHistory


def decision(name: str, nodes: int = 1) -> PodDecision:
    order = dict.fromkeys(f"node-{i}" for i in range(nodes))
    return PodDecision(f"ns/{name}", f"uid-{name}", 1, NodeVerdicts(order, {}, {}, NO_FAILURES))


def record(history: DecisionHistory, made: PodDecision) -> None:
    history.record("filter", Ranking(made, {}), time.perf_counter())


def test_bounded_by_pods_and_by_verdicts_oldest_first() -> None:
    history = DecisionHistory(max_pods=3, max_verdicts=10)
    for name in ("a", "b", "c", "d"):
        record(history, decision(name))
    assert [history.get(f"ns/{n}") is not None for n in "abcd"] == [False, True, True, True]
    record(history, decision("e", nodes=8))  # 8 verdicts: room is made by evicting the oldest until it fits
    assert [history.get(f"ns/{n}") is not None for n in "bcde"] == [False, True, True, True]
    assert len(history) == 3
    record(history, decision("f", nodes=8))  # 1 + 1 + 8 + 8 > 10: "c", "d" and "e" go
    assert [history.get(f"ns/{n}") is not None for n in "cdef"] == [False, False, False, True]
    record(history, decision("huge", nodes=11))  # larger than the whole history: not kept, nothing evicted
    assert history.get("ns/huge") is None and len(history) == 1


def test_a_pod_recorded_again_replaces_its_record() -> None:
    history = DecisionHistory(max_pods=2, max_verdicts=100)
    record(history, decision("a"))
    record(history, decision("b"))
    replacement = decision("a", nodes=3)
    history.record("prioritize", Ranking(replacement, {}), time.perf_counter())
    held = history.get("ns/a")
    assert held is not None and held.verb == "prioritize" and held.decision is replacement
    assert history.get("ns/b") is not None and len(history) == 2


def test_evicted_records_are_let_go_by_release_evicted() -> None:
    """A verb only moves what it evicts aside; the background thread's release_evicted frees it."""
    history = DecisionHistory(max_pods=1, max_verdicts=100)
    first = decision("a")
    alive = weakref.ref(first)
    record(history, first)
    del first
    record(history, decision("b"))  # evicts "a"
    assert history.get("ns/a") is None
    assert alive() is not None  # moved aside, not freed on the verb's thread
    history.release_evicted()
    assert alive() is None


def test_past_evicted_kept_the_verb_lets_go_itself() -> None:
    """Without a background thread to release them, evicted records cannot pile up."""
    history = DecisionHistory(max_pods=1, max_verdicts=100)
    watched = []
    for index in range(EVICTED_KEPT + 2):
        made = decision(f"p{index}")
        watched.append(weakref.ref(made))
        record(history, made)
        del made
    assert sum(ref() is not None for ref in watched) <= EVICTED_KEPT + 1  # the held record and at most EVICTED_KEPT
    assert watched[-1]() is not None  # the newest is the one held
