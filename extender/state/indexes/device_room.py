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
from extender.state.inventory import NodeDevices, consumed_counters
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
    (1 - size / 1Ti)."""

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
    shares = [float(held.get(name, 0) / total) for name, total in totals.items() if total > 0]
    return min(1.0, max(shares)) if shares else 0.0


def room_of(
    devices: NodeDevices, allocated: Mapping[DeviceKey, int], shared: Mapping[DeviceKey, SharedUse]
) -> NodeRoom:
    """Build a node's room from its devices and the cluster's allocated devices (`shared`: the shares of devices
    that allow multiple allocations, ClusterSnapshot.shared_allocated)."""
    pools = {pool.key: pool for pool in devices.pools}
    held_counters: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
    set_sizes: dict[UnitKey, float] = {}
    plain: dict[UnitKey, list[float]] = {}  # (size sum, devices, devices allocated)
    units: dict[UnitKey, Unit] = {}
    device_units: dict[DeviceKey, tuple[UnitKey, ...]] = {}
    for device in devices.usable:
        pool_key = (device.driver, device.pool)
        if device.consumes_counters and pool_key in pools:
            if pool_key not in held_counters:
                held_counters[pool_key] = consumed_counters(pools[pool_key], allocated)
            keys = tuple(("set", device.driver, device.pool, use.counter_set) for use in device.consumes_counters)
            for key in keys:
                set_sizes[key] = max(set_sizes.get(key, 0.0), _size(device))
            device_units[device.key] = keys
        elif device.allow_multiple_allocations and device.capacity:
            key = ("device", device.driver, device.pool, device.name)
            device_units[device.key] = (key,)
            use = shared.get(device.key)
            held = consumed_by_name(tuple(use.consumed.items()), device.driver) if use is not None else {}
            units[key] = Unit(device.driver, _size(device), device.capacity, held, used_share(device.capacity, held))
        else:
            key = ("plain", device.driver, device.pool, "")
            device_units[device.key] = (key,)
            group = plain.setdefault(key, [0.0, 0, 0])
            group[0] += _size(device)
            group[1] += 1
            group[2] += device.key in allocated
    for key, size in set_sizes.items():
        _, driver, pool_name, set_name = key
        totals = pools[(driver, pool_name)].shared_counters.get(set_name, {})
        held = held_counters[(driver, pool_name)].get(set_name, {})
        units[key] = Unit(driver, size, totals, held, used_share(totals, held))
    for key, (size, count, taken) in plain.items():
        totals, held = {PLAIN_DEVICES: Fraction(count)}, {PLAIN_DEVICES: Fraction(taken)}
        units[key] = Unit(key[1], size, totals, held, used_share(totals, held))
    by_driver: dict[str, tuple[float, float]] = {}
    for unit in units.values():
        total, in_use = by_driver.get(unit.driver, (0.0, 0.0))
        by_driver[unit.driver] = (total + unit.size, in_use + unit.size * unit.used)
    return NodeRoom(units, device_units, by_driver)


class _Entry(NamedTuple):
    local_version: int
    shared_version: int
    room: NodeRoom


class DeviceRoomIndex:
    """NodeRoom per node, recomputed once after each change of the node's devices or allocations."""

    __slots__ = ("memo",)

    def __init__(self, max_nodes: int = MAX_NODES) -> None:
        self.memo: BoundedMemo[NodeDevices, _Entry] = BoundedMemo("device_room", max_nodes)

    def room(self, snapshot: ClusterSnapshot, node_name: str) -> NodeRoom:
        devices = snapshot.node_devices(node_name)
        local_version = snapshot.alloc_versions.get(node_name, 0)
        shared_version = snapshot.shared_alloc_version
        entry = self.memo.get(devices)
        if entry is not None and entry.local_version == local_version and entry.shared_version == shared_version:
            return entry.room
        room = room_of(devices, snapshot.allocated, snapshot.shared_allocated)
        self.memo.put(devices, _Entry(local_version, shared_version, room))
        return room
