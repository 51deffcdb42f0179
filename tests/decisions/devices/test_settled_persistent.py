"""The remembered per-node answers (decisions/devices/settled.py) change by the nodes a call found or a binding
touched, never by a copy of every remembered node: in the largest clusters kube-scheduler asks about a 5 %
sample, and a call must cost what its sample does (docs/benchmarks.md, "The largest clusters")."""

from __future__ import annotations

from typing import Any, cast

import immutables

from extender.decisions.devices.results import Allocation
from extender.decisions.devices.settled import SettledNodes, Shortfall


def allocation(node: str) -> Allocation:
    return cast(Allocation, ("allocation", node))  # settled.py only tells Shortfalls from anything else


def test_answers_are_persistent_maps_that_move_between_allocations_and_shortfalls() -> None:
    nodes = [f"n{i}" for i in range(20000)]
    first = SettledNodes.empty(1, (0, 0)).with_answers({name: allocation(name) for name in nodes})
    assert isinstance(first.allocations, immutables.Map) and isinstance(first.shortfalls, immutables.Map)
    assert len(first.allocations) == 20000 and not first.shortfalls
    full = Shortfall("n7", 8, 0)
    found: dict[str, Any] = {"n7": full, "extra": allocation("extra")}
    second = first.with_answers(found)
    assert second.shortfalls == immutables.Map({"n7": full})
    assert "n7" not in second.allocations and second.allocations["extra"] == allocation("extra")
    assert len(second.allocations) == 20000
    # the first is untouched: snapshots' memos share it
    assert first.allocations["n7"] == allocation("n7") and "extra" not in first.allocations
    assert first.with_answers({}) is first


def test_dropping_changed_nodes_keeps_the_rest_shared() -> None:
    from extender.decisions.devices.settled import _without

    entries = immutables.Map({f"n{i}": i for i in range(1000)})
    assert _without(entries, {"absent"}) is entries
    smaller = _without(entries, {"n1", "n2", "absent"})
    assert len(smaller) == 998 and "n1" not in smaller and entries["n1"] == 1
