"""The cluster shapes of testkit/placement.py (every shape of bench/placement_bench.py) keep the structural rules
kube-apiserver v1.37 enforces on ResourceSlices (k8s.io/kubernetes pkg/apis/resource/validation
validateResourceSliceSpec, validateResourcePool, validateValidRequestValues / validateRequestPolicyRange), so the
real-control-plane bench can publish them as they are; and the extender resolves a pool whose counter sets are
in a slice of their own.

The rules are checked on the objects, not by an API server: starting one is what the e2e tests are for."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from bench.placement_bench import SHAPES
from extender.state.quantity import parse_quantity
from extender.state.store import ClusterStore
from testkit import builders as b
from testkit import placement as p

NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def slices_of(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == "ResourceSlice"]


@pytest.fixture(params=sorted(SHAPES), ids=str)
def shape_slices(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return slices_of(SHAPES[request.param]().objects())


def test_no_slice_holds_both_devices_and_shared_counters(shape_slices: list[dict[str, Any]]) -> None:
    # A present key counts as set, even when empty (a non-nil list once decoded).
    for resource_slice in shape_slices:
        spec = resource_slice["spec"]
        assert not ("devices" in spec and "sharedCounters" in spec), resource_slice["metadata"]["name"]
        assert sum(bool(spec.get(field)) for field in NODE_SELECTION) == 1, resource_slice["metadata"]["name"]


def test_every_pool_counts_its_slices_and_knows_its_counter_sets(shape_slices: list[dict[str, Any]]) -> None:
    pools: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for resource_slice in shape_slices:
        spec = resource_slice["spec"]
        pools[(spec["driver"], spec["pool"]["name"])].append(spec)
    for key, specs in pools.items():
        assert {spec["pool"]["resourceSliceCount"] for spec in specs} == {len(specs)}, key
        assert len({spec["pool"]["generation"] for spec in specs}) == 1, key
        counter_sets = [counter_set["name"] for spec in specs for counter_set in spec.get("sharedCounters", [])]
        assert len(counter_sets) == len(set(counter_sets)), key
        for spec in specs:
            for device in spec.get("devices", []):
                for consumption in device.get("consumesCounters", []):
                    assert consumption["counterSet"] in counter_sets, (key, device["name"])


def valid_ranges(slices: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(device name, capacity) for every capacity of the slices whose requestPolicy has a validRange."""
    return [
        (device["name"], capacity)
        for resource_slice in slices
        for device in resource_slice["spec"].get("devices", [])
        for capacity in device.get("capacity", {}).values()
        if "validRange" in (capacity.get("requestPolicy") or {})
    ]


def test_every_valid_range_has_a_valid_default(shape_slices: list[dict[str, Any]]) -> None:
    for device, capacity in valid_ranges(shape_slices):
        policy = capacity["requestPolicy"]
        assert "default" in policy, device
        default, limits = parse_quantity(policy["default"]), policy["validRange"]
        minimum = parse_quantity(limits["min"])
        assert minimum <= default <= parse_quantity(capacity["value"]), device
        if "max" in limits:
            assert default <= parse_quantity(limits["max"]), device
        if "step" in limits:
            assert (default - minimum) % parse_quantity(limits["step"]) == 0, device


def test_the_shared_shape_has_ranges_to_check() -> None:
    assert len(valid_ranges(slices_of(SHAPES["shared"]().objects()))) == 16


def test_the_extender_takes_counter_sets_from_the_pools_other_slice() -> None:
    store = ClusterStore()
    for obj in p.partitioned_node("n1", [40, 80]):
        store.apply(obj["kind"], "ADDED", obj)
    store.set_synced(True)
    devices = store.snapshot().node_devices("n1")
    (pool,) = devices.pools
    assert (pool.incomplete, pool.invalid_reason) == (False, "")
    assert [s.name for s in pool.slices] == [f"n1-{b.DRIVER}-counters", f"n1-{b.DRIVER}-devices"]
    assert {name: dict(counters) for name, counters in pool.shared_counters.items()} == {
        "gpu-0": {"slices": 7, "memory": 40 * 2**30},
        "gpu-1": {"slices": 7, "memory": 80 * 2**30},
    }
    assert len(devices.usable) == 2 * sum(count for *_, count in p.PROFILES)
