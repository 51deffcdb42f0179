"""The cluster model: every object the extender reads, its incremental indexes, and consistent snapshots.

Sources (a snapshot file, live watches) feed raw objects in; the decision layer reads immutable
`ClusterSnapshot`s out. Indexes are updated per event, and a snapshot is materialised at most once per change
burst (on the next read), so neither a busy watch stream nor a busy scheduler pays the other's cost.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

import immutables

from extender.state.capacity import SharedUse, add_share
from extender.state.core import POD_CLAIM_NAME_ANNOTATION, Node, Pod
from extender.state.dra.claims import ResourceClaim
from extender.state.dra.devices import DeviceKey, ResourceSlice
from extender.state.dra.taint_rules import DeviceTaintRule, apply_taint_rules
from extender.state.errors import ObjectError
from extender.state.inventory import (
    Pool,
    PoolKey,
    build_pool,
)
from extender.state.kinds import KINDS_BY_NAME, KindInfo, object_key
from extender.state.kueue.queue_status import KueueQueueStatus, parse_queue_status
from extender.state.kueue.workload import Workload
from extender.state.pacing import UNPACED, BackgroundPacing
from extender.state.snapshot import (
    NODE_ALLOCATIONS,
    NODE_DEVICES,
    Change,
    ChangeChunk,
    ClusterSnapshot,
    DeviceTopology,
    NodeDevicesCacheEntry,
)

log = logging.getLogger(__name__)

# How many snapshots' worth of changes stay linked; consumers that fall further behind recompute from scratch.
CHANGE_CHUNKS_KEPT = 64

# Kinds that change with every binding (and with Kueue's admissions). The store keeps them, and the claims'
# device maps, in persistent maps (immutables.Map, a hash array mapped trie): an event replaces O(log n) of
# the map, and a snapshot takes the map as it is, where copying a dict would cost O(pods) or O(devices) per
# snapshot after every binding. Lookups cost more than a dict's, so the maps read per candidate node (the
# Nodes, each node's allocation version) stay dicts: they change rarely, or are one small int per node.
PERSISTENT_KINDS = frozenset({"Pod", "ResourceClaim", "Workload"})


class ClusterStore:
    """Mutable owner of the cluster model. Thread-safe: sources write, request threads read snapshots."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)  # notified when a watch event or a list made a new version
        # What the watch threads and the view keeper step aside for; the server installs its own (state/pacing.py).
        self.pacing: BackgroundPacing = UNPACED
        self._objects: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS_BY_NAME if kind not in PERSISTENT_KINDS}
        self._persistent: dict[str, immutables.Map[str, Any]] = {kind: immutables.Map() for kind in PERSISTENT_KINDS}
        # pod key -> (the pod as stored, a newer resourceVersion it stands for): see pod_at_version.
        self._pod_versions: dict[str, tuple[Pod, str]] = {}
        self._dirty_kinds: set[str] = set(KINDS_BY_NAME)
        self._version = 0
        self._snapshot: ClusterSnapshot | None = None
        self._pending_changes: list[Change] = []
        self._chunks: list[ChangeChunk] = []
        # indexes
        self._pool_slices: dict[PoolKey, dict[str, ResourceSlice]] = defaultdict(dict)
        self._pools: dict[PoolKey, Pool] = {}
        self._taint_rules: tuple[DeviceTaintRule, ...] = ()
        self._local_pools: dict[str, set[PoolKey]] = defaultdict(set)
        self._shared_pools: set[PoolKey] = set()
        self._shared_version = 0
        self._local_versions: dict[str, int] = defaultdict(int)
        self._allocated: immutables.Map[DeviceKey, int] = immutables.Map()
        # Bumped when an allocation on a node-local pool (or any shared pool) changes, so per-node caches of
        # free devices stay valid until their own node's devices change hands.
        self._alloc_versions: dict[str, int] = defaultdict(int)
        self._shared_alloc_version = 0
        self._claim_devices: dict[str, tuple[DeviceKey, ...]] = {}
        # Shares of devices that allow multiple allocations (results with a shareID), per device and per claim.
        self._shared: immutables.Map[DeviceKey, SharedUse] = immutables.Map()
        self._claim_shares: dict[str, tuple[tuple[DeviceKey, tuple[tuple[str, Fraction], ...]], ...]] = {}
        self._generated_claims: immutables.Map[tuple[str, str, str], str] = immutables.Map()
        # claim key -> its entries in _generated_claims, so a claim event touches only its own (not a scan of all)
        self._generated_by_claim: dict[str, tuple[tuple[str, str, str], ...]] = {}
        # Whether alloc_versions changed since the last snapshot: a claim event that changes no allocation
        # (reservedFor, conditions, a new unallocated claim) shares the last snapshot's copy.
        self._allocations_dirty = True
        self._device_releases = 0  # see ClusterSnapshot.device_releases
        self._admitted_by_owner: immutables.Map[str, str] = immutables.Map()
        # PodGroup key (namespace/name) -> keys of the pods naming it in spec.schedulingGroup, whether or not the
        # PodGroup object exists (kube-scheduler waits for it; the members are known before)
        self._group_members: immutables.Map[str, frozenset[str]] = immutables.Map()
        self._queue_status: dict[str, KueueQueueStatus] = {}
        self._queue_status_dirty = True
        self._node_devices_cache: dict[str, NodeDevicesCacheEntry] = {}
        self._pools_dirty = True
        self._kueue_enabled = True
        self._synced = False

    # --- writes -------------------------------------------------------------------------------------------------

    def apply(self, kind: str, event_type: str, raw: Mapping[str, Any]) -> None:
        """One watch event: ADDED / MODIFIED upsert, DELETED removes. A malformed object raises ObjectError."""
        info = KINDS_BY_NAME[kind]
        key = object_key(info, raw)
        with self._lock:
            before = len(self._pending_changes)
            if event_type == "DELETED":
                self._remove(info, key)
                if kind == "ClusterQueue":
                    self._set_queue_status(key, None)
            else:
                self._upsert(info, key, info.parse(raw))
                if kind == "ClusterQueue":
                    self._set_queue_status(key, raw)
            if len(self._pending_changes) != before:  # a no-op (a Node heartbeat) makes no new snapshot
                self._version += 1
                self._changed.notify_all()

    def replace(self, kind: str, raws: Iterable[Mapping[str, Any]]) -> list[ObjectError]:
        """A fresh list of one kind replaces what was known (initial list, relist after 410 Gone).

        Malformed objects are skipped and returned, so one bad object cannot stop the extender from serving.
        """
        info = KINDS_BY_NAME[kind]
        parsed: dict[str, Any] = {}
        errors: list[ObjectError] = []
        items: Iterable[Mapping[str, Any]] = list(raws) if kind == "ClusterQueue" else raws
        for raw in items:
            key = object_key(info, raw)
            try:
                parsed[key] = info.parse(raw)
            except ObjectError as error:
                errors.append(error.located(f"{kind} {key}"))
        with self._lock:
            for key in list(self._objects_of(kind)):
                if key not in parsed:
                    self._remove(info, key)
            for key, obj in parsed.items():
                if self._objects_of(kind).get(key) is not obj:
                    self._upsert(info, key, obj)
            if kind == "ClusterQueue":
                raw_by_key = {object_key(info, raw): raw for raw in items}
                for key in set(self._queue_status) - set(parsed):
                    self._set_queue_status(key, None)
                for key in parsed:
                    self._set_queue_status(key, raw_by_key.get(key))
            self._version += 1
            self._changed.notify_all()
        return errors

    def set_kueue_enabled(self, enabled: bool) -> None:
        with self._lock:
            self._kueue_enabled = enabled
            self._version += 1
            self._dirty_kinds.add("ClusterQueue")

    def set_synced(self, synced: bool) -> None:
        with self._lock:
            if self._synced != synced:
                self._synced = synced
                self._version += 1

    def _record(self, kind: str, key: str) -> None:
        self._dirty_kinds.add(kind)
        self._pending_changes.append(Change(self._version + 1, kind, key))

    def _objects_of(self, kind: str) -> Mapping[str, Any]:
        persistent = self._persistent.get(kind)
        return persistent if persistent is not None else self._objects[kind]

    def _upsert(self, info: KindInfo, key: str, obj: Any) -> None:
        kind = info.kind
        old = self._objects_of(kind).get(key)
        if kind == "Node" and old is not None and _node_view(old) == _node_view(obj):
            return  # status heartbeats change nothing we read; keep caches keyed on the old object
        if old is not None and old == obj:
            # Nothing we parse changed (value-compared models, resourceVersion left out of the comparison;
            # identity-compared ones never match): e.g. Kueue rewriting a ClusterQueue's status on every
            # admission, which would otherwise rebuild the quota context and recompute usage over every pod; a
            # kubelet's pod status writes up to Running (conditions, container statuses, the phase), a pod's
            # scheduling gates lifted, a claim's finalizer added or removed. No new snapshot: the view keeper and
            # the next verb have nothing to catch up on.
            if kind == "Pod":
                self._pod_versions[key] = (old, obj.resource_version)
            return
        if kind == "Pod":
            self._pod_versions.pop(key, None)
            self._index_group_member(key, old.group_key if old is not None else "", obj.group_key)
        if kind in PERSISTENT_KINDS:
            self._persistent[kind] = self._persistent[kind].set(key, obj)
        else:
            self._objects[kind][key] = obj
        self._record(kind, key)
        if kind == "ResourceSlice":
            if old is not None:
                self._unindex_slice(old)
            self._index_slice(obj)
        elif kind == "ResourceClaim":
            self._index_claim(key, obj)
        elif kind == "Workload":
            self._index_workload(key, old, obj)
        elif kind == "Node" and (old is None or old.labels != obj.labels):
            self._local_versions[key] += 1
            self._pools_dirty = True
        elif kind == "DeviceTaintRule":
            self._retaint_pools()

    def _remove(self, info: KindInfo, key: str) -> None:
        kind = info.kind
        old = self._objects_of(kind).get(key)
        if old is None:
            return
        if kind == "Pod":
            self._pod_versions.pop(key, None)
            self._index_group_member(key, old.group_key, "")
        if kind in PERSISTENT_KINDS:
            self._persistent[kind] = self._persistent[kind].delete(key)
        else:
            del self._objects[kind][key]
        self._record(kind, key)
        if kind == "ResourceSlice":
            self._unindex_slice(old)
        elif kind == "ResourceClaim":
            self._index_claim(key, None)
        elif kind == "Workload":
            self._index_workload(key, old, None)
        elif kind == "Node":
            self._local_versions[key] += 1
            self._pools_dirty = True
        elif kind == "DeviceTaintRule":
            self._retaint_pools()

    def _index_group_member(self, pod_key: str, old_group: str, new_group: str) -> None:
        if old_group == new_group:
            return
        if old_group:
            members = self._group_members.get(old_group, frozenset()) - {pod_key}
            self._group_members = (
                self._group_members.set(old_group, members) if members else self._group_members.delete(old_group)
            )
        if new_group:
            self._group_members = self._group_members.set(
                new_group, self._group_members.get(new_group, frozenset()) | {pod_key}
            )

    def _retaint_pools(self) -> None:
        """DeviceTaintRules changed: every pool's devices are rebuilt with the rules' taints (rules are rare)."""
        rules = tuple(self._objects["DeviceTaintRule"].values())
        for rule in rules:
            if rule.unsupported_selector:
                log.warning(
                    "DeviceTaintRule %s selects by DeviceClass or CEL, which is not supported: ignored", rule.name
                )
        self._taint_rules = rules
        for pool_key in list(self._pool_slices):
            self._rebuild_pool(pool_key)

    def _index_slice(self, resource_slice: ResourceSlice) -> None:
        pool_key = (resource_slice.driver, resource_slice.pool)
        self._pool_slices[pool_key][resource_slice.name] = resource_slice
        self._rebuild_pool(pool_key)

    def _unindex_slice(self, resource_slice: ResourceSlice) -> None:
        pool_key = (resource_slice.driver, resource_slice.pool)
        self._pool_slices[pool_key].pop(resource_slice.name, None)
        self._rebuild_pool(pool_key)

    def _rebuild_pool(self, pool_key: PoolKey) -> None:
        self._device_releases += 1
        old = self._pools.get(pool_key)
        slices: Iterable[ResourceSlice] = self._pool_slices[pool_key].values()
        if self._taint_rules:
            slices = [apply_taint_rules(resource_slice, self._taint_rules) for resource_slice in slices]
        pool = build_pool(pool_key[0], pool_key[1], slices)
        for touched in (old, pool):
            if touched is None:
                continue
            if touched.node_local:
                self._local_pools[touched.node_local].discard(pool_key)
                self._local_versions[touched.node_local] += 1
                self._pending_changes.append(Change(self._version + 1, NODE_DEVICES, touched.node_local))
            else:
                self._shared_pools.discard(pool_key)
                self._shared_version += 1
        if pool is None:
            self._pools.pop(pool_key, None)
            self._pool_slices.pop(pool_key, None)
        else:
            self._pools[pool_key] = pool
            if pool.node_local:
                self._local_pools[pool.node_local].add(pool_key)
            else:
                self._shared_pools.add(pool_key)
        self._pools_dirty = True

    def _touch_allocation(self, device_key: DeviceKey) -> None:
        pool = self._pools.get((device_key[0], device_key[1]))
        if pool is not None and pool.node_local:
            self._alloc_versions[pool.node_local] += 1
            self._pending_changes.append(Change(self._version + 1, NODE_ALLOCATIONS, pool.node_local))
        else:
            self._shared_alloc_version += 1

    def _set_share(self, device_key: DeviceKey, use: SharedUse | None) -> None:
        if use is None:
            if device_key in self._shared:
                self._shared = self._shared.delete(device_key)
        else:
            self._shared = self._shared.set(device_key, use)

    def _index_claim(self, key: str, claim: ResourceClaim | None) -> None:
        previous = self._claim_devices.get(key, ())
        current: tuple[DeviceKey, ...] = ()
        if claim is not None and claim.allocation is not None:
            current = tuple(result.key for result in claim.allocation.results if not result.admin_access)
        shares: tuple[tuple[DeviceKey, tuple[tuple[str, Fraction], ...]], ...] = ()
        if claim is not None and claim.allocation is not None:
            shares = tuple(
                (result.key, result.consumed_capacity)
                for result in claim.allocation.results
                if result.share_id and not result.admin_access
            )
        previous_shares = self._claim_shares.pop(key, ())
        if previous != current or previous_shares != shares:
            self._allocations_dirty = True
            if not set(previous) <= set(current) or not set(previous_shares) <= set(shares):
                self._device_releases += 1
        if previous != current:
            for device_key in set(previous).symmetric_difference(current):
                self._touch_allocation(device_key)
        if previous_shares != shares:
            for device_key in {k for k, _ in previous_shares} | {k for k, _ in shares}:
                self._touch_allocation(device_key)
        for device_key, consumed in previous_shares:
            self._set_share(device_key, add_share(self._shared.get(device_key), consumed, -1))
        if shares:
            self._claim_shares[key] = shares
            for device_key, consumed in shares:
                self._set_share(device_key, add_share(self._shared.get(device_key), consumed))
        for device_key in self._claim_devices.pop(key, ()):
            remaining = self._allocated.get(device_key, 0) - 1
            if remaining > 0:
                self._allocated = self._allocated.set(device_key, remaining)
            else:
                self._allocated = self._allocated.delete(device_key)
        if current:  # claim is not None here
            self._claim_devices[key] = current
            for device_key in current:
                self._allocated = self._allocated.set(device_key, self._allocated.get(device_key, 0) + 1)
        pod_claim_name = claim.annotations.get(POD_CLAIM_NAME_ANNOTATION) if claim is not None else None
        generated: tuple[tuple[str, str, str], ...] = ()
        if claim is not None and pod_claim_name:
            generated = tuple((claim.namespace, owner_uid, pod_claim_name) for owner_uid in claim.owner_uids)
        previous_generated = self._generated_by_claim.pop(key, ())
        if generated:
            self._generated_by_claim[key] = generated
        if previous_generated != generated:
            for generated_key in previous_generated:
                if self._generated_claims.get(generated_key) == key:
                    self._generated_claims = self._generated_claims.delete(generated_key)
        for generated_key in generated:
            if self._generated_claims.get(generated_key) != key:
                self._generated_claims = self._generated_claims.set(generated_key, key)

    def _set_queue_status(self, key: str, raw: Mapping[str, Any] | None) -> None:
        """Kueue's own view of a ClusterQueue, as a change of its own (the quota context does not read it)."""
        try:
            status = parse_queue_status(raw) if raw is not None else None
        except ObjectError as error:
            log.warning("ignoring the status of ClusterQueue %s: %s", key, error.describe())
            status = None
        if self._queue_status.get(key) == status:
            return
        if status is None:
            del self._queue_status[key]
        else:
            self._queue_status[key] = status
        self._queue_status_dirty = True
        self._pending_changes.append(Change(self._version + 1, "ClusterQueueStatus", key))

    def _index_workload(self, key: str, old: Workload | None, new: Workload | None) -> None:
        """Owner uid -> admitted Workload, so a pod finds the flavor Kueue gave it with one lookup."""
        for owner in old.owners if old is not None else ():
            if owner.uid and self._admitted_by_owner.get(owner.uid) == key:
                self._admitted_by_owner = self._admitted_by_owner.delete(owner.uid)
        if new is not None and new.admission is not None:
            for owner in new.owners:
                if owner.uid:
                    self._admitted_by_owner = self._admitted_by_owner.set(owner.uid, key)

    # --- reads --------------------------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._version

    def wait_for_change(self, version: int, timeout: float) -> int:
        """The store's version once it differs from `version` (a watch event or a list changed something), or
        after `timeout` seconds."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != version, timeout)
            return self._version

    def pod_at_version(self, pod: Pod, resource_version: str) -> bool:
        """Whether `pod`, as a snapshot holds it, is that pod at `resource_version` too: its own version, or a
        newer one whose watch event changed nothing the models parse (kept as a no-op by `_upsert`). The pair
        names the very object it stands for, so a snapshot taken before a later real change never matches the
        later version. (kube-scheduler sends the verbs the pod at its newest version: after its scheduling
        gates are lifted, after the kubelet's status writes; SchedulingService.stored_pod.)"""
        if pod.resource_version == resource_version:
            return True
        newer = self._pod_versions.get(pod.key)
        return newer is not None and newer[0] is pod and newer[1] == resource_version

    def snapshot(self) -> ClusterSnapshot:
        with self._lock:
            current = self._snapshot
            if current is not None and current.version == self._version:
                return current
            objects: dict[str, Mapping[str, Any]] = {
                kind: (
                    dict(self._objects[kind]) if current is None or kind in self._dirty_kinds else current.objects[kind]
                )
                for kind in self._objects
            }
            objects.update(self._persistent)  # as they are: no write reaches a map once taken
            self._dirty_kinds.clear()
            queue_status_dirty, self._queue_status_dirty = self._queue_status_dirty, False
            if current is None or self._pools_dirty:
                topology = DeviceTopology(
                    pools=dict(self._pools),
                    shared_pools=tuple(sorted(self._shared_pools)),
                    local_pools={node: tuple(keys) for node, keys in self._local_pools.items() if keys},
                    shared_version=self._shared_version,
                    local_versions=dict(self._local_versions),
                )
                self._pools_dirty = False
            else:
                topology = current.topology
            chunk = ChangeChunk(
                current.version if current is not None else 0,
                self._version,
                tuple(self._pending_changes),
                current._changes if current is not None else None,
            )
            self._pending_changes = []
            self._chunks.append(chunk)
            if len(self._chunks) > CHANGE_CHUNKS_KEPT:
                self._chunks.pop(0)
                self._chunks[0].older = None
            unchanged_claims = None if current is None or self._allocations_dirty else current
            self._allocations_dirty = False
            snapshot = ClusterSnapshot(
                version=self._version,
                objects=objects,
                topology=topology,
                allocated=self._allocated,
                shared_allocated=self._shared,
                alloc_versions=(
                    dict(self._alloc_versions) if unchanged_claims is None else unchanged_claims.alloc_versions
                ),
                shared_alloc_version=self._shared_alloc_version,
                generated_claims=self._generated_claims,
                queue_status=(
                    dict(self._queue_status) if current is None or queue_status_dirty else current.queue_status
                ),
                admitted_workloads=self._admitted_by_owner,
                group_members=self._group_members,
                kueue_enabled=self._kueue_enabled,
                synced=self._synced,
                device_releases=self._device_releases,
                _changes=chunk,
                _node_devices_cache=self._node_devices_cache,
                # node_devices answers depend only on the Node objects and the topology: while both are the
                # same objects (claim and pod events), the next snapshot keeps what this one resolved
                _resolved_devices=(
                    current._resolved_devices
                    if current is not None
                    and topology is current.topology
                    and objects["Node"] is current.objects["Node"]
                    else {}
                ),
            )
            self._snapshot = snapshot
            return snapshot


def _node_view(node: Node) -> tuple[object, ...]:
    """What the extender reads of a Node: labels and unschedulable, taints (flavor membership) and allocatable
    (which extended resources a device plugin serves there)."""
    return (node.labels, node.unschedulable, node.taints, node.allocatable)
