"""A watch event costs the same in a large cluster as in a small one: the store and its snapshots share
persistent maps, and nothing per node or per pod is copied whole on a change.

Two guards: a structural one in the fast loop (after each kind of event, every map the new snapshot holds is
the previous snapshot's, a persistent map, or tiny), and a timed one (`slow`: one event's CPU time at 2,000 and
at 20,000 nodes, interleaved so a noisy neighbour hits both alike, within a bound a whole copy would exceed
several times over).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Mapping
from typing import Any

import immutables
import pytest

from extender.state.snapshot import ClusterSnapshot
from extender.state.store import ClusterStore
from testkit import builders as b

# A map a snapshot may hold afresh after an event without being persistent: the change's own entries.
SMALL = 8


def cluster(nodes: int, *, claims: int = 50) -> ClusterStore:
    store = ClusterStore()
    store.replace("Node", [b.node(f"n{i}") for i in range(nodes)])
    store.replace("ResourceSlice", [b.gpu_slice(f"n{i}", 2) for i in range(nodes)])
    store.replace("DeviceClass", [b.device_class()])
    store.replace("Namespace", [b.namespace("ns")])
    store.replace("ResourceClaim", [held(i, device=0) for i in range(claims)])
    store.replace("Pod", [b.pod(f"p{i}", "ns", claims={"gpu": f"c{i}"}, node_name=f"n{i}") for i in range(50)])
    store.set_synced(True)
    return store


def held(index: int, *, device: int) -> dict[str, Any]:
    node = f"n{index}"
    return b.claim(
        f"c{index}",
        "ns",
        [b.exact_request()],
        allocated=[("gpu", node, f"gpu-{device}")],
        allocated_node=node,
        reserved_for=[(f"p{index}", f"uid-ns-p{index}")],
    )


def maps_of(snapshot: ClusterSnapshot) -> Iterator[tuple[str, Mapping[Any, Any]]]:
    for kind, objects in snapshot.objects.items():
        yield f"objects[{kind}]", objects
    topology = snapshot.topology
    yield "topology.pools", topology.pools
    yield "topology.local_pools", topology.local_pools
    yield "topology.local_versions", topology.local_versions
    for name in (
        "allocated",
        "shared_allocated",
        "alloc_versions",
        "generated_claims",
        "admitted_workloads",
        "group_members",
        "queue_status",
    ):
        yield name, getattr(snapshot, name)


def copied_whole(before: ClusterSnapshot, after: ClusterSnapshot) -> list[str]:
    """The maps `after` holds that are new plain containers of more than SMALL entries: a copy made per event."""
    previous = dict(maps_of(before))
    return [
        f"{name} ({len(value)} entries)"
        for name, value in maps_of(after)
        if value is not previous[name] and not isinstance(value, immutables.Map) and len(value) > SMALL
    ]


EVENTS = {
    "claim allocation moved": lambda store, step: store.apply(
        "ResourceClaim", "MODIFIED", held(3, device=(step + 1) % 2)
    ),
    "pod bound": lambda store, step: store.apply("Pod", "ADDED", b.pod(f"new-{step}", "ns", node_name="n5")),
    "node labelled": lambda store, step: store.apply("Node", "MODIFIED", b.node("n7", {"step": str(step)})),
    "node added": lambda store, step: store.apply("Node", "ADDED", b.node(f"extra-{step}")),
    "slice republished": lambda store, step: store.apply(
        "ResourceSlice", "MODIFIED", b.gpu_slice("n9", 2, generation=step + 2)
    ),
    "node and its slice deleted": lambda store, step: (
        store.apply("ResourceSlice", "DELETED", b.gpu_slice(f"n{100 + step}", 2)),
        store.apply("Node", "DELETED", b.node(f"n{100 + step}")),
    ),
}


@pytest.mark.parametrize("event", list(EVENTS))
def test_an_event_copies_nothing_per_node_or_per_pod_into_the_next_snapshot(event: str) -> None:
    store = cluster(400)
    before = store.snapshot()
    for name in ("n1", "n2"):  # devices resolved through the snapshot's per-node caches
        before.node_devices(name)
    for step in range(3):
        EVENTS[event](store, step)
        after = store.snapshot()
        assert after.version > before.version, "the event made no new snapshot: the test tests nothing"
        assert copied_whole(before, after) == []
        before = after


def test_the_guard_sees_a_whole_copy() -> None:
    """Guards the guard: a snapshot holding a fresh dict of every node is reported."""
    store = cluster(100)
    before = store.snapshot()
    store.apply("ResourceClaim", "MODIFIED", held(3, device=1))
    after = store.snapshot()
    topology = after.topology
    copied = ClusterSnapshot.__new__(ClusterSnapshot)
    for field in ClusterSnapshot.__dataclass_fields__:
        object.__setattr__(copied, field, getattr(after, field))
    object.__setattr__(copied, "alloc_versions", {f"n{i}": 1 for i in range(100)})
    object.__setattr__(copied, "topology", topology)
    assert copied_whole(before, copied) == ["alloc_versions (100 entries)"]


@pytest.mark.slow
def test_an_events_cost_at_20000_nodes_is_within_twice_that_at_2000() -> None:
    """CPU time of apply + snapshot for a claim's allocation moving and for a node's labels changing, medians over
    300 events of each, the two clusters' events interleaved; every node holds an allocated claim, as in a busy
    cluster. A store whose snapshots copy their per-node dicts on a change measures 18.7x here for a node event;
    for a claim update its one copy (the allocation versions) is small beside the event's own cost, which is why
    the structural test above guards that too."""
    small, large = cluster(2000, claims=2000), cluster(20000, claims=20000)
    costs: dict[tuple[str, int], list[float]] = {}
    for step in range(300):
        for size, store in ((2000, small), (20000, large)):
            for event, raw, kind in (
                ("claim", held(step % 50, device=(step + 1) % 2), "ResourceClaim"),
                ("node", b.node(f"n{step % 50}", {"step": str(step)}), "Node"),
            ):
                started = time.thread_time()
                store.apply(kind, "MODIFIED", raw)
                store.snapshot()
                costs.setdefault((event, size), []).append(time.thread_time() - started)
    ratios = {
        event: statistics.median(costs[event, 20000]) / statistics.median(costs[event, 2000])
        for event in ("claim", "node")
    }
    grown = {event: round(ratio, 2) for event, ratio in ratios.items() if ratio >= 2.0}
    assert not grown, f"one event costs this many times more at 20,000 nodes than at 2,000: {ratios}"
