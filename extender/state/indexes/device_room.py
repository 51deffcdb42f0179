"""Per node: what each GPU-like unit of its devices has left, for the device-fit score.

A unit is what a pod's devices are carved from: a counter set of a partitionable device (its devices draw on
the set's sharedCounters, k8s.io/api resource/v1 CounterSet; upstream's allocator checks them in
allocator_experimental.go checkAvailableCounters), a device that allows multiple allocations (its consumable
capacity is shared, incubating/consumable_capacity.go), or the plain devices of one pool on the node (each
taken whole: the node is what a pod of several GPUs needs kept whole). Each unit knows its
size (the largest capacity of its devices: GPU memory for the usual driver, so a 40Gi and an 80Gi GPU compare
by memory), what it holds (counters or capacity per name) and the share of it in use (the binding dimension:
the fullest counter or capacity). Scoring (decisions/scoring.py) reads it for every passing node of every pod,
so the walk over the node's devices and allocations happens once per change of the node, not per pod: entries
are keyed by the node's NodeDevices object (a slice or node-label event makes a new one) and carry the
allocation versions they were computed at, so a claim allocation on a node retires exactly that node's entry
(the free lists of decisions/devices/free_devices.py follow the same two keys).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import NamedTuple

from extender.memo import BoundedMemo
from extender.state.capacity import SharedUse
from extender.state.dra.devices import Device, DeviceKey, consumed_by_name
from extender.state.inventory import NodeDevices, Pool, consumed_counters
from extender.state.snapshot import ClusterSnapshot

MAX_NODES = 200_000

UnitKey = tuple[str, str, str, str]  # ("set" | "device" | "plain", driver, pool, counter set or device name)
PLAIN_DEVICES = "devices"  # what a group of plain devices counts


class Unit(NamedTuple):
    driver: str
    # the largest capacity of the unit's devices (1.0 when they publish none); plain devices: their sum
    size: float
    totals: Mapping[str, Fraction]  # counter or capacity name -> value (plain devices: PLAIN_DEVICES -> count)
    held: Mapping[str, Fraction]  # what allocated devices or shares hold of each
    used: float  # 0..1: the fullest counter or capacity


class NodeRoom(NamedTuple):
    """A node's units, which units each usable device draws on, and per driver the size of every unit and the
    size in use (each unit's size times its used share)."""

    units: Mapping[UnitKey, Unit]
    device_units: Mapping[DeviceKey, tuple[UnitKey, ...]]
    by_driver: Mapping[str, tuple[float, float]]


class FitParts(NamedTuple):
    """The device-fit score of one node for one pod and what it is made of (all 0..1, explained in
    docs/placement.md), over the units the pod draws on: whether each was in use already or is filled by the
    pod (no fresh GPU broken for a partition), how full they are afterwards, how full the node's units of
    those drivers are afterwards, how little capacity they leave idle (1 - idle / 1Ti) and how small they are
    (1 - size / 1Ti). decisions/scoring.py device_fit weighs the last three."""

    value: float
    kept_whole: float
    unit_fill: float
    node_fill: float
    small_left: float
    small_unit: float


def _size(device: Device) -> float:
    return float(max(device.capacity.values())) if device.capacity else 1.0


def used_share(totals: Mapping[str, Fraction], held: Mapping[str, Fraction]) -> float:
    """The share of a unit in use: its fullest counter or capacity (the one that refuses the next device)."""
    fullest = 0.0
    for name, total in totals.items():
        amount = held.get(name)
        if amount and total > 0:
            share = float(amount) / float(total)  # floats: a Fraction division costs ten times more, per node
            if share > fullest:
                fullest = share
    return min(1.0, fullest)


class NodeLayout(NamedTuple):
    """What a node's units are, which depends on its devices only (rebuilt on a slice or node-label event):
    every unit's driver, size and totals, the units each usable device draws on, and what room_of walks to
    find what the units hold (the pools with counter sets, the shareable devices, each plain group's devices)."""

    sizes: Mapping[UnitKey, tuple[str, float, Mapping[str, Fraction]]]  # unit -> (driver, size, totals)
    device_units: Mapping[DeviceKey, tuple[UnitKey, ...]]
    counter_pools: tuple[Pool, ...]
    shareable: tuple[tuple[UnitKey, Device], ...]
    plain: tuple[tuple[UnitKey, tuple[DeviceKey, ...]], ...]


def layout_of(devices: NodeDevices) -> NodeLayout:
    pools = {pool.key: pool for pool in devices.pools}
    sizes: dict[UnitKey, tuple[str, float, Mapping[str, Fraction]]] = {}
    device_units: dict[DeviceKey, tuple[UnitKey, ...]] = {}
    counter_pools: dict[tuple[str, str], Pool] = {}
    shareable: list[tuple[UnitKey, Device]] = []
    plain: dict[UnitKey, list[DeviceKey]] = {}
    for device in devices.usable:
        pool_key = (device.driver, device.pool)
        if device.consumes_counters and pool_key in pools:
            pool = counter_pools[pool_key] = pools[pool_key]
            keys = tuple(("set", device.driver, device.pool, use.counter_set) for use in device.consumes_counters)
            for key in keys:
                known = sizes.get(key)
                size = max(known[1], _size(device)) if known else _size(device)
                sizes[key] = (device.driver, size, pool.shared_counters.get(key[3], {}))
            device_units[device.key] = keys
        elif device.allow_multiple_allocations and device.capacity:
            key = ("device", device.driver, device.pool, device.name)
            device_units[device.key] = (key,)
            sizes[key] = (device.driver, _size(device), device.capacity)
            shareable.append((key, device))
        else:
            key = ("plain", device.driver, device.pool, "")
            device_units[device.key] = (key,)
            known = sizes.get(key)
            members = plain.setdefault(key, [])
            members.append(device.key)
            size = (known[1] if known else 0.0) + _size(device)
            sizes[key] = (device.driver, size, {PLAIN_DEVICES: Fraction(len(members))})
    return NodeLayout(
        sizes,
        device_units,
        tuple(counter_pools.values()),
        tuple(shareable),
        tuple((key, tuple(members)) for key, members in plain.items()),
    )


def room_of(layout: NodeLayout, allocated: Mapping[DeviceKey, int], shared: Mapping[DeviceKey, SharedUse]) -> NodeRoom:
    """A node's room: its layout with what allocated devices hold of each unit (`shared`: the shares of devices
    that allow multiple allocations, ClusterSnapshot.shared_allocated)."""
    held_by_unit: dict[UnitKey, Mapping[str, Fraction]] = {}
    for pool in layout.counter_pools:
        for set_name, counters in consumed_counters(pool, allocated).items():
            held_by_unit[("set", pool.driver, pool.name, set_name)] = counters
    for key, device in layout.shareable:
        use = shared.get(device.key)
        if use is not None:
            held_by_unit[key] = consumed_by_name(tuple(use.consumed.items()), device.driver)
        elif device.key in allocated:  # taken whole, without sharing
            held_by_unit[key] = device.capacity
    for key, members in layout.plain:
        held_by_unit[key] = {PLAIN_DEVICES: Fraction(sum(1 for member in members if member in allocated))}
    units: dict[UnitKey, Unit] = {}
    by_driver: dict[str, tuple[float, float]] = {}
    for key, (driver, size, totals) in layout.sizes.items():
        held = held_by_unit.get(key, _NOTHING_HELD)
        unit = units[key] = Unit(driver, size, totals, held, used_share(totals, held) if held else 0.0)
        total, in_use = by_driver.get(driver, (0.0, 0.0))
        by_driver[driver] = (total + size, in_use + size * unit.used)
    return NodeRoom(units, layout.device_units, by_driver)


_NOTHING_HELD: Mapping[str, Fraction] = {}


class _Entry(NamedTuple):
    local_version: int
    shared_version: int
    room: NodeRoom


class DeviceRoomIndex:
    """NodeRoom per node, recomputed once after each change of the node's allocations, from its layout
    (recomputed once after each change of its devices)."""

    __slots__ = ("layouts", "memo")

    def __init__(self, max_nodes: int = MAX_NODES) -> None:
        self.memo: BoundedMemo[NodeDevices, _Entry] = BoundedMemo("device_room", max_nodes)
        self.layouts: BoundedMemo[NodeDevices, NodeLayout] = BoundedMemo("device_layout", max_nodes)

    def room(self, snapshot: ClusterSnapshot, node_name: str) -> NodeRoom:
        devices = snapshot.node_devices(node_name)
        local_version = snapshot.alloc_versions.get(node_name, 0)
        shared_version = snapshot.shared_alloc_version
        entry = self.memo.get(devices)
        if entry is not None and entry.local_version == local_version and entry.shared_version == shared_version:
            return entry.room
        layout = self.layouts.get(devices)
        if layout is None:
            layout = self.layouts.put(devices, layout_of(devices))
        room = room_of(layout, snapshot.allocated, snapshot.shared_allocated)
        self.memo.put(devices, _Entry(local_version, shared_version, room))
        return room
