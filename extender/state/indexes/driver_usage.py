"""Per node and driver: how many devices there are and how many are in use, for the packing score.

Read by scoring (MostAllocated / LeastAllocated, like the in-tree NodeResourcesFit strategies) for every passing
node of every pod. Entries are keyed by the node's NodeDevices object (a slice or node-label event makes a new
one) and carry the allocation versions they were computed at, so a claim allocation on a node retires exactly
that node's entry.
"""

from __future__ import annotations

from typing import NamedTuple

from extender.memo import BoundedMemo
from extender.state.inventory import NodeDevices
from extender.state.snapshot import ClusterSnapshot

MAX_NODES = 200_000

DriverUsage = dict[str, tuple[int, int]]  # driver -> (devices on the node, devices in use)


class _Entry(NamedTuple):
    local_version: int
    shared_version: int
    usage: DriverUsage


class DriverUsageIndex:
    __slots__ = ("memo",)

    def __init__(self, max_nodes: int = MAX_NODES) -> None:
        self.memo: BoundedMemo[NodeDevices, _Entry] = BoundedMemo("driver_usage", max_nodes)

    def usage(self, snapshot: ClusterSnapshot, node_name: str) -> DriverUsage:
        devices = snapshot.node_devices(node_name)
        local_version = snapshot.alloc_versions.get(node_name, 0)
        shared_version = snapshot.shared_alloc_version
        entry = self.memo.get(devices)
        if entry is not None and entry.local_version == local_version and entry.shared_version == shared_version:
            return entry.usage
        allocated = snapshot.allocated
        counts: dict[str, list[int]] = {}
        for device in devices.devices:
            bucket = counts.setdefault(device.driver, [0, 0])
            bucket[0] += 1
            if device.key in allocated:
                bucket[1] += 1
        usage = {driver: (total, in_use) for driver, (total, in_use) in counts.items()}
        self.memo.put(devices, _Entry(local_version, shared_version, usage))
        return usage
