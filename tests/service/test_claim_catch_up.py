"""filter meets a claim the pod names that the extender's watch has not delivered yet (kube-scheduler's informer
ahead of ours): it waits a moment for it instead of refusing every node for a claim that exists. Seen on the real
control plane by the placement benchmark (bench/placement_control_plane.py) about once in 500 pods."""

from __future__ import annotations

import threading
import time

from extender.service.service import CLAIM_CATCH_UP_SECONDS
from extender.state.core import parse_pod
from testkit import builders as b
from tests.support.quota import base_objects
from tests.support.scenarios import engine_for

NODES = ["on-demand-0", "on-demand-1"]


def _engine(follows_changes: bool):  # type: ignore[no-untyped-def]
    engine = engine_for(base_objects({"on-demand": {"nominal": 4}}))
    engine.source.follows_changes = follows_changes  # a live source's store changes under the verbs
    return engine


def _late_claim() -> dict:  # type: ignore[type-arg]
    return b.claim("late", "team-a", [b.exact_request("gpu", 2)])


def test_a_claim_arriving_while_filter_waits_is_used() -> None:
    engine = _engine(follows_changes=True)
    pod = parse_pod(b.pod("p", "team-a", claims={"gpu": "late"}))
    timer = threading.Timer(0.05, lambda: engine.store.apply("ResourceClaim", "ADDED", _late_claim()))
    timer.start()
    started = time.monotonic()
    decision = engine.filter(pod, NODES)
    timer.join()
    assert sorted(decision.passed) == NODES
    assert time.monotonic() - started < CLAIM_CATCH_UP_SECONDS


def test_a_claim_that_never_arrives_is_refused_after_the_wait() -> None:
    engine = _engine(follows_changes=True)
    pod = parse_pod(b.pod("p", "team-a", claims={"gpu": "missing"}))
    started = time.monotonic()
    decision = engine.filter(pod, NODES)
    waited = time.monotonic() - started
    assert decision.passed == []
    assert "ResourceClaim team-a/missing (pod claim gpu) does not exist" in decision.verdicts[NODES[0]].reason
    assert CLAIM_CATCH_UP_SECONDS <= waited < CLAIM_CATCH_UP_SECONDS + 1.0


def test_a_snapshot_is_not_waited_on() -> None:
    engine = _engine(follows_changes=False)
    pod = parse_pod(b.pod("p", "team-a", claims={"gpu": "missing"}))
    started = time.monotonic()
    assert engine.filter(pod, NODES).passed == []
    assert time.monotonic() - started < CLAIM_CATCH_UP_SECONDS
