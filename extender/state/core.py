"""Core Kubernetes objects the extender reads: Node, Namespace, Pod, ConfigMap, plus node selectors.

Parsed once when an object arrives (snapshot load, watch event, wire request) into frozen, slotted records, so
that the per-node decisions touch attributes, not nested dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from extender.state.errors import ObjectError
from extender.state.fields import (
    child_path,
    get_map,
    get_optional_int,
    get_str,
    get_str_map,
    map_items,
)
from extender.state.labels import (
    NODE_FIELD_SELECTOR_OPERATORS,
    NODE_SELECTOR_OPERATORS,
    Operator,
    Requirement,
    parse_requirement,
)
from extender.state.quantity import QuantityError, parse_quantity

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


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[Requirement, ...]
    match_fields: tuple[Requirement, ...]

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


def _parse_requirements(obj: Mapping[str, Any], key: str, path: str, *, fields: bool) -> tuple[Requirement, ...]:
    """NodeSelectorRequirements: matchExpressions take labels' six operators, matchFields only In and NotIn
    on metadata.name (ValidateNodeSelectorRequirement / ValidateNodeFieldSelectorRequirement)."""
    allowed = NODE_FIELD_SELECTOR_OPERATORS if fields else NODE_SELECTOR_OPERATORS
    requirements = []
    for req_path, raw in map_items(obj, key, path):
        requirement = parse_requirement(raw, req_path, allowed)
        if fields and requirement.key != "metadata.name":
            raise ObjectError(child_path(req_path, "key"), f"unsupported field selector {requirement.key!r}")
        if requirement.operator in (Operator.IN, Operator.NOT_IN) and not requirement.values:
            message = f"must not be empty for operator {requirement.operator.value}"
            raise ObjectError(child_path(req_path, "values"), message)
        requirements.append(requirement)
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
    # status.allocatable: a DRA-backed extended resource the node advertises here is served by a device plugin
    # on this node, not by DRA (kube-scheduler's filterExtendedResources).
    allocatable: Mapping[str, Fraction] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()


def _parse_resource_list(raw: Mapping[str, Any], key: str, path: str) -> dict[str, Fraction]:
    """A core/v1 ResourceList (name -> quantity)."""
    out: dict[str, Fraction] = {}
    list_path = child_path(path, key)
    for name, value in get_map(raw, key, path).items():
        try:
            out[str(name)] = parse_quantity(value)
        except QuantityError as error:
            raise ObjectError(child_path(list_path, str(name)), str(error)) from None
    return out


def parse_taints(raw: Mapping[str, Any], key: str, path: str) -> tuple[Taint, ...]:
    return tuple(
        Taint(
            key=get_str(taint, "key", taint_path, required=True),
            value=get_str(taint, "value", taint_path),
            effect=get_str(taint, "effect", taint_path, required=True),
        )
        for taint_path, taint in map_items(raw, key, path)
    )


def parse_tolerations(raw: Mapping[str, Any], key: str, path: str) -> tuple[Toleration, ...]:
    """core/v1 tolerations; an empty operator means Equal, as the API defaults it."""
    return tuple(
        Toleration(
            key=get_str(toleration, "key", item_path),
            operator=get_str(toleration, "operator", item_path) or "Equal",
            value=get_str(toleration, "value", item_path),
            effect=get_str(toleration, "effect", item_path),
            toleration_seconds=get_optional_int(toleration, "tolerationSeconds", item_path),
        )
        for item_path, toleration in map_items(raw, key, path)
    )


def parse_node(obj: Mapping[str, Any]) -> Node:
    meta = parse_metadata(obj, namespaced=False)
    spec = get_map(obj, "spec", "")
    unschedulable = spec.get("unschedulable") is True
    status = get_map(obj, "status", "")
    return Node(
        meta.name,
        meta.labels,
        unschedulable,
        meta.resource_version,
        allocatable=_parse_resource_list(status, "allocatable", "status"),
        taints=parse_taints(spec, "taints", "spec"),
    )


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
    # status.phase when it is Succeeded or Failed (the pod holds nothing any more), else "": all the view reads of
    # the phase, so the kubelet's Pending -> Running is no change to it (ClusterStore._upsert).
    terminal_phase: str
    deleting: bool
    scheduler_name: str
    claims: tuple[PodClaimRef, ...]
    # pod claim entry name -> generated ResourceClaim name (None: the controller decided none is needed)
    claim_statuses: Mapping[str, str | None]
    # Not compared: a new version that changes nothing parsed here is no change to the view (ClusterStore._upsert)
    resource_version: str = field(default="", compare=False)
    owner_uids: tuple[str, ...] = ()  # e.g. the Job whose Workload Kueue admitted
    tolerations: tuple[Toleration, ...] = ()
    # Effective pod requests of extended resource names (resourcehelper.PodRequests), for DRA-backed extended
    # resources (KEP-5004); see extended_requests().
    extended_requests: Mapping[str, Fraction] = field(default_factory=dict)
    # status.extendedResourceClaimStatus: the claim kube-scheduler created for those requests, and its
    # request name -> resource name mappings.
    extended_claim_name: str = ""
    extended_request_resources: Mapping[str, str] = field(default_factory=dict)
    # status.nominatedNodeName: since 1.35 (NominatedNodeNameForExpectation, beta, on) kube-scheduler writes it
    # when a pod enters a binding cycle with PreBind work (schedule_one.go bindingCycle), e.g. DRA allocation.
    nominated_node_name: str = ""
    # spec.priority (set by admission from priorityClassName; None when absent) and metadata.creationTimestamp:
    # what Kueue's preemption compares (pkg/util/priority, preemption/common SatisfiesPreemptionPolicy).
    priority: int | None = None
    created: str = field(default="", compare=False)
    # spec.schedulingGroup.podGroupName (core/v1 PodSchedulingGroup, 1.36+): the PodGroup kube-scheduler
    # schedules this pod with (GenericWorkload); "" for a pod on its own.
    pod_group: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def group_key(self) -> str:
        """namespace/podGroupName, "" when the pod is in no group."""
        return f"{self.namespace}/{self.pod_group}" if self.pod_group else ""

    @property
    def is_terminal(self) -> bool:
        return bool(self.terminal_phase)


def pod_identity(obj: Mapping[str, Any]) -> tuple[str, str, str, str] | None:
    """A raw Pod's (namespace, name, uid, resourceVersion), when each is a non-empty string; else None.

    The API server gives every change of an object a new resourceVersion, so one pod's parse at one version
    stands for any copy of it at that version: kube-scheduler sends the verbs the pod as its informer holds it,
    the version the extender's own watch has most likely parsed already (SchedulingService.stored_pod)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    identity = (meta.get("namespace"), meta.get("name"), meta.get("uid"), meta.get("resourceVersion"))
    if not all(type(value) is str and value for value in identity):
        return None
    return identity  # type: ignore[return-value]  # four non-empty strings, checked above


def parse_claim_refs(spec: Mapping[str, Any]) -> list[PodClaimRef]:
    """``spec.resourceClaims`` of a pod or a PodGroup: the same three fields in both APIs
    (k8s.io/api@v0.37.2 core/v1 PodResourceClaim, scheduling/v1beta1 PodGroupResourceClaim)."""
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
    return claims


def parse_claim_statuses(status: Mapping[str, Any]) -> dict[str, str | None]:
    """``status.resourceClaimStatuses``: entry name -> the claim made from its template (None: none needed)."""
    statuses: dict[str, str | None] = {}
    for status_path, raw in map_items(status, "resourceClaimStatuses", "status"):
        generated = raw.get("resourceClaimName")
        if generated is not None and not isinstance(generated, str):
            raise ObjectError(child_path(status_path, "resourceClaimName"), "must be a string")
        statuses[get_str(raw, "name", status_path, required=True)] = generated
    return statuses


def parse_pod(obj: Mapping[str, Any]) -> Pod:
    meta = parse_metadata(obj, namespaced=True)
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    claims = parse_claim_refs(spec)
    statuses = parse_claim_statuses(status)
    extended_status = get_map(status, "extendedResourceClaimStatus", "status")
    phase = get_str(status, "phase", "status")
    return Pod(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        labels=meta.labels,
        annotations=meta.annotations,
        node_name=get_str(spec, "nodeName", "spec"),
        terminal_phase=phase if phase in TERMINAL_POD_PHASES else "",
        deleting=meta.deleting,
        scheduler_name=get_str(spec, "schedulerName", "spec", default="default-scheduler"),
        claims=tuple(claims),
        claim_statuses=statuses,
        resource_version=meta.resource_version,
        owner_uids=meta.owner_uids,
        tolerations=parse_tolerations(spec, "tolerations", "spec"),
        extended_requests=extended_requests(spec),
        extended_claim_name=get_str(extended_status, "resourceClaimName", "status.extendedResourceClaimStatus"),
        extended_request_resources={
            get_str(item, "requestName", item_path): get_str(item, "resourceName", item_path)
            for item_path, item in map_items(extended_status, "requestMappings", "status.extendedResourceClaimStatus")
        },
        nominated_node_name=get_str(status, "nominatedNodeName", "status"),
        priority=get_optional_int(spec, "priority", "spec"),
        created=get_str(get_map(obj, "metadata", ""), "creationTimestamp", "metadata"),
        pod_group=get_str(get_map(spec, "schedulingGroup", "spec"), "podGroupName", "spec.schedulingGroup"),
    )


# --- extended resources ---------------------------------------------------------------------------------------

NATIVE_RESOURCE_PREFIX = "kubernetes.io/"
DEFAULT_REQUESTS_PREFIX = "requests."


def is_extended_resource_name(name: str) -> bool:
    """v1helper.IsExtendedResourceName (plus the scheduler's deviceclass.resource.kubernetes.io/ prefix): not
    native (no domain, or a kubernetes.io domain), not a requests. quota name, a qualified name."""
    if name.startswith("deviceclass.resource.kubernetes.io/"):
        return True
    # IsNativeResource: no domain at all, or one containing "kubernetes.io/" (IsPrefixedNativeResource).
    return "/" in name and NATIVE_RESOURCE_PREFIX not in name and not name.startswith(DEFAULT_REQUESTS_PREFIX)


def _container_requests(container: Mapping[str, Any], path: str) -> dict[str, Fraction]:
    """A container's requests of extended resources; a limit without request is the request (API defaulting)."""
    resources = get_map(container, "resources", path)
    resources_path = child_path(path, "resources")
    limits = _parse_resource_list(resources, "limits", resources_path)
    requests = _parse_resource_list(resources, "requests", resources_path)
    merged = {**limits, **requests}
    return {name: value for name, value in merged.items() if value > 0 and is_extended_resource_name(name)}


def extended_requests(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """The pod's effective requests of extended resources, summed as component-helpers' PodRequests does:
    regular containers and restartable (sidecar) init containers add up; each plain init container needs its
    own request plus the sidecars started before it; the pod needs the larger of the two."""
    total: dict[str, Fraction] = {}
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for item_path, container in map_items(spec, "initContainers", "spec"):
        requests = _container_requests(container, item_path)
        if get_str(container, "restartPolicy", item_path) == "Always":
            for name, value in requests.items():
                sidecars[name] = sidecars.get(name, Fraction(0)) + value
            requests = {}
        for name in set(requests) | set(sidecars):
            need = requests.get(name, Fraction(0)) + sidecars.get(name, Fraction(0))
            init_peak[name] = max(init_peak.get(name, Fraction(0)), need)
    for item_path, container in map_items(spec, "containers", "spec"):
        for name, value in _container_requests(container, item_path).items():
            total[name] = total.get(name, Fraction(0)) + value
    for name, value in sidecars.items():
        total[name] = total.get(name, Fraction(0)) + value
    for name, value in init_peak.items():
        total[name] = max(total.get(name, Fraction(0)), value)
    return {name: value for name, value in sorted(total.items()) if value > 0}
