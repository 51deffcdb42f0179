"""ResourceFlavor: the node labels and taints that make a set of nodes one flavor
(apis/kueue/v1beta2/resourceflavor_types.go)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.state.core import Node, Taint, Toleration
from extender.state.errors import ObjectError
from extender.state.fields import child_path, get_map, get_optional_int, get_optional_str, get_str, map_items
from extender.state.kueue.parsing import KUEUE_API_VERSIONS, check_kind, frozen_str_map, no_entries, object_name

_TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class ResourceFlavor:
    name: str
    node_labels: Mapping[str, str] = field(default_factory=no_entries)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology_name: str | None = None

    def matches_node(self, node_labels: Mapping[str, str]) -> bool:
        """Whether a node belongs to this flavor: every nodeLabel present with the same value.

        A flavor without nodeLabels matches every node (Kueue injects no node selector for it).
        """
        return all(node_labels.get(key) == value for key, value in self.node_labels.items())

    def holds_node(self, node: Node) -> bool:
        """The flavor's nodes: its nodeLabels match and the node carries each of its nodeTaints."""
        if not self.matches_node(node.labels):
            return False
        return all(taint in node.taints for taint in self.node_taints)


def parse_resource_flavor(obj: Mapping[str, Any]) -> ResourceFlavor:
    check_kind(obj, "ResourceFlavor", KUEUE_API_VERSIONS)
    name = object_name(obj)
    spec = get_map(obj, "spec", "")
    taints = []
    for taint_path, taint in map_items(spec, "nodeTaints", "spec"):
        effect = get_str(taint, "effect", taint_path, required=True)
        if effect not in _TAINT_EFFECTS:
            raise ObjectError(child_path(taint_path, "effect"), f"unsupported taint effect {effect!r}")
        key = get_str(taint, "key", taint_path, required=True)
        taints.append(Taint(key=key, value=get_str(taint, "value", taint_path), effect=effect))
    tolerations = []
    for toleration_path, toleration in map_items(spec, "tolerations", "spec"):
        operator = get_str(toleration, "operator", toleration_path, default="Equal")
        if operator not in ("Equal", "Exists"):
            raise ObjectError(child_path(toleration_path, "operator"), f"unsupported operator {operator!r}")
        key = get_str(toleration, "key", toleration_path)
        if not key and operator != "Exists":
            raise ObjectError(child_path(toleration_path, "operator"), "must be Exists when 'key' is empty")
        effect = get_str(toleration, "effect", toleration_path)
        if effect and effect not in _TAINT_EFFECTS:
            raise ObjectError(child_path(toleration_path, "effect"), f"unsupported taint effect {effect!r}")
        tolerations.append(
            Toleration(
                key=key,
                operator=operator,
                value=get_str(toleration, "value", toleration_path),
                effect=effect,
                toleration_seconds=get_optional_int(toleration, "tolerationSeconds", toleration_path),
            )
        )
    return ResourceFlavor(
        name=name,
        node_labels=frozen_str_map(spec, "nodeLabels", "spec"),
        node_taints=tuple(taints),
        tolerations=tuple(tolerations),
        topology_name=get_optional_str(spec, "topologyName", "spec"),
    )
