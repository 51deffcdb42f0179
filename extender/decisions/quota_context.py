"""Everything quota decisions need that changes only with Kueue objects or configuration.

Built once per change of ClusterQueues, Cohorts, LocalQueues, ResourceFlavors, Kueue's ConfigMap or our own
mappings, then reused by every request until one of those changes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.decisions.quota_tree import QuotaTree
from extender.state.core import Node
from extender.state.errors import ObjectError
from extender.state.kueue import (
    ClusterQueue,
    DeviceClassMappings,
    LocalQueue,
    ResourceFlavor,
    Workload,
    parse_kueue_configmap,
)
from extender.state.store import ClusterSnapshot

log = logging.getLogger(__name__)

_UNKNOWN = object()
IMPLICIT_EXTENDED_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
QUOTA_KINDS = frozenset({"ClusterQueue", "Cohort", "LocalQueue", "ResourceFlavor", "ConfigMap", "Namespace"})


@dataclass(frozen=True, slots=True)
class KueueConfigRef:
    namespace: str = "kueue-system"
    name: str = "kueue-manager-config"
    key: str = "controller_manager_config.yaml"


@dataclass(frozen=True)
class QuotaContext:
    enabled: bool
    tree: QuotaTree
    cluster_queues: Mapping[str, ClusterQueue]
    local_queues: Mapping[str, LocalQueue]
    flavors: Mapping[str, ResourceFlavor]
    mappings: DeviceClassMappings
    mappings_source: str  # for people: where the deviceClassMappings came from
    problems: Mapping[str, str] = field(default_factory=dict)  # ClusterQueue -> why it cannot admit anything
    _node_flavor_cache: dict[tuple[str, int], dict[Node, str | None]] = field(default_factory=dict, repr=False)
    _workloads_by_pod: list[tuple[Mapping[str, Workload], dict[str, Workload]]] = field(
        default_factory=list, repr=False
    )

    # Resources some ClusterQueue covers; used only when no deviceClassMappings exist at all.
    covered_resources: frozenset[str] = frozenset()

    def resource_for_class(self, class_name: str) -> str | None:
        """The quota resource a DeviceClass is charged to.

        With deviceClassMappings (Kueue's ConfigMap or our config), exactly those. With none anywhere, a class
        is charged to a resource a ClusterQueue covers under the class's own name, or under the extended
        resource name every DeviceClass answers to (deviceclass.resource.kubernetes.io/<class>), so that a
        cluster whose queues already name their device classes is governed without extra configuration.
        """
        if len(self.mappings):
            return self.mappings.resource_for_class(class_name)
        for candidate in (class_name, f"{IMPLICIT_EXTENDED_RESOURCE_PREFIX}{class_name}"):
            if candidate in self.covered_resources:
                return candidate
        return None

    def node_flavor(self, cluster_queue: ClusterQueue, resource: str, node: Node) -> str | None:
        """The first flavor, in the ClusterQueue's order for this resource, whose nodeLabels match the node."""
        group = cluster_queue.resource_group_for(resource)
        if group is None:
            return None
        per_node = self._node_flavor_cache.get((cluster_queue.name, id(group)))
        if per_node is None:
            per_node = self._node_flavor_cache.setdefault((cluster_queue.name, id(group)), {})
        chosen = per_node.get(node, _UNKNOWN)
        if chosen is not _UNKNOWN:
            return chosen  # type: ignore[return-value]
        chosen = None
        for flavor_quotas in group.flavors:
            flavor = self.flavors.get(flavor_quotas.name)
            if flavor is not None and flavor.matches_node(node.labels):
                chosen = flavor.name
                break
        if len(per_node) > 200_000:
            per_node.clear()
        per_node[node] = chosen
        return chosen

    def admitted_workload(self, workloads: Mapping[str, Workload], pod_uid: str) -> Workload | None:
        """The admitted Workload a pod owns, through an index rebuilt only when Workloads change."""
        if not pod_uid or not workloads:
            return None
        index = None
        if self._workloads_by_pod and self._workloads_by_pod[0][0] is workloads:
            index = self._workloads_by_pod[0][1]
        if index is None:
            index = {
                owner.uid: workload
                for workload in workloads.values()
                if workload.admission is not None
                for owner in workload.owners
                if owner.uid
            }
            self._workloads_by_pod[:] = [(workloads, index)]
        return index.get(pod_uid)


def _mappings_from_cluster(snapshot: ClusterSnapshot, ref: KueueConfigRef) -> tuple[DeviceClassMappings, str]:
    config_map = snapshot.config_maps.get(f"{ref.namespace}/{ref.name}")
    if config_map is None:
        return DeviceClassMappings(), "none (no Kueue ConfigMap and none in the extender's config)"
    source = f"ConfigMap {ref.namespace}/{ref.name} key {ref.key}"
    raw: Mapping[str, Any] = {"data": dict(config_map.data), "metadata": {"name": ref.name, "namespace": ref.namespace}}
    try:
        return parse_kueue_configmap(raw, key=ref.key), source
    except (ObjectError, ValueError) as error:
        log.error("ignoring deviceClassMappings from %s: %s", source, error)
        return DeviceClassMappings(), f"{source} (invalid: {error})"


def build_quota_context(
    snapshot: ClusterSnapshot,
    configured_mappings: DeviceClassMappings | None,
    kueue_config: KueueConfigRef,
) -> QuotaContext:
    if configured_mappings is not None and len(configured_mappings):
        mappings, source = configured_mappings, "the extender's config file"
    else:
        mappings, source = _mappings_from_cluster(snapshot, kueue_config)
    cluster_queues = dict(snapshot.cluster_queues)
    flavors = {flavor.name: flavor for flavor in snapshot.resource_flavors.values()}
    tree = QuotaTree(cluster_queues.values(), snapshot.cohorts.values())
    problems: dict[str, str] = {}
    for cq in cluster_queues.values():
        missing = [name for name in cq.flavor_names if name not in flavors]
        if missing:
            problems[cq.name] = f"ClusterQueue {cq.name} references missing ResourceFlavor {', '.join(missing)}"
            continue
        inactive = tree.inactive_reason(cq.name)
        if inactive:
            problems[cq.name] = f"ClusterQueue {cq.name} is inactive: {inactive}"
    return QuotaContext(
        enabled=snapshot.kueue_enabled,
        tree=tree,
        cluster_queues=cluster_queues,
        local_queues=dict(snapshot.local_queues),
        flavors=flavors,
        mappings=mappings,
        mappings_source=source if len(mappings) else f"{source}; classes charged to covered resources of the same name",
        covered_resources=frozenset(
            resource
            for cq in cluster_queues.values()
            for group in cq.resource_groups
            for resource in group.covered_resources
        ),
        problems=problems,
    )
