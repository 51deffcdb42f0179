"""Core Kubernetes objects the extender reads: Node, Namespace, Pod, ConfigMap, plus node selectors.

Parsed once when an object arrives (snapshot load, watch event, wire request) into frozen, slotted records, so
that the per-node decisions touch attributes, not nested dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.state.errors import ObjectError
from extender.state.fields import (
    child_path,
    get_map,
    get_str,
    get_str_list,
    get_str_map,
    map_items,
)

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class Metadata:
    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    owner_uids: tuple[str, ...] = ()
    deleting: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def parse_metadata(obj: Mapping[str, Any], *, namespaced: bool) -> Metadata:
    meta = get_map(obj, "metadata", "", required=True)
    name = get_str(meta, "name", "metadata", required=True)
    namespace = get_str(meta, "namespace", "metadata", default="default" if namespaced else "")
    owner_uids = tuple(get_str(owner, "uid", path) for path, owner in map_items(meta, "ownerReferences", "metadata"))
    return Metadata(
        name=name,
        namespace=namespace if namespaced else "",
        uid=get_str(meta, "uid", "metadata"),
        resource_version=get_str(meta, "resourceVersion", "metadata"),
        labels=get_str_map(meta, "labels", "metadata"),
        annotations=get_str_map(meta, "annotations", "metadata"),
        owner_uids=owner_uids,
        deleting=meta.get("deletionTimestamp") is not None,
    )


# --- node selectors -------------------------------------------------------------------------------------------

_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        # Gt / Lt compare integers; a non-integer label or value never matches, as upstream.
        if not present or len(self.values) != 1:
            return False
        try:
            label_value, bound = int(labels[self.key]), int(self.values[0])
        except ValueError:
            return False
        return label_value > bound if self.operator == "Gt" else label_value < bound


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[SelectorRequirement, ...]
    match_fields: tuple[SelectorRequirement, ...]

    def matches(self, node: Node) -> bool:
        # An empty term matches nothing (upstream: a null or empty term selects no objects).
        if not self.match_expressions and not self.match_fields:
            return False
        if not all(req.matches(node.labels) for req in self.match_expressions):
            return False
        fields = {"metadata.name": node.name}
        return all(req.matches(fields) for req in self.match_fields)


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """A v1.NodeSelector: the terms are ORed."""

    terms: tuple[NodeSelectorTerm, ...]

    def matches(self, node: Node) -> bool:
        return any(term.matches(node) for term in self.terms)


def _parse_requirements(
    obj: Mapping[str, Any], key: str, path: str, *, fields: bool
) -> tuple[SelectorRequirement, ...]:
    requirements = []
    for req_path, raw in map_items(obj, key, path):
        operator = get_str(raw, "operator", req_path, required=True)
        if operator not in _SELECTOR_OPERATORS:
            raise ObjectError(child_path(req_path, "operator"), f"unknown operator {operator!r}")
        req_key = get_str(raw, "key", req_path, required=True)
        if fields and req_key != "metadata.name":
            raise ObjectError(child_path(req_path, "key"), f"unsupported field selector {req_key!r}")
        values = get_str_list(raw, "values", req_path)
        if operator in ("In", "NotIn") and not values:
            raise ObjectError(child_path(req_path, "values"), f"must not be empty for operator {operator}")
        requirements.append(SelectorRequirement(req_key, operator, values))
    return tuple(requirements)


def parse_node_selector(raw: Mapping[str, Any], path: str) -> NodeSelector:
    terms = []
    for term_path, term in map_items(raw, "nodeSelectorTerms", path):
        terms.append(
            NodeSelectorTerm(
                match_expressions=_parse_requirements(term, "matchExpressions", term_path, fields=False),
                match_fields=_parse_requirements(term, "matchFields", term_path, fields=True),
            )
        )
    return NodeSelector(tuple(terms))


# --- taints and tolerations (nodes, flavors and devices share the core/v1 matching rules) --------------------


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # "Equal" | "Exists"
    value: str = ""
    effect: str = ""  # "" tolerates every effect
    toleration_seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        """core/v1 ToleratesTaint: an empty effect matches every effect, an empty key (Exists) every key."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


# --- objects --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    """Hashed by identity: per-node caches stay valid exactly as long as the store keeps this object."""

    name: str
    labels: Mapping[str, str]
    unschedulable: bool = False
    resource_version: str = ""


def parse_node(obj: Mapping[str, Any]) -> Node:
    meta = parse_metadata(obj, namespaced=False)
    spec = get_map(obj, "spec", "")
    unschedulable = spec.get("unschedulable") is True
    return Node(meta.name, meta.labels, unschedulable, meta.resource_version)


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    labels: Mapping[str, str]


def parse_namespace(obj: Mapping[str, Any]) -> Namespace:
    meta = parse_metadata(obj, namespaced=False)
    # Namespaces always carry this label in a real cluster; snapshots written by hand often omit it.
    labels = {"kubernetes.io/metadata.name": meta.name, **meta.labels}
    return Namespace(meta.name, labels)


@dataclass(frozen=True, slots=True)
class ConfigMap:
    namespace: str
    name: str
    data: Mapping[str, str]


def parse_config_map(obj: Mapping[str, Any]) -> ConfigMap:
    meta = parse_metadata(obj, namespaced=True)
    return ConfigMap(meta.namespace, meta.name, get_str_map(obj, "data", ""))


@dataclass(frozen=True, slots=True)
class PodClaimRef:
    """One entry of pod.spec.resourceClaims."""

    name: str
    claim_name: str = ""
    template_name: str = ""


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    node_name: str
    phase: str
    deleting: bool
    scheduler_name: str
    claims: tuple[PodClaimRef, ...]
    # pod claim entry name -> generated ResourceClaim name (None: the controller decided none is needed)
    claim_statuses: Mapping[str, str | None]
    resource_version: str = ""
    # status.nominatedNodeName: since 1.35 (NominatedNodeNameForExpectation, beta, on) kube-scheduler writes it
    # when a pod enters a binding cycle with PreBind work (schedule_one.go bindingCycle), e.g. DRA allocation.
    nominated_node_name: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_terminal(self) -> bool:
        return self.phase in TERMINAL_POD_PHASES


def parse_pod(obj: Mapping[str, Any]) -> Pod:
    meta = parse_metadata(obj, namespaced=True)
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    claims = []
    for claim_path, raw in map_items(spec, "resourceClaims", "spec"):
        ref = PodClaimRef(
            name=get_str(raw, "name", claim_path, required=True),
            claim_name=get_str(raw, "resourceClaimName", claim_path),
            template_name=get_str(raw, "resourceClaimTemplateName", claim_path),
        )
        if bool(ref.claim_name) == bool(ref.template_name):
            raise ObjectError(claim_path, "exactly one of resourceClaimName and resourceClaimTemplateName is required")
        claims.append(ref)
    statuses: dict[str, str | None] = {}
    for status_path, raw in map_items(status, "resourceClaimStatuses", "status"):
        generated = raw.get("resourceClaimName")
        if generated is not None and not isinstance(generated, str):
            raise ObjectError(child_path(status_path, "resourceClaimName"), "must be a string")
        statuses[get_str(raw, "name", status_path, required=True)] = generated
    return Pod(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        labels=meta.labels,
        annotations=meta.annotations,
        node_name=get_str(spec, "nodeName", "spec"),
        phase=get_str(status, "phase", "status"),
        deleting=meta.deleting,
        scheduler_name=get_str(spec, "schedulerName", "spec", default="default-scheduler"),
        claims=tuple(claims),
        claim_statuses=statuses,
        resource_version=meta.resource_version,
        nominated_node_name=get_str(status, "nominatedNodeName", "status"),
    )
