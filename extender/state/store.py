"""The cluster model: every object the extender reads, its incremental indexes, and consistent snapshots.

Sources (a snapshot file, live watches) feed raw objects in; the decision layer reads immutable
`ClusterSnapshot`s out. Indexes are updated per event, and a snapshot is materialised at most once per change
burst (on the next read), so neither a busy watch stream nor a busy scheduler pays the other's cost.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

import immutables

from extender.state.capacity import SharedUse, add_share
from extender.state.collector import bulk_load, loaded
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

# Everything a snapshot shares with the next is a persistent map (immutables.Map, a hash array mapped trie): the
# objects of every kind, the pools and which nodes draw from them, the per-node versions, the claims' device
# maps, Kueue's queue status. An event replaces O(log n) of a map and a snapshot takes the maps as they are, so
# neither costs more at 65,000 nodes than at 5,000; copying a dict of one entry per node or pod would. A lookup
# costs 1.4 to 2.5 times a dict's (docs/performance.md), the price of a per-event cost independent of cluster size.
PERSISTENT_KINDS = frozenset(KINDS_BY_NAME)


class ClusterStore:
    """Mutable owner of the cluster model. Thread-safe: sources write, request threads read snapshots."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)  # notified when a watch event or a list made a new version
        # What the watch threads and the view keeper step aside for; the server installs its own (state/pacing.py).
        self.pacing: BackgroundPacing = UNPACED
        self._persistent: dict[str, immutables.Map[str, Any]] = {kind: immutables.Map() for kind in PERSISTENT_KINDS}
        # pod key -> (the pod as stored, a newer resourceVersion it stands for): see pod_at_version.
        self._pod_versions: dict[str, tuple[Pod, str]] = {}
        self._version = 0
        self._snapshot: ClusterSnapshot | None = None
        self._pending_changes: list[Change] = []
        self._chunks: list[ChangeChunk] = []
        # indexes
        self._pool_slices: dict[PoolKey, dict[str, ResourceSlice]] = defaultdict(dict)
        self._pools: immutables.Map[PoolKey, Pool] = immutables.Map()
        self._taint_rules: tuple[DeviceTaintRule, ...] = ()
        # node -> its node-local pools, sorted; a node without one has no entry
        self._local_pools: immutables.Map[str, tuple[PoolKey, ...]] = immutables.Map()
        self._shared_pools: set[PoolKey] = set()
        self._shared_pool_keys: tuple[PoolKey, ...] = ()  # _shared_pools sorted, redone when it changes
        self._shared_version = 0
        # Per-node versions are stamps from one counter, so they never go backwards: a node's entry can be pruned
        # when the node and its pools are gone, and a node of the same name coming back gets a stamp no cache
        # ever saw. An absent entry reads as 0, which no stamp is.
        self._stamps = itertools.count(1)
        self._local_versions: immutables.Map[str, int] = immutables.Map()
        self._allocated: immutables.Map[DeviceKey, int] = immutables.Map()
        # Stamped when an allocation on a node-local pool (or any shared pool) changes, so per-node caches of
        # free devices stay valid until their own node's devices change hands.
        self._alloc_versions: immutables.Map[str, int] = immutables.Map()
        self._shared_alloc_version = 0
        self._claim_devices: dict[str, tuple[DeviceKey, ...]] = {}
        # Shares of devices that allow multiple allocations (results with a shareID), per device and per claim.
        self._shared: immutables.Map[DeviceKey, SharedUse] = immutables.Map()
        self._claim_shares: dict[str, tuple[tuple[DeviceKey, tuple[tuple[str, Fraction], ...]], ...]] = {}
        self._generated_claims: immutables.Map[tuple[str, str, str], str] = immutables.Map()
        # claim key -> its entries in _generated_claims, so a claim event touches only its own (not a scan of all)
        self._generated_by_claim: dict[str, tuple[tuple[str, str, str], ...]] = {}
        self._device_releases = 0  # see ClusterSnapshot.device_releases
        self._admitted_by_owner: immutables.Map[str, str] = immutables.Map()
        # PodGroup key (namespace/name) -> keys of the pods naming it in spec.schedulingGroup, whether or not the
        # PodGroup object exists (kube-scheduler waits for it; the members are known before)
        self._group_members: immutables.Map[str, frozenset[str]] = immutables.Map()
        self._queue_status: immutables.Map[str, KueueQueueStatus] = immutables.Map()
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
        """A fresh list of one kind replaces what was known (initial list, relist, a kind no longer served).

        An object that cannot be parsed, for whatever reason (a malformed field, a parser that raises), is skipped
        and returned as an error, the rule the watch path follows too (ResourceWatcher._apply): one bad object
        never fails its kind, and a list and a watch agree that it is absent.
        """
        with bulk_load():  # millions of objects at the largest clusters: the collector paused (state/collector.py)
            errors = self._replace(kind, raws)
        return errors

    def _replace(self, kind: str, raws: Iterable[Mapping[str, Any]]) -> list[ObjectError]:
        info = KINDS_BY_NAME[kind]
        parsed: dict[str, Any] = {}
        queue_raws: dict[str, Mapping[str, Any]] = {}
        errors: list[ObjectError] = []
        for raw in raws:
            key = "?"
            try:
                key = object_key(info, raw)
                parsed[key] = info.parse(raw)
            except ObjectError as error:
                errors.append(error.located(f"{kind} {key}"))
                continue
            except Exception as error:
                log.debug("cannot parse %s %s", kind, key, exc_info=True)
                failure = ObjectError("(object)", f"cannot be parsed: {type(error).__name__}: {error}")
                errors.append(failure.located(f"{kind} {key}"))
                continue
            if kind == "ClusterQueue":
                queue_raws[key] = raw
        loaded(len(parsed))
        with self._lock:
            for key in list(self._objects_of(kind)):
                if key not in parsed:
                    self._remove(info, key)
            for key, obj in parsed.items():
                if self._objects_of(kind).get(key) is not obj:
                    self._upsert(info, key, obj)
            if kind == "ClusterQueue":
                for key in [key for key in self._queue_status if key not in parsed]:
                    self._set_queue_status(key, None)
                for key in parsed:
                    self._set_queue_status(key, queue_raws.get(key))
            self._version += 1
            self._changed.notify_all()
        return errors

    def set_kueue_enabled(self, enabled: bool) -> None:
        with self._lock:
            self._kueue_enabled = enabled
            self._version += 1

    def set_synced(self, synced: bool) -> None:
        with self._lock:
            if self._synced != synced:
                self._synced = synced
                self._version += 1

    def _record(self, kind: str, key: str) -> None:
        self._pending_changes.append(Change(self._version + 1, kind, key))

    def _objects_of(self, kind: str) -> immutables.Map[str, Any]:
        return self._persistent[kind]

    def _stamp_local(self, node: str) -> None:
        """The devices a node draws from changed (its pools, its labels, the node itself)."""
        self._local_versions = self._local_versions.set(node, next(self._stamps))

    def _prune_node(self, node: str) -> None:
        """Forget the per-node entries of a node whose pools are all gone, and, once the Node is gone too, the rest:
        nodes that come and go (autoscaled, uniquely named) leave nothing behind."""
        if node in self._local_pools:
            return
        if node in self._alloc_versions:
            self._alloc_versions = self._alloc_versions.delete(node)
        if node in self._persistent["Node"]:
            return
        if node in self._local_versions:
            self._local_versions = self._local_versions.delete(node)
        self._node_devices_cache.pop(node, None)

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
        self._persistent[kind] = self._persistent[kind].set(key, obj)
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
            self._stamp_local(key)
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
        self._persistent[kind] = self._persistent[kind].delete(key)
        self._record(kind, key)
        if kind == "ResourceSlice":
            self._unindex_slice(old)
        elif kind == "ResourceClaim":
            self._index_claim(key, None)
        elif kind == "Workload":
            self._index_workload(key, old, None)
        elif kind == "Node":
            self._stamp_local(key)
            self._node_devices_cache.pop(key, None)
            self._pools_dirty = True
            self._prune_node(key)
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
        rules = tuple(self._persistent["DeviceTaintRule"].values())
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
        shared_before = len(self._shared_pools)
        for touched in (old, pool):
            if touched is None:
                continue
            if touched.node_local:
                self._set_local_pool(touched.node_local, pool_key, False)
                self._stamp_local(touched.node_local)
                self._pending_changes.append(Change(self._version + 1, NODE_DEVICES, touched.node_local))
            else:
                self._shared_pools.discard(pool_key)
                self._shared_version += 1
        if pool is None:
            if pool_key in self._pools:
                self._pools = self._pools.delete(pool_key)
            self._pool_slices.pop(pool_key, None)
        else:
            self._pools = self._pools.set(pool_key, pool)
            if pool.node_local:
                self._set_local_pool(pool.node_local, pool_key, True)
            else:
                self._shared_pools.add(pool_key)
        if old is not None and old.node_local and (pool is None or pool.node_local != old.node_local):
            self._prune_node(old.node_local)
        if len(self._shared_pools) != shared_before:
            self._shared_pool_keys = tuple(sorted(self._shared_pools))
        self._pools_dirty = True

    def _set_local_pool(self, node: str, pool_key: PoolKey, present: bool) -> None:
        keys = self._local_pools.get(node, ())
        if present == (pool_key in keys):
            return
        keys = tuple(sorted((*keys, pool_key))) if present else tuple(key for key in keys if key != pool_key)
        self._local_pools = self._local_pools.set(node, keys) if keys else self._local_pools.delete(node)

    def _touch_allocation(self, device_key: DeviceKey) -> None:
        pool = self._pools.get((device_key[0], device_key[1]))
        if pool is not None and pool.node_local:
            self._alloc_versions = self._alloc_versions.set(pool.node_local, next(self._stamps))
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
        if (previous != current or previous_shares != shares) and (
            not set(previous) <= set(current) or not set(previous_shares) <= set(shares)
        ):
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
        except Exception as error:  # the same rule as for objects: what cannot be parsed is absent
            log.warning("ignoring the status of ClusterQueue %s: %s: %s", key, type(error).__name__, error)
            status = None
        if self._queue_status.get(key) == status:
            return
        if status is None:
            self._queue_status = self._queue_status.delete(key)
        else:
            self._queue_status = self._queue_status.set(key, status)
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
            # Every map as it is: no write reaches a map once taken. O(kinds), whatever the cluster's size.
            objects: dict[str, Mapping[str, Any]] = dict(self._persistent)
            if current is None or self._pools_dirty:
                topology = DeviceTopology(
                    pools=self._pools,
                    shared_pools=self._shared_pool_keys,
                    local_pools=self._local_pools,
                    shared_version=self._shared_version,
                    local_versions=self._local_versions,
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
            snapshot = ClusterSnapshot(
                version=self._version,
                objects=objects,
                topology=topology,
                allocated=self._allocated,
                shared_allocated=self._shared,
                alloc_versions=self._alloc_versions,
                shared_alloc_version=self._shared_alloc_version,
                generated_claims=self._generated_claims,
                queue_status=self._queue_status,
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
