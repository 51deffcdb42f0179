"""Which devices of a node a class (plus request selectors) could still take: computed once per change.

Consecutive pods of one workload ask the same question about the same nodes. The answer for a node only
changes when its devices change (a new NodeDevices object) or when an allocation on it changes (its
allocation version in the snapshot), so it is remembered under exactly those keys, in the caller's `free` memo
(decisions/caches.py). The upstream allocator answers the same question per node on every call
(structured/internal/stable/allocator_stable.go, allocator.walkCandidateDevices); remembering it is what
keeps our per-node cost to one lookup on the common path.
"""

from __future__ import annotations

from collections.abc import Mapping

from extender.decisions.devices.free_entries import FreeEntry, FreeSelectable
from extender.decisions.devices.selection import DeviceMatcher
from extender.decisions.devices.selector_verdicts import class_signature
from extender.state.dra.device_class import DeviceClass
from extender.state.inventory import NodeDevices
from extender.state.snapshot import ClusterSnapshot


def free_selectable(
    matcher: DeviceMatcher,
    snapshot: ClusterSnapshot,
    node_name: str,
    devices: NodeDevices,
    device_class: DeviceClass,
    selectors: tuple[str, ...],
) -> FreeSelectable | None:
    """None when the plain answer does not apply (selector errors, taints, counters, shared devices)."""
    signature = class_signature(device_class, selectors)
    local_version = snapshot.alloc_versions.get(node_name, 0)
    shared_version = snapshot.shared_alloc_version
    memo = matcher.caches.free
    entry = memo.get(devices, signature)
    if entry is not None and entry.local_version == local_version and entry.shared_version == shared_version:
        return entry.result
    selectable = matcher.selectable_on(devices, device_class, selectors)
    result = None
    if selectable is not None and selectable.plain:
        allocated = snapshot.allocated
        free = tuple(device for device in selectable.devices if device.key not in allocated)
        result = FreeSelectable(
            free, len(selectable.devices), {}, all(device.default_request_fits for device in free), {}
        )
    memo.put(devices, FreeEntry(local_version, shared_version, result), signature)
    return result


class FreeView:
    """free_selectable for one (class, selectors) and one snapshot, with the per-request constants resolved once:
    asked for every candidate node of a pod, so the common hit costs one lookup and two comparisons."""

    __slots__ = (
        "_alloc_versions",
        "_device_class",
        "_matcher",
        "_per_node",
        "_selectors",
        "_shared",
        "_snapshot",
        "signature",
    )

    def __init__(
        self, matcher: DeviceMatcher, snapshot: ClusterSnapshot, device_class: DeviceClass, selectors: tuple[str, ...]
    ) -> None:
        self._matcher = matcher
        self._snapshot = snapshot
        self._device_class = device_class
        self._selectors = selectors
        self.signature = class_signature(device_class, selectors)
        self._per_node = matcher.caches.free.table(self.signature)
        self._alloc_versions = snapshot.alloc_versions
        self._shared = snapshot.shared_alloc_version

    @property
    def entries(self) -> Mapping[NodeDevices, FreeEntry]:
        """The memo's entries for this (class, selectors), for a caller that inlines `get`'s hit test."""
        return self._per_node

    def get(self, node_name: str, devices: NodeDevices) -> FreeSelectable | None:
        entry = self._per_node.get(devices)
        if (
            entry is not None
            and entry.shared_version == self._shared
            and entry.local_version == self._alloc_versions.get(node_name, 0)
        ):
            return entry.result
        return free_selectable(self._matcher, self._snapshot, node_name, devices, self._device_class, self._selectors)
