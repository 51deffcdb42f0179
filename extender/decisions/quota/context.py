"""Everything quota decisions need that changes only with Kueue objects or configuration.

Built once per change of ClusterQueues, Cohorts, LocalQueues, ResourceFlavors, Kueue's ConfigMap or our own
mappings, then reused by every request until one of those changes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.decisions.quota.tree import QuotaTree
from extender.memo import BoundedMemo
from extender.state.core import Node, Toleration
from extender.state.errors import ObjectError
from extender.state.kueue.cluster_queue import ClusterQueue
from extender.state.kueue.device_class_mappings import DeviceClassMappings, parse_kueue_configmap
from extender.state.kueue.local_queue import LocalQueue
from extender.state.kueue.manager_config import fair_sharing_enabled
from extender.state.kueue.quotas import ResourceGroup
from extender.state.kueue.resource_flavor import ResourceFlavor
from extender.state.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

MAX_NODE_FLAVORS = 200_000
MAX_FLAVOR_PARTITIONS = 1_000
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
    # node_flavor's memo: a pure function of this context and the Node object (a Node event makes a new one),
    # born and retired with the context.
    node_flavors: BoundedMemo[Node, tuple[str, ...]] = field(
        default_factory=lambda: BoundedMemo("node_flavors", MAX_NODE_FLAVORS), repr=False, compare=False
    )
    # flavor_partition's memo: per (ClusterQueue, group, tolerations), the cluster's nodes split by the flavors
    # holding them, keyed by the identity of the snapshot's Node mapping (a new one after any Node event; kept in
    # the value so its id cannot be reused meanwhile): a mapping of thousands of nodes has no cheap value key.
    flavor_partitions: BoundedMemo[int, tuple[Mapping[str, Node], Mapping[tuple[str, ...], frozenset[str]]]] = field(
        default_factory=lambda: BoundedMemo("flavor_partitions", MAX_FLAVOR_PARTITIONS),
        repr=False,
        compare=False,
    )

    # Kueue's Configuration enables fair sharing (the preemption oracle then follows fair preemption's candidates)
    fair_sharing: bool = False
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

    def node_flavor(
        self, cluster_queue: ClusterQueue, resource: str, node: Node, tolerations: tuple[Toleration, ...] = ()
    ) -> str | None:
        """The first flavor, in the ClusterQueue's order for this resource, that holds the node and that a pod
        with `tolerations` may use (usage of a bound pod whose Workload names no flavor)."""
        group = cluster_queue.resource_group_for(resource)
        if group is None:
            return None
        flavor_set = self.flavors_of_node(cluster_queue, group, node, tolerations)
        return flavor_set[0] if flavor_set else None

    def flavors_of_node(
        self,
        cluster_queue: ClusterQueue,
        group: ResourceGroup,
        node: Node,
        tolerations: tuple[Toleration, ...] = (),
    ) -> tuple[str, ...]:
        """Every flavor of the group, in order, whose nodes include this one and whose nodeTaints a pod with
        these tolerations (plus the flavor's own, which Kueue adds at admission) tolerates.

        A flavor is a set of nodes (Kueue: nodeLabels are injected as a node selector, nodeTaints describe the
        flavor's nodes), so a node can be in several flavors and a label-less flavor with taints holds only
        the nodes carrying them.
        """
        # The group by its ClusterQueue (always one of this context's) and covered resources: a resource belongs
        # to one group of a ClusterQueue (Kueue's validateResourceGroups).
        table_key = (cluster_queue.name, group.covered_resources, tolerations)
        table = self.node_flavors.table(table_key)
        cached = table.get(node)
        if cached is not None:
            return cached
        flavor_set = tuple(
            flavor.name
            for flavor_quotas in group.flavors
            if (flavor := self.flavors.get(flavor_quotas.name)) is not None
            and flavor.holds_node(node)
            and untolerated_taint(flavor, tolerations) is None
        )
        return self.node_flavors.put(node, flavor_set, table_key)

    def flavor_partition(
        self,
        cluster_queue: ClusterQueue,
        group: ResourceGroup,
        nodes: Mapping[str, Node],
        tolerations: tuple[Toleration, ...] = (),
    ) -> Mapping[tuple[str, ...], frozenset[str]]:
        """Every node of `nodes` by the flavors holding it (flavors_of_node), so a decision splits thousands of
        candidate nodes with a few set intersections instead of a lookup per node. Built once per Node
        mapping: its cost is paid per Node event, not per request."""
        table_key = (cluster_queue.name, group.covered_resources, tolerations)  # as in flavors_of_node
        found = self.flavor_partitions.get(id(nodes), table_key)
        if found is not None and found[0] is nodes:
            return found[1]
        members: dict[tuple[str, ...], set[str]] = {}
        for name, node in nodes.items():
            members.setdefault(self.flavors_of_node(cluster_queue, group, node, tolerations), set()).add(name)
        partition = {flavor_set: frozenset(names) for flavor_set, names in members.items()}
        self.flavor_partitions.put(id(nodes), (nodes, partition), table_key)
        return partition


def untolerated_taint(flavor: ResourceFlavor, tolerations: tuple[Toleration, ...]) -> str | None:
    """Kueue's checkFlavorForPodSets: the first NoSchedule/NoExecute nodeTaint of the flavor that neither the
    pod's tolerations nor the flavor's own tolerations tolerate, as text; None when all are tolerated."""
    for taint in flavor.node_taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if any(t.tolerates(taint) for t in tolerations) or any(t.tolerates(taint) for t in flavor.tolerations):
            continue
        value = f"={taint.value}" if taint.value else ""
        return f"{taint.key}{value}:{taint.effect}"
    return None


def _fair_sharing_in_cluster(snapshot: ClusterSnapshot, ref: KueueConfigRef) -> bool:
    config_map = snapshot.config_maps.get(f"{ref.namespace}/{ref.name}")
    return config_map is not None and fair_sharing_enabled(config_map.data, ref.key)


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
        fair_sharing=_fair_sharing_in_cluster(snapshot, kueue_config),
    )
