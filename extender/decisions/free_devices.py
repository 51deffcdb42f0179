"""Which devices of a node a class (plus request selectors) could still take: computed once per change.

Consecutive pods of one workload ask the same question about the same nodes. The answer for a node only
changes when its devices change (a new NodeDevices object) or when an allocation on it changes (its
allocation version in the snapshot), so it is cached under exactly those keys.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

from extender.decisions.selection import DeviceMatcher
from extender.state.dra import Device, DeviceClass
from extender.state.inventory import NodeDevices
from extender.state.store import ClusterSnapshot

MAX_CACHED_NODES = 500_000

Signature = tuple[str, tuple[str, ...], tuple[str, ...]]


class FreeSelectable(NamedTuple):
    free: tuple[Device, ...]  # selectable and not allocated, in upstream order
    selectable: int  # how many the selectors select at all (free or not)
    memo: dict  # results derived from `free` by callers (e.g. the devices a request would take), same lifetime


class _Entry(NamedTuple):
    local_version: int
    shared_version: int
    result: FreeSelectable | None


class FreeDeviceIndex:
    def __init__(self, matcher: DeviceMatcher) -> None:
        self.matcher = matcher
        self.driver_usage = DriverUsageIndex()
        self._cache: dict[Signature, dict[NodeDevices, _Entry]] = {}
        self._size = 0
        self._lock = threading.Lock()

    def free_selectable(
        self,
        snapshot: ClusterSnapshot,
        node_name: str,
        devices: NodeDevices,
        device_class: DeviceClass,
        selectors: tuple[str, ...],
    ) -> FreeSelectable | None:
        """None when the plain answer does not apply (selector errors, taints, counters, shared devices)."""
        signature = (device_class.name, device_class.selectors, selectors)
        local_version = snapshot.alloc_versions.get(node_name, 0)
        shared_version = snapshot.shared_alloc_version
        per_node = self._cache.get(signature)
        if per_node is not None:
            entry = per_node.get(devices)
            if entry is not None and entry.local_version == local_version and entry.shared_version == shared_version:
                return entry.result
        selectable = self.matcher.selectable_on(devices, device_class, selectors)
        result = None
        if selectable is not None and selectable.plain:
            allocated = snapshot.allocated
            free = tuple(device for device in selectable.devices if device.key not in allocated)
            result = FreeSelectable(free, len(selectable.devices), {})
        with self._lock:
            if self._size >= MAX_CACHED_NODES:
                self._cache.clear()
                self._size = 0
            self._cache.setdefault(signature, {})[devices] = _Entry(local_version, shared_version, result)
            self._size += 1
        return result


class FreeView:
    """free_selectable for one (class, selectors) and one snapshot, with the per-request constants resolved once:
    asked for every candidate node of a pod, so the common hit costs one lookup and two comparisons."""

    __slots__ = ("_alloc_versions", "_device_class", "_index", "_per_node", "_selectors", "_shared", "_snapshot")

    def __init__(
        self, index: FreeDeviceIndex, snapshot: ClusterSnapshot, device_class: DeviceClass, selectors: tuple[str, ...]
    ) -> None:
        self._index = index
        self._snapshot = snapshot
        self._device_class = device_class
        self._selectors = selectors
        self._per_node = index._cache.get((device_class.name, device_class.selectors, selectors), {})
        self._alloc_versions = snapshot.alloc_versions
        self._shared = snapshot.shared_alloc_version

    def get(self, node_name: str, devices: NodeDevices) -> FreeSelectable | None:
        entry = self._per_node.get(devices)
        if (
            entry is not None
            and entry.shared_version == self._shared
            and entry.local_version == self._alloc_versions.get(node_name, 0)
        ):
            return entry.result
        return self._index.free_selectable(self._snapshot, node_name, devices, self._device_class, self._selectors)


class _UsageEntry(NamedTuple):
    local_version: int
    shared_version: int
    usage: dict[str, tuple[int, int]]


class DriverUsageIndex:
    """Per node and driver: (devices, devices in use), for the packing score; same versioning as above."""

    def __init__(self) -> None:
        self._cache: dict[NodeDevices, _UsageEntry] = {}

    def usage(self, snapshot: ClusterSnapshot, node_name: str, devices: NodeDevices) -> dict[str, tuple[int, int]]:
        local_version = snapshot.alloc_versions.get(node_name, 0)
        shared_version = snapshot.shared_alloc_version
        entry = self._cache.get(devices)
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
        if len(self._cache) > MAX_CACHED_NODES:
            self._cache.clear()
        self._cache[devices] = _UsageEntry(local_version, shared_version, usage)
        return usage
