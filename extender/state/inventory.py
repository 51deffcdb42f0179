"""Device pools as the allocator must see them, built from ResourceSlices.

A pool is the unit of publication of a driver: only its highest generation counts, it is incomplete until every
slice of that generation has arrived, and duplicate device names make it invalid. Those rules are applied here
once per slice event, so the per-node question only walks ready-made device tuples.

Upstream (structured.GatherPools) applies them per node, to the slices that reach the node: a node whose slices
of an older generation form a complete set still uses them when a newer generation exists only elsewhere, and
device names are only checked among the node's slices. `node_view` reproduces that; for the usual pool (every
slice of one generation on one node) the view is the pool itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from extender.state.core import Node
from extender.state.dra.devices import Device, DeviceKey, ResourceSlice

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
    node_local: str  # the node every slice of the pool names (any generation), or "" when the pool spans nodes
    all_slices: tuple[ResourceSlice, ...] = ()  # every generation, ordered by name: input of per-node views

    @property
    def key(self) -> PoolKey:
        return (self.driver, self.name)

    @property
    def devices(self) -> Iterable[Device]:
        for resource_slice in self.slices:
            yield from resource_slice.devices


def build_pool(driver: str, name: str, slices: Iterable[ResourceSlice]) -> Pool | None:
    """Apply the generation, completeness and validity rules to every slice seen for one pool."""
    all_slices = sorted(slices, key=lambda s: s.name)
    if not all_slices:
        return None
    generation = max(s.pool_generation for s in all_slices)
    current = [s for s in all_slices if s.pool_generation == generation]
    # Upstream compares with the count its first slice declares; more slices than that is not complete either.
    incomplete = len(current) != current[0].pool_slice_count
    invalid_reason, counters = _validate(driver, name, current, current, check_consumption=not incomplete)
    node_names = {s.node_name for s in all_slices}
    node_local = node_names.pop() if len(node_names) == 1 and all(s.node_name for s in all_slices) else ""
    return Pool(
        driver, name, generation, tuple(current), incomplete, invalid_reason, counters, node_local, tuple(all_slices)
    )


def _validate(
    driver: str,
    name: str,
    named: Iterable[ResourceSlice],
    everything: Iterable[ResourceSlice],
    *,
    check_consumption: bool,
) -> tuple[str, dict[str, dict[str, Fraction]]]:
    """Why a pool is invalid ("" if it is not) and its shared counters.

    Device names must be unique among `named` slices; counter sets and counter consumption are checked over
    `everything` (upstream: the node's slices plus, for counters, the pool's other slices of that generation).
    """
    invalid_reason = ""
    seen: set[str] = set()
    for resource_slice in named:
        for device in resource_slice.devices:
            if device.name in seen:
                invalid_reason = f"duplicate device name {device.name!r} in pool {driver}/{name}"
                break
            seen.add(device.name)
    everything = tuple(everything)
    counters: dict[str, dict[str, Fraction]] = {}
    for resource_slice in everything:
        for counter_set in resource_slice.shared_counters:
            if counter_set.name in counters:
                invalid_reason = invalid_reason or f"duplicate counter set {counter_set.name!r} in pool {driver}/{name}"
            counters[counter_set.name] = dict(counter_set.counters)
    if check_consumption:
        for resource_slice in everything:
            for device in resource_slice.devices:
                for consumption in device.consumes_counters:
                    known = counters.get(consumption.counter_set)
                    if known is None or any(counter not in known for counter in consumption.counters):
                        invalid_reason = invalid_reason or (
                            f"device {device.name!r} consumes unknown counters of set {consumption.counter_set!r}"
                        )
    return invalid_reason, counters


def slice_reaches_node(resource_slice: ResourceSlice, node: Node) -> bool:
    """Whether a slice is relevant for a node (upstream GatherPools: any of its devices may be)."""
    if resource_slice.node_name:
        return resource_slice.node_name == node.name
    if resource_slice.all_nodes:
        return True
    if resource_slice.node_selector is not None:
        return resource_slice.node_selector.matches(node)
    if resource_slice.per_device_node_selection:
        return any(device_reaches_node(resource_slice, device, node) for device in resource_slice.devices)
    return False


def node_view(pool: Pool, node: Node) -> Pool | None:
    """The pool as the upstream allocator sees it from one node, or None when the node does not see it.

    Among the slices reaching the node, the highest generation counts. If those slices are fewer than
    resourceSliceCount, all slices of the pool are consulted: a newer generation anywhere makes the pool
    invisible (being replaced), too few slices of that generation make it incomplete. An incomplete view has no
    slices (upstream never allocates from it). Otherwise the view's slices are the node's slices plus the pool's
    other slices of that generation, which only matter for shared counters.
    """
    relevant = [s for s in pool.all_slices if slice_reaches_node(s, node)]
    if not relevant:
        return None
    if len(relevant) == len(pool.all_slices) == len(pool.slices):
        return pool  # the common case: one generation, every slice reaches this node
    generation = max(s.pool_generation for s in relevant)
    mine = [s for s in relevant if s.pool_generation == generation]
    expected = mine[0].pool_slice_count
    everything = mine
    if len(mine) != expected:
        if any(s.pool_generation > generation for s in pool.all_slices):
            return None
        everything = [s for s in pool.all_slices if s.pool_generation == generation]
        if len(everything) != expected:
            return Pool(pool.driver, pool.name, generation, (), True, "", {}, pool.node_local)
    invalid_reason, counters = _validate(pool.driver, pool.name, mine, everything, check_consumption=True)
    return Pool(pool.driver, pool.name, generation, tuple(everything), False, invalid_reason, counters, pool.node_local)


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

    `devices` are every device reaching the node in the generation the node sees (for people: diagnostics show
    them, incomplete pool or not); `usable` are those of complete, valid pools, the only ones upstream allocates
    from, less devices with an `unusable_reason`; `pools` are the node's views of its pools (see `node_view`).

    Hashed by identity: it is rebuilt whenever the node's pools or labels change, so caches keyed on it
    (which devices a class selects here) retire exactly when they should."""

    devices: tuple[Device, ...]
    pools: tuple[Pool, ...]
    usable: tuple[Device, ...] = ()
    # Some device of a ready pool is unusable on its own (Device.unusable_reason): the allocator's shortcuts
    # then leave the reason to the full search, which names those devices.
    has_unusable: bool = False


EMPTY_NODE_DEVICES = NodeDevices((), ())


def devices_for_node(node: Node, pools: Iterable[Pool]) -> NodeDevices:
    """The node's devices in the order upstream's allocator tries them: pools by ID, except that pools with a
    device that sets bindingConditions come after all others (incubating pools_incubating.go GatherPools:
    a device that needs no binding step is preferred)."""
    devices: list[Device] = []
    usable: list[Device] = []
    used_pools: list[Pool] = []
    later: list[tuple[Pool, list[Device], list[Device]]] = []
    for pool in pools:
        view = node_view(pool, node)
        if view is None:
            continue
        # An incomplete view has no slices; show what has arrived of the generation the node sees.
        shown = view.slices or [s for s in pool.all_slices if s.pool_generation == view.generation]
        ready = not view.incomplete and not view.invalid_reason
        pool_devices = [
            device
            for pool_slice in shown
            for device in pool_slice.devices
            if device_reaches_node(pool_slice, device, node)
        ]
        # A device with a malformed requestPolicy is shown but never allocated (Device.unusable_reason).
        pool_usable = [device for device in pool_devices if not device.unusable_reason] if ready else []
        if ready and any(device.binding_conditions is not None for device in pool_devices):
            later.append((view, pool_devices, pool_usable))
            continue
        used_pools.append(view)
        devices.extend(pool_devices)
        usable.extend(pool_usable)
    for view, pool_devices, pool_usable in later:
        used_pools.append(view)
        devices.extend(pool_devices)
        usable.extend(pool_usable)
    if not devices and not used_pools:
        return EMPTY_NODE_DEVICES
    has_unusable = any(device.unusable_reason for device in devices)
    return NodeDevices(tuple(devices), tuple(used_pools), tuple(usable), has_unusable)


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
