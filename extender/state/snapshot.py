"""ClusterSnapshot: one immutable, consistent view of the cluster, and the change list linking snapshots.

The store (state/store.py) materialises one per change burst; every decision runs against exactly one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.state.capacity import SharedUse
from extender.state.core import ConfigMap, Namespace, Node, Pod, PodClaimRef
from extender.state.dra.claims import ResourceClaim, ResourceClaimTemplate
from extender.state.dra.device_class import DeviceClass
from extender.state.dra.devices import DeviceKey, ResourceSlice
from extender.state.inventory import EMPTY_NODE_DEVICES, NodeDevices, Pool, PoolKey, devices_for_node
from extender.state.kueue.cluster_queue import ClusterQueue
from extender.state.kueue.cohort import Cohort
from extender.state.kueue.local_queue import LocalQueue
from extender.state.kueue.queue_status import KueueQueueStatus
from extender.state.kueue.resource_flavor import ResourceFlavor
from extender.state.kueue.workload import Workload
from extender.state.podgroups.podgroup import CompositePodGroup, PodGroup, SchedulingWorkload

# Changes that name a node rather than an object: the allocations on its node-local pools changed (a claim
# event), or the devices it draws from did (a slice event rebuilt one of its pools). With the Node kind's own
# changes they are what a per-node answer depends on besides the versions of pools spanning nodes, so a cache
# of per-node answers learns from the change list which nodes to ask again (PodAllocator.settle_remembered).
NODE_ALLOCATIONS = "NodeAllocations"
NODE_DEVICES = "NodeDevices"
NODE_CHANGE_KINDS = frozenset({"Node", NODE_ALLOCATIONS, NODE_DEVICES})


@dataclass(frozen=True, slots=True)
class Change:
    version: int
    kind: str
    key: str


@dataclass(slots=True)
class ChangeChunk:
    """The changes between two snapshots, linked to the chunk before; the store cuts the chain when it is old."""

    from_version: int
    to_version: int
    changes: tuple[Change, ...]
    older: ChangeChunk | None


@dataclass(frozen=True, slots=True)
class DeviceTopology:
    """Which pools each node draws from; rebuilt only when slices or node labels change."""

    pools: Mapping[PoolKey, Pool]
    shared_pools: tuple[PoolKey, ...]
    local_pools: Mapping[str, tuple[PoolKey, ...]]
    shared_version: int
    local_versions: Mapping[str, int]


@dataclass(slots=True)
class NodeDevicesCacheEntry:
    node: Node
    shared_version: int
    local_version: int
    devices: NodeDevices


@dataclass(frozen=True)
class ClusterSnapshot:
    """An immutable, consistent view of the cluster; every decision runs against exactly one."""

    version: int
    objects: Mapping[str, Mapping[str, Any]]  # kind -> key -> parsed object
    topology: DeviceTopology
    allocated: Mapping[DeviceKey, int]  # device -> number of claims holding it (adminAccess excluded)
    # Of those, the shares (results with a shareID) of devices that allow multiple allocations.
    shared_allocated: Mapping[DeviceKey, SharedUse]
    alloc_versions: Mapping[str, int]  # node -> version of the allocations on its node-local pools
    shared_alloc_version: int  # version of the allocations on pools that span nodes
    generated_claims: Mapping[tuple[str, str, str], str]  # (namespace, pod uid, pod claim name) -> claim key
    admitted_workloads: Mapping[str, str]  # owner uid (a Pod, a Job) -> key of its admitted Workload
    group_members: Mapping[str, frozenset[str]]  # PodGroup key -> keys of the pods in it (spec.schedulingGroup)
    queue_status: Mapping[str, KueueQueueStatus]  # ClusterQueue -> what Kueue reports (kept apart from the spec)
    kueue_enabled: bool
    synced: bool
    # Counts, over the store's life, events that may have freed devices: an allocation or a share let go, a pool
    # rebuilt from its slices (published, changed, retainted). Read by the requeue of parked pods
    # (service/parking.py): a device freed needs no event kube-scheduler requeues an extender's refusal on.
    device_releases: int
    _changes: ChangeChunk | None = field(repr=False)
    _node_devices_cache: dict[str, NodeDevicesCacheEntry] = field(repr=False, compare=False)
    # What node_devices answered for this snapshot: it cannot change within one snapshot, so later requests
    # against the same snapshot pay one lookup per node.
    _resolved_devices: dict[str, NodeDevices] = field(default_factory=dict, repr=False, compare=False)
    # What members_of answered for this snapshot (a gang of a thousand pods is asked about once per member's
    # call, several times): the members cannot change within one snapshot.
    _members: dict[str, tuple[Pod, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def pools(self) -> Mapping[PoolKey, Pool]:
        return self.topology.pools

    # Typed accessors: one line each, so callers do not index `objects` with string literals.
    @property
    def nodes(self) -> Mapping[str, Node]:
        return self.objects["Node"]

    @property
    def namespaces(self) -> Mapping[str, Namespace]:
        return self.objects["Namespace"]

    @property
    def pods(self) -> Mapping[str, Pod]:
        return self.objects["Pod"]

    @property
    def config_maps(self) -> Mapping[str, ConfigMap]:
        return self.objects["ConfigMap"]

    @property
    def slices(self) -> Mapping[str, ResourceSlice]:
        return self.objects["ResourceSlice"]

    @property
    def device_classes(self) -> Mapping[str, DeviceClass]:
        return self.objects["DeviceClass"]

    @property
    def claims(self) -> Mapping[str, ResourceClaim]:
        return self.objects["ResourceClaim"]

    @property
    def claim_templates(self) -> Mapping[str, ResourceClaimTemplate]:
        return self.objects["ResourceClaimTemplate"]

    @property
    def cluster_queues(self) -> Mapping[str, ClusterQueue]:
        return self.objects["ClusterQueue"]

    @property
    def cohorts(self) -> Mapping[str, Cohort]:
        return self.objects["Cohort"]

    @property
    def local_queues(self) -> Mapping[str, LocalQueue]:
        return self.objects["LocalQueue"]

    @property
    def resource_flavors(self) -> Mapping[str, ResourceFlavor]:
        return self.objects["ResourceFlavor"]

    @property
    def workloads(self) -> Mapping[str, Workload]:
        return self.objects["Workload"]

    @property
    def resolved_node_devices(self) -> Mapping[str, NodeDevices]:
        """What node_devices has answered so far for this snapshot (read-only): a hot loop's one-lookup path;
        a node missing here is asked of node_devices."""
        return self._resolved_devices

    def node_devices(self, node_name: str) -> NodeDevices:
        """Devices a node can draw from, in pool/slice/device order; cached until its pools or labels change."""
        resolved = self._resolved_devices.get(node_name)
        if resolved is not None:
            return resolved
        node = self.nodes.get(node_name)
        if node is None:
            return EMPTY_NODE_DEVICES
        topology = self.topology
        local_version = topology.local_versions.get(node_name, 0)
        entry = self._node_devices_cache.get(node_name)
        if (
            entry is not None
            and entry.node is node
            and entry.shared_version == topology.shared_version
            and entry.local_version == local_version
        ):
            self._resolved_devices[node_name] = entry.devices
            return entry.devices
        pool_keys = sorted((*topology.local_pools.get(node_name, ()), *topology.shared_pools))
        result = devices_for_node(node, (topology.pools[key] for key in pool_keys if key in topology.pools))
        self._node_devices_cache[node_name] = NodeDevicesCacheEntry(
            node, topology.shared_version, local_version, result
        )
        self._resolved_devices[node_name] = result
        return result

    def admitted_workload(self, owner_uid: str, *more_owner_uids: str) -> Workload | None:
        """The admitted Workload owned by the pod (its uid: the pod integration) or by one of the pod's owners
        (a Job: Kueue's Workload and the Job's pods share that owner), or None."""
        key = next(
            (found for uid in (owner_uid, *more_owner_uids) if uid and (found := self.admitted_workloads.get(uid))),
            None,
        )
        return self.workloads.get(key) if key is not None else None

    @property
    def pod_groups(self) -> Mapping[str, PodGroup]:
        return self.objects["PodGroup"]

    @property
    def composite_groups(self) -> Mapping[str, CompositePodGroup]:
        return self.objects["CompositePodGroup"]

    @property
    def scheduling_workloads(self) -> Mapping[str, SchedulingWorkload]:
        return self.objects["SchedulingWorkload"]

    def members_of(self, group_key: str) -> tuple[Pod, ...]:
        """The pods of a PodGroup, by key order (the order every group decision walks them in)."""
        found = self._members.get(group_key)
        if found is None:
            pods = self.pods
            found = tuple(pods[key] for key in sorted(self.group_members.get(group_key, ())) if key in pods)
            self._members[group_key] = found
        return found

    def claim_for_pod(self, pod: Pod, ref: PodClaimRef) -> ResourceClaim | None:
        """The ResourceClaim behind one pod.spec.resourceClaims entry, if it exists yet."""
        if ref.claim_name:
            return self.claims.get(f"{pod.namespace}/{ref.claim_name}")
        generated = pod.claim_statuses.get(ref.name)
        if generated:
            return self.claims.get(f"{pod.namespace}/{generated}")
        key = self.generated_claims.get((pod.namespace, pod.uid, ref.name))
        return self.claims.get(key) if key else None

    def changes_since(self, version: int) -> list[Change] | None:
        """Changes after `version`, oldest first, or None when the kept history no longer reaches back that far."""
        if version == self.version:
            return []
        chunks: list[ChangeChunk] = []
        chunk = self._changes
        while chunk is not None and chunk.to_version > version:
            chunks.append(chunk)
            if chunk.from_version == version:
                return [change for older in reversed(chunks) for change in older.changes]
            chunk = chunk.older
        return None
