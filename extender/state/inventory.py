"""Device pools as the allocator must see them, built from ResourceSlices.

A pool is the unit of publication of a driver: only its highest generation counts, it is incomplete until every
slice of that generation has arrived, and duplicate device names make it invalid. Those rules are applied here
once per slice event, so the per-node question only walks ready-made device tuples.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from extender.state.core import Node
from extender.state.dra import Device, DeviceKey, ResourceSlice

PoolKey = tuple[str, str]  # (driver, pool)


@dataclass(frozen=True, slots=True)
class Pool:
    driver: str
    name: str
    generation: int
    slices: tuple[ResourceSlice, ...]  # of the current generation, ordered by name
    incomplete: bool
    invalid_reason: str
    shared_counters: Mapping[str, Mapping[str, Fraction]]  # counter set -> counter -> value
    node_local: str  # the node every slice of the pool names, or "" when the pool spans nodes

    @property
    def key(self) -> PoolKey:
        return (self.driver, self.name)

    @property
    def devices(self) -> Iterable[Device]:
        for resource_slice in self.slices:
            yield from resource_slice.devices


def build_pool(driver: str, name: str, slices: Iterable[ResourceSlice]) -> Pool | None:
    """Apply the generation, completeness and validity rules to every slice seen for one pool."""
    all_slices = list(slices)
    if not all_slices:
        return None
    generation = max(s.pool_generation for s in all_slices)
    current = sorted((s for s in all_slices if s.pool_generation == generation), key=lambda s: s.name)
    expected = max(s.pool_slice_count for s in current)
    incomplete = len(current) < expected
    invalid_reason = ""
    seen: set[str] = set()
    for resource_slice in current:
        for device in resource_slice.devices:
            if device.name in seen:
                invalid_reason = f"duplicate device name {device.name!r} in pool {driver}/{name}"
                break
            seen.add(device.name)
    counters: dict[str, dict[str, Fraction]] = {}
    for resource_slice in current:
        for counter_set in resource_slice.shared_counters:
            if counter_set.name in counters:
                invalid_reason = invalid_reason or f"duplicate counter set {counter_set.name!r} in pool {driver}/{name}"
            counters[counter_set.name] = dict(counter_set.counters)
    for resource_slice in current:
        for device in resource_slice.devices:
            for consumption in device.consumes_counters:
                known = counters.get(consumption.counter_set)
                unknown = known is None or any(counter not in known for counter in consumption.counters)
                # The counter set may sit in a slice we have not seen yet; only a complete pool is wrong.
                if unknown and not incomplete:
                    invalid_reason = invalid_reason or (
                        f"device {device.name!r} consumes unknown counters of set {consumption.counter_set!r}"
                    )
    node_names = {s.node_name for s in current}
    node_local = node_names.pop() if len(node_names) == 1 and all(s.node_name for s in current) else ""
    return Pool(driver, name, generation, tuple(current), incomplete, invalid_reason, counters, node_local)


def device_reaches_node(pool_slice: ResourceSlice, device: Device, node: Node) -> bool:
    """Whether a device of a slice can be used on a node (slice-level or per-device node selection)."""
    if pool_slice.node_name:
        return pool_slice.node_name == node.name
    if pool_slice.node_selector is not None:
        return pool_slice.node_selector.matches(node)
    if pool_slice.all_nodes:
        return True
    # perDeviceNodeSelection
    if device.node_name:
        return device.node_name == node.name
    if device.node_selector is not None:
        return device.node_selector.matches(node)
    return device.all_nodes


@dataclass(frozen=True, slots=True, eq=False)
class NodeDevices:
    """What one node can draw from: devices in pool/slice/device order, and the pools they come from.

    Hashed by identity: it is rebuilt whenever the node's pools or labels change, so caches keyed on it
    (which devices a class selects here) retire exactly when they should."""

    devices: tuple[Device, ...]
    pools: tuple[Pool, ...]


EMPTY_NODE_DEVICES = NodeDevices((), ())


def devices_for_node(node: Node, pools: Iterable[Pool]) -> NodeDevices:
    devices: list[Device] = []
    used_pools: list[Pool] = []
    for pool in pools:
        found = False
        for pool_slice in pool.slices:
            for device in pool_slice.devices:
                if device_reaches_node(pool_slice, device, node):
                    devices.append(device)
                    found = True
        if found or (pool.node_local == node.name):
            used_pools.append(pool)
    if not devices and not used_pools:
        return EMPTY_NODE_DEVICES
    return NodeDevices(tuple(devices), tuple(used_pools))


def consumed_counters(pool: Pool, allocated: Mapping[DeviceKey, int]) -> dict[str, dict[str, Fraction]]:
    """Counters of a partitionable pool already taken by allocated devices."""
    consumed: dict[str, dict[str, Fraction]] = {}
    for device in pool.devices:
        if device.consumes_counters and device.key in allocated:
            for consumption in device.consumes_counters:
                bucket = consumed.setdefault(consumption.counter_set, {})
                for counter, value in consumption.counters.items():
                    bucket[counter] = bucket.get(counter, Fraction(0)) + value
    return consumed
