"""The scheduling-loop benchmark's partitionable shape (bench/loop_bench.py --shape partitionable): a burst through
the service where every binding fills a node, so the full search's remembered answers must follow each one."""

from __future__ import annotations

from bench.loop_bench import new_burst, pod_object, run_burst
from extender.state.core import parse_pod


def test_a_partitionable_burst_never_offers_a_node_its_bindings_filled() -> None:
    nodes = 12
    burst = new_burst(nodes, "partitionable")
    assert burst.per_pod == 2 and all(len(free) == 2 for free in burst.free.values())
    # Each pod binds to a node the extender passed, taking both its devices: a node offered again would have
    # none left to take, and the burst would fail.
    costs, _ahead = run_burst(burst, nodes)
    assert len(costs) == nodes
    assert not any(burst.free.values())  # every node filled once, none twice
    last = burst.service.filter(parse_pod(pod_object(nodes, burst.template)), burst.names)
    assert not last.passed and not last.verdicts.allocations  # no room anywhere, and no answer says otherwise
