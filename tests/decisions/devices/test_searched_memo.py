"""The full search's answers kept per node for a one-claim pod shape (PodAllocator._searched_outcome): every pod of
the shape gets what a fresh search would give it, for as long as the node's devices and allocations stay as they
were, and a new search once they change."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.decisions.devices import pod_allocator
from extender.decisions.devices.results import Allocation, NotAllocatable
from extender.decisions.devices.selection import DeviceMatcher
from extender.state.store import ClusterStore
from testkit import builders as b
from tests.support.allocation import cluster, decide

NODES = ("n1", "n2")
PARTS = {"whole": ("c1", "c2", "c3", "c4"), "half-a": ("c1", "c2"), "half-b": ("c3", "c4"), "quarter": ("c4",)}


def partitioned_slice(node: str) -> dict[str, Any]:
    """A GPU split the way scheduler_perf's Partitionable case splits it: devices drawing on one counter set."""
    devices = []
    for index, (name, counters) in enumerate(PARTS.items()):
        device = b.gpu_device(index, name=name, node_name=node)
        device["consumesCounters"] = [
            {"counterSet": "set", "counters": {counter: {"value": "1"} for counter in counters}}
        ]
        devices.append(device)
    counters = [{"name": "set", "counters": {f"c{i}": {"value": "1"} for i in range(1, 5)}}]
    return b.gpu_slice(node, 0, devices=devices, shared_counters=counters)


def partitioned_cluster(*extra: dict[str, Any]) -> ClusterStore:
    objects = [b.device_class()]
    for node in NODES:
        objects += [b.node(node), partitioned_slice(node)]
    return cluster(*objects, *extra)


def taken(outcome: object) -> list[str]:
    assert isinstance(outcome, Allocation), outcome
    return [chosen.device.name for claim in outcome.claims for chosen in claim.devices]


def template_pod(name: str, count: int) -> list[dict[str, Any]]:
    template = b.claim_template(f"t{count}", "ns", [b.exact_request("gpu", count)])
    return [template, b.pod(name, "ns", templates={"gpu": f"t{count}"})]


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The nodes the full search runs on, in order."""
    ran: list[str] = []
    search = pod_allocator.allocate

    def counted(question: Any, *args: Any, **kwargs: Any) -> Any:
        ran.append(question.node.name)
        return search(question, *args, **kwargs)

    monkeypatch.setattr(pod_allocator, "allocate", counted)
    return ran


def test_a_shape_is_searched_once_per_node_until_the_nodes_allocations_change(searches: list[str]) -> None:
    store = partitioned_cluster(template_pod("x", 1)[0], template_pod("x", 2)[0])
    matcher = DeviceMatcher()
    first = decide(store, template_pod("p1", 2)[1], NODES, matcher)
    assert searches == list(NODES)
    second = decide(store, template_pod("p2", 2)[1], NODES, matcher)
    assert searches == list(NODES)  # remembered, not searched again
    assert taken(first["n1"]) == ["half-a", "half-b"]
    assert second["n1"] is first["n1"] and second["n2"] is first["n2"]
    # A claim takes half-a on n1: n1 is searched again, n2 keeps its answer.
    used = b.claim("used", "ns", [b.exact_request()], allocated=[("gpu", "n1", "half-a")], allocated_node="n1")
    store.apply("ResourceClaim", "ADDED", used)
    third = decide(store, template_pod("p3", 2)[1], NODES, matcher)
    assert isinstance(third["n1"], NotAllocatable)  # half-b and quarter share c4
    assert third["n2"] is first["n2"]
    assert searches == [*NODES, "n1"]
    single = decide(store, template_pod("p4", 1)[1], NODES, matcher)
    assert taken(single["n1"]) == ["half-b"]
    store.apply("ResourceClaim", "DELETED", used)
    assert taken(decide(store, template_pod("p5", 2)[1], NODES, matcher)["n1"]) == ["half-a", "half-b"]


def test_a_remembered_refusal_names_each_pods_own_claim(searches: list[str]) -> None:
    store = partitioned_cluster()
    matcher = DeviceMatcher()
    for name in ("mine", "theirs"):  # the same shape: claims of 5 devices, where a node has 4
        store.apply("ResourceClaim", "ADDED", b.claim(name, "ns", [b.exact_request("gpu", 5)]))
        outcome = decide(store, b.pod(f"p-{name}", "ns", claims={"gpu": name}), ("n1",), matcher)["n1"]
        assert isinstance(outcome, NotAllocatable)
        assert f"ns/{name}" in outcome.detail and "ns/mine" not in outcome.detail.replace(f"ns/{name}", ""), outcome
        assert pod_allocator.SHAPE_LABEL not in outcome.summary + outcome.detail + outcome.claim
    assert searches == ["n1"]  # the second pod's refusal is the first's, told of its own claim


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Steps: a pod shape asked about both nodes, or a claim taking (or giving back) devices of a node."""
    steps: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            steps.append(("ask", draw(st.integers(1, 3))))
        else:
            node = draw(st.sampled_from(NODES))
            parts = draw(st.lists(st.sampled_from(sorted(PARTS)), min_size=0, max_size=2, unique=True))
            steps.append(("hold", (node, tuple(parts))))
    return steps


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_remembered_answers_equal_a_fresh_search_through_any_history(steps: list[tuple[str, Any]]) -> None:
    store = partitioned_cluster()
    for count in (1, 2, 3):
        template = template_pod("x", count)[0]
        store.apply(template["kind"], "ADDED", template)
    kept = DeviceMatcher()
    for index, (step, value) in enumerate(steps):
        if step == "hold":
            node, parts = value
            name = f"held-{node}"
            if parts:
                allocated = [("gpu", node, part) for part in parts]
                held = b.claim(name, "ns", [b.exact_request("gpu", len(parts))], allocated=allocated)
                store.apply("ResourceClaim", "MODIFIED", held)
            else:
                store.apply("ResourceClaim", "DELETED", b.claim(name, "ns", [b.exact_request()]))
            continue
        pod = template_pod(f"p{index}", value)[1]
        remembered = decide(store, pod, NODES, kept)
        fresh = decide(store, pod, NODES, DeviceMatcher())
        for node in NODES:
            if isinstance(fresh[node], Allocation):
                assert taken(remembered[node]) == taken(fresh[node])
            else:
                assert isinstance(remembered[node], NotAllocatable)
                assert remembered[node].summary == fresh[node].summary  # type: ignore[union-attr]
