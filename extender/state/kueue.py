"""Kueue's objects as typed, immutable models.

The extender answers "does this pod's ClusterQueue still have quota here?" with Kueue's own arithmetic, so it
must read ClusterQueues, Cohorts, ResourceFlavors, LocalQueues, Workloads and Kueue's deviceClassMappings
exactly as Kueue (v0.19) does. Snapshots are hand-written or dumped by people, so each parser checks what the
CRD schema and Kueue's admission webhooks would have checked, and names the offending field path; fields we
do not use are ignored so that newer Kueue versions keep loading.

Where served API versions differ (v1beta1 `spec.cohort` vs v1beta2 `spec.cohortName`, v1beta1's deprecated
flavorFungibility values `Borrow`/`Preempt`), the model holds the v1beta2 meaning, as Kueue's conversion does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from types import MappingProxyType
from typing import Any, TypeVar

import yaml

from extender.state.core import Node, Taint, Toleration
from extender.state.errors import ObjectError
from extender.state.fields import (
    child_path,
    get_bool,
    get_int,
    get_map,
    get_optional_int,
    get_optional_str,
    get_str,
    get_str_list,
    get_str_map,
    map_items,
    type_name,
)
from extender.state.labels import LABEL_SELECTOR_OPERATORS, Operator, Requirement, parse_requirement
from extender.state.quantity import QuantityError, format_quantity, parse_quantity

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue v0.19 labels the pods of a Job it admitted with the LocalQueue's name (pkg/controller/jobframework,
# AssignQueueLabelsForPods), also when only the Job carries queue-name.
LOCAL_QUEUE_NAME_LABEL = "kueue.x-k8s.io/local-queue-name"


def pod_queue_name(labels: Mapping[str, str]) -> str:
    """The pod's LocalQueue: its own queue-name label, else the one Kueue gave the pods of an admitted Job."""
    return labels.get(QUEUE_NAME_LABEL) or labels.get(LOCAL_QUEUE_NAME_LABEL, "")


KUEUE_GROUP = "kueue.x-k8s.io"
V1BETA1 = f"{KUEUE_GROUP}/v1beta1"
V1BETA2 = f"{KUEUE_GROUP}/v1beta2"
KUEUE_API_VERSIONS = (V1BETA2, V1BETA1)

CONFIG_API_VERSIONS = ("config.kueue.x-k8s.io/v1beta2", "config.kueue.x-k8s.io/v1beta1")
DEFAULT_CONFIGMAP_NAMESPACE = "kueue-system"
DEFAULT_CONFIGMAP_NAME = "kueue-manager-config"
DEFAULT_CONFIGMAP_KEY = "controller_manager_config.yaml"

# Kueue's config validation limits (pkg/config/validation.go, validateDeviceClassMappings).
MAX_DEVICE_CLASS_MAPPINGS = 16
MAX_DEVICE_CLASSES_PER_MAPPING = 8

_MISSING: Any = object()
_E = TypeVar("_E", bound=StrEnum)
_EMPTY_MAP: Mapping[str, Any] = MappingProxyType({})


def _no_entries() -> Mapping[str, Any]:
    return _EMPTY_MAP


# Immutable, unlike the shared helper's dict: these models are shared by every snapshot.
def _str_map(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, str]:
    return MappingProxyType(get_str_map(obj, key, path))


def _quantity(obj: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> Fraction | None:
    value = obj.get(key, _MISSING)
    field_path = child_path(path, key)
    if value is _MISSING or value is None:
        if required:
            raise ObjectError(field_path, "is required")
        return None
    try:
        quantity = parse_quantity(value)
    except QuantityError as exc:
        raise ObjectError(field_path, str(exc)) from None
    if quantity < 0:
        # Kueue's webhook: quotas and limits "must be greater than or equal to 0".
        raise ObjectError(field_path, f"must be greater than or equal to 0, got {value!r}")
    return quantity


def _optional_enum(obj: Mapping[str, Any], key: str, path: str, enum: type[_E]) -> _E | None:
    text = get_str(obj, key, path)
    if not text:
        return None
    try:
        return enum(text)
    except ValueError:
        allowed = ", ".join(member.value for member in enum)
        message = f"unsupported value {text!r}; must be one of {allowed}"
        raise ObjectError(child_path(path, key), message) from None


def _enum(obj: Mapping[str, Any], key: str, path: str, enum: type[_E], default: _E) -> _E:
    value = _optional_enum(obj, key, path, enum)
    return default if value is None else value


def _check_kind(obj: Mapping[str, Any], kind: str, api_versions: tuple[str, ...]) -> str:
    """The object's apiVersion, after checking kind and version; a missing one means the newest.

    List items returned by the API (and some client libraries) omit apiVersion and kind, so absence is not
    an error; a *different* kind or an unknown version is, because its fields would be misread.
    """
    if not isinstance(obj, Mapping):
        raise ObjectError("", f"must be an object, got {type_name(obj)}")
    found_kind = get_str(obj, "kind", "")
    if found_kind and found_kind != kind:
        raise ObjectError("kind", f"expected {kind}, got {found_kind!r}")
    api_version = get_str(obj, "apiVersion", "")
    if api_version and api_version not in api_versions:
        expected = ", ".join(api_versions)
        raise ObjectError("apiVersion", f"unsupported {api_version!r}; expected one of {expected}")
    return api_version


def _name(obj: Mapping[str, Any]) -> str:
    return get_str(get_map(obj, "metadata", "", required=True), "name", "metadata", required=True)


def _namespace(obj: Mapping[str, Any]) -> str:
    # Same default as the object keys used by the state indexes ("namespace/name").
    return get_str(get_map(obj, "metadata", "", required=True), "namespace", "metadata", default="default")


# --- label selectors ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector. All requirements must hold; an empty selector matches everything.

    A *missing* selector is represented by None at the field that holds it, because its meaning depends on
    the field (for ClusterQueue.namespaceSelector it matches nothing, as LabelSelectorAsSelector(nil) does).
    """

    match_labels: Mapping[str, str] = field(default_factory=_no_entries)
    match_expressions: tuple[Requirement, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        return all(requirement.matches(labels) for requirement in self.match_expressions)


def parse_label_selector(raw: object, path: str) -> LabelSelector:
    """Parse a LabelSelector, validating operators and values as ValidateLabelSelector does."""
    if not isinstance(raw, Mapping):
        raise ObjectError(path, f"must be an object, got {type_name(raw)}")
    requirements = []
    for item_path, item in map_items(raw, "matchExpressions", path):
        requirement = parse_requirement(item, item_path, LABEL_SELECTOR_OPERATORS)
        op, values = requirement.operator, requirement.values
        if op in (Operator.IN, Operator.NOT_IN) and not values:
            raise ObjectError(child_path(item_path, "values"), f"must be specified when operator is {op.value}")
        if op in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and values:
            message = f"may not be specified when operator is {op.value}"
            raise ObjectError(child_path(item_path, "values"), message)
        requirements.append(requirement)
    return LabelSelector(_str_map(raw, "matchLabels", path), tuple(requirements))


# --- quotas shared by ClusterQueue and Cohort ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """One resource's quota in one flavor. None limits mean "no limit" (Kueue: nil pointer)."""

    name: str
    nominal_quota: Fraction
    borrowing_limit: Fraction | None = None
    lending_limit: Fraction | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    name: str
    resources: tuple[ResourceQuota, ...]

    def resource(self, name: str) -> ResourceQuota | None:
        for quota in self.resources:
            if quota.name == name:
                return quota
        return None


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    """Resources that are assigned one flavor together; flavors are tried in this order."""

    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


def _parse_resource_groups(
    spec: Mapping[str, Any], path: str, *, has_parent: bool, owner: str, lending_at_most_nominal: bool
) -> tuple[ResourceGroup, ...]:
    """resourceGroups with the CRD's structural rules and Kueue's webhook rules (validateResourceGroups)."""
    groups = []
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    for group_path, group in map_items(spec, "resourceGroups", path):
        covered = get_str_list(group, "coveredResources", group_path, required=True)
        if not covered:
            raise ObjectError(child_path(group_path, "coveredResources"), "must have at least 1 item")
        for index, resource in enumerate(covered):
            resource_path = child_path(child_path(group_path, "coveredResources"), index)
            if not resource:
                raise ObjectError(resource_path, "must not be empty")
            if resource in seen_resources:
                message = f"duplicate resource {resource!r}: a resource may be covered by one group only"
                raise ObjectError(resource_path, message)
            seen_resources.add(resource)
        flavors = []
        for flavor_path, flavor in map_items(group, "flavors", group_path, required=True):
            flavor_name = get_str(flavor, "name", flavor_path, required=True)
            if flavor_name in seen_flavors:
                raise ObjectError(child_path(flavor_path, "name"), f"duplicate flavor {flavor_name!r}")
            seen_flavors.add(flavor_name)
            resources = []
            raw_resources = list(map_items(flavor, "resources", flavor_path, required=True))
            if len(raw_resources) != len(covered):
                raise ObjectError(
                    child_path(flavor_path, "resources"),
                    f"flavors must have the same number of resources as the coveredResources "
                    f"({len(raw_resources)} != {len(covered)})",
                )
            for index, (quota_path, quota) in enumerate(raw_resources):
                name = get_str(quota, "name", quota_path, required=True)
                if name != covered[index]:
                    raise ObjectError(
                        child_path(quota_path, "name"),
                        f"must match the name in coveredResources ({name!r} != {covered[index]!r})",
                    )
                nominal = _quantity(quota, "nominalQuota", quota_path, required=True)
                assert nominal is not None
                borrowing = _quantity(quota, "borrowingLimit", quota_path)
                lending = _quantity(quota, "lendingLimit", quota_path)
                for limit_name, limit in (("borrowingLimit", borrowing), ("lendingLimit", lending)):
                    if limit is not None and not has_parent:
                        message = f"must be nil when {owner} is empty"
                        raise ObjectError(child_path(quota_path, limit_name), message)
                if lending_at_most_nominal and lending is not None and lending > nominal:
                    raise ObjectError(
                        child_path(quota_path, "lendingLimit"),
                        f"must be less than or equal to the nominalQuota "
                        f"({format_quantity(lending)} > {format_quantity(nominal)})",
                    )
                resources.append(ResourceQuota(name, nominal, borrowing, lending))
            if not resources:
                raise ObjectError(child_path(flavor_path, "resources"), "must have at least 1 item")
            flavors.append(FlavorQuotas(flavor_name, tuple(resources)))
        if not flavors:
            raise ObjectError(child_path(group_path, "flavors"), "must have at least 1 item")
        groups.append(ResourceGroup(covered, tuple(flavors)))
    return tuple(groups)


def _quota_in(groups: tuple[ResourceGroup, ...], flavor: str, resource: str) -> ResourceQuota | None:
    for group in groups:
        if resource not in group.covered_resources:
            continue
        for flavor_quotas in group.flavors:
            if flavor_quotas.name == flavor:
                return flavor_quotas.resource(resource)
        return None
    return None


# --- ClusterQueue -------------------------------------------------------------------------------------------


class StopPolicy(StrEnum):
    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


class FungibilityPolicy(StrEnum):
    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FungibilityPreference(StrEnum):
    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


# v1beta1's deprecated values, converted the way Kueue's v1beta1 -> v1beta2 conversion does.
_V1BETA1_FUNGIBILITY = {
    "Borrow": FungibilityPolicy.MAY_STOP_SEARCH,
    "Preempt": FungibilityPolicy.MAY_STOP_SEARCH,
}


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    """When Kueue stops trying further flavors; defaults are the CRD's (MayStopSearch / TryNextFlavor)."""

    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH
    when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR
    preference: FungibilityPreference | None = None


def _parse_fungibility_policy(
    raw: Mapping[str, Any], key: str, path: str, default: FungibilityPolicy, *, allow_v1beta1: bool
) -> FungibilityPolicy:
    text = get_str(raw, key, path)
    if not text:
        return default
    if allow_v1beta1 and text in _V1BETA1_FUNGIBILITY:
        return _V1BETA1_FUNGIBILITY[text]
    try:
        return FungibilityPolicy(text)
    except ValueError:
        allowed = [member.value for member in FungibilityPolicy]
        if allow_v1beta1:
            allowed.append("Borrow" if key == "whenCanBorrow" else "Preempt")
        message = f"unsupported value {text!r}; must be one of {', '.join(allowed)}"
        raise ObjectError(child_path(path, key), message) from None


def _parse_fungibility(spec: Mapping[str, Any], path: str, *, allow_v1beta1: bool) -> FlavorFungibility:
    raw = get_map(spec, "flavorFungibility", path)
    fungibility_path = child_path(path, "flavorFungibility")
    borrow = _parse_fungibility_policy(
        raw, "whenCanBorrow", fungibility_path, FungibilityPolicy.MAY_STOP_SEARCH, allow_v1beta1=allow_v1beta1
    )
    preempt = _parse_fungibility_policy(
        raw,
        "whenCanPreempt",
        fungibility_path,
        FungibilityPolicy.TRY_NEXT_FLAVOR,
        allow_v1beta1=allow_v1beta1,
    )
    preference = _optional_enum(raw, "preference", fungibility_path, FungibilityPreference)
    both_try_next = borrow is preempt is FungibilityPolicy.TRY_NEXT_FLAVOR
    if preference is not None and not both_try_next:
        raise ObjectError(
            child_path(fungibility_path, "preference"),
            "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
        )
    return FlavorFungibility(borrow, preempt, preference)


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    name: str
    cohort_name: str | None = None
    # None (field absent) selects no namespace at all, as in Kueue; LabelSelector() selects every namespace.
    namespace_selector: LabelSelector | None = None
    stop_policy: StopPolicy = StopPolicy.NONE
    resource_groups: tuple[ResourceGroup, ...] = ()
    flavor_fungibility: FlavorFungibility = FlavorFungibility()
    api_version: str = V1BETA2
    uid: str = ""

    @property
    def is_stopped(self) -> bool:
        """Hold and HoldAndDrain both stop new admissions (Kueue marks the queue inactive)."""
        return self.stop_policy is not StopPolicy.NONE

    def selects_namespace(self, namespace_labels: Mapping[str, str]) -> bool:
        if self.namespace_selector is None:
            return False
        return self.namespace_selector.matches(namespace_labels)

    def resource_group_for(self, resource: str) -> ResourceGroup | None:
        for group in self.resource_groups:
            if resource in group.covered_resources:
                return group
        return None

    def flavors_for(self, resource: str) -> tuple[str, ...]:
        """The flavors Kueue would try for this resource, in order; empty when the resource is not covered."""
        group = self.resource_group_for(resource)
        return tuple(flavor.name for flavor in group.flavors) if group else ()

    def quota(self, flavor: str, resource: str) -> ResourceQuota | None:
        return _quota_in(self.resource_groups, flavor, resource)

    @property
    def flavor_names(self) -> tuple[str, ...]:
        return tuple(flavor.name for group in self.resource_groups for flavor in group.flavors)


def parse_cluster_queue(obj: Mapping[str, Any]) -> ClusterQueue:
    api_version = _check_kind(obj, "ClusterQueue", KUEUE_API_VERSIONS)
    name = _name(obj)
    spec = get_map(obj, "spec", "")
    if api_version == V1BETA1:
        cohort = get_optional_str(spec, "cohort", "spec")
    elif api_version == V1BETA2:
        cohort = get_optional_str(spec, "cohortName", "spec")
    else:  # version unknown (API list item): accept either spelling, preferring v1beta2's
        cohort = get_optional_str(spec, "cohortName", "spec") or get_optional_str(spec, "cohort", "spec")
    selector = None
    if spec.get("namespaceSelector") is not None:
        selector = parse_label_selector(spec["namespaceSelector"], "spec.namespaceSelector")
    groups = _parse_resource_groups(
        spec, "spec", has_parent=cohort is not None, owner="cohort", lending_at_most_nominal=True
    )
    return ClusterQueue(
        name=name,
        cohort_name=cohort,
        namespace_selector=selector,
        stop_policy=_enum(spec, "stopPolicy", "spec", StopPolicy, StopPolicy.NONE),
        resource_groups=groups,
        flavor_fungibility=_parse_fungibility(spec, "spec", allow_v1beta1=api_version != V1BETA2),
        api_version=api_version or V1BETA2,
        uid=get_str(get_map(obj, "metadata", ""), "uid", "metadata"),
    )


# --- Cohort -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cohort:
    """An explicit Cohort; its resourceGroups add shared quota to the subtree below it."""

    name: str
    parent_name: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    api_version: str = V1BETA2

    def quota(self, flavor: str, resource: str) -> ResourceQuota | None:
        return _quota_in(self.resource_groups, flavor, resource)


def parse_cohort(obj: Mapping[str, Any]) -> Cohort:
    api_version = _check_kind(obj, "Cohort", KUEUE_API_VERSIONS)
    name = _name(obj)
    spec = get_map(obj, "spec", "")
    parent = get_optional_str(spec, "parentName", "spec")
    # Unlike a ClusterQueue, a Cohort's lendingLimit may exceed its own nominalQuota: its subtree lends too.
    groups = _parse_resource_groups(
        spec, "spec", has_parent=parent is not None, owner="parent", lending_at_most_nominal=False
    )
    return Cohort(name=name, parent_name=parent, resource_groups=groups, api_version=api_version or V1BETA2)


# --- ResourceFlavor -----------------------------------------------------------------------------------------

_TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class ResourceFlavor:
    name: str
    node_labels: Mapping[str, str] = field(default_factory=_no_entries)
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
    _check_kind(obj, "ResourceFlavor", KUEUE_API_VERSIONS)
    name = _name(obj)
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
        node_labels=_str_map(spec, "nodeLabels", "spec"),
        node_taints=tuple(taints),
        tolerations=tuple(tolerations),
        topology_name=get_optional_str(spec, "topologyName", "spec"),
    )


# --- LocalQueue ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str
    stop_policy: StopPolicy = StopPolicy.NONE

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_local_queue(obj: Mapping[str, Any]) -> LocalQueue:
    _check_kind(obj, "LocalQueue", KUEUE_API_VERSIONS)
    spec = get_map(obj, "spec", "")
    return LocalQueue(
        namespace=_namespace(obj),
        name=_name(obj),
        cluster_queue=get_str(spec, "clusterQueue", "spec", required=True),
        stop_policy=_enum(spec, "stopPolicy", "spec", StopPolicy, StopPolicy.NONE),
    )


# --- Workload -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OwnerReference:
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False


@dataclass(frozen=True, slots=True)
class PodSetAssignment:
    name: str
    flavors: Mapping[str, str] = field(default_factory=_no_entries)  # resource name -> flavor name
    resource_usage: Mapping[str, Fraction] = field(default_factory=_no_entries)
    count: int | None = None  # older Workloads omit it: then the pod set's own count applies


@dataclass(frozen=True, slots=True)
class Admission:
    cluster_queue: str
    pod_set_assignments: tuple[PodSetAssignment, ...]


@dataclass(frozen=True, slots=True)
class Workload:
    namespace: str
    name: str
    uid: str = ""
    queue_name: str = ""
    admission: Admission | None = None
    owners: tuple[OwnerReference, ...] = ()
    conditions: Mapping[str, bool] = field(default_factory=_no_entries)  # condition type -> status is "True"
    pod_set_counts: Mapping[str, int] = field(default_factory=_no_entries)  # spec.podSets: name -> count
    reclaimable_pods: Mapping[str, int] = field(default_factory=_no_entries)  # status.reclaimablePods

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def count_after_reclaim(self, pod_set: str) -> int | None:
        """Kueue's podSetsCountsAfterReclaim (pkg/workload/workload.go, ReclaimablePods on by default): the pod
        set's count less the pods that finished and gave their quota back, never below 0; None when the spec
        does not list the pod set."""
        count = self.pod_set_counts.get(pod_set)
        if count is None:
            return None
        return count - min(self.reclaimable_pods.get(pod_set, 0), count)

    @property
    def owner(self) -> OwnerReference | None:
        """The controlling owner (a Job, or the Pod for plain-pod integration), else the first owner."""
        for owner in self.owners:
            if owner.controller:
                return owner
        return self.owners[0] if self.owners else None

    @property
    def owner_pods(self) -> tuple[OwnerReference, ...]:
        """Pods owning this Workload: one for a plain pod, several for a pod group."""
        return tuple(o for o in self.owners if o.kind == "Pod" and o.api_version in ("v1", ""))

    @property
    def quota_reserved(self) -> bool:
        return self.conditions.get("QuotaReserved", False)

    @property
    def finished(self) -> bool:
        return self.conditions.get("Finished", False)

    @property
    def holds_quota(self) -> bool:
        """Counts against its ClusterQueue as in Kueue's cache: quota reserved, admitted, not finished."""
        return self.admission is not None and self.quota_reserved and not self.finished


def _parse_admission(status: Mapping[str, Any]) -> Admission | None:
    if status.get("admission") is None:
        return None
    raw = get_map(status, "admission", "status")
    path = "status.admission"
    assignments = []
    for assignment_path, assignment in map_items(raw, "podSetAssignments", path, required=True):
        usage: dict[str, Fraction] = {}
        usage_path = child_path(assignment_path, "resourceUsage")
        for resource, value in get_map(assignment, "resourceUsage", assignment_path).items():
            quantity = _quantity({resource: value}, resource, usage_path, required=True)
            assert quantity is not None
            usage[str(resource)] = quantity
        assignments.append(
            PodSetAssignment(
                name=get_str(assignment, "name", assignment_path, default="main") or "main",
                flavors=_str_map(assignment, "flavors", assignment_path),
                resource_usage=MappingProxyType(usage),
                count=get_optional_int(assignment, "count", assignment_path, minimum=0),
            )
        )
    return Admission(get_str(raw, "clusterQueue", path, required=True), tuple(assignments))


def parse_workload(obj: Mapping[str, Any]) -> Workload:
    _check_kind(obj, "Workload", KUEUE_API_VERSIONS)
    metadata = get_map(obj, "metadata", "", required=True)
    owners = []
    for owner_path, owner in map_items(metadata, "ownerReferences", "metadata"):
        owners.append(
            OwnerReference(
                api_version=get_str(owner, "apiVersion", owner_path),
                kind=get_str(owner, "kind", owner_path, required=True),
                name=get_str(owner, "name", owner_path, required=True),
                uid=get_str(owner, "uid", owner_path),
                controller=get_bool(owner, "controller", owner_path),
            )
        )
    status = get_map(obj, "status", "")
    conditions: dict[str, bool] = {}
    for condition_path, condition in map_items(status, "conditions", "status"):
        conditions[get_str(condition, "type", condition_path, required=True)] = (
            get_str(condition, "status", condition_path) == "True"
        )
    spec = get_map(obj, "spec", "")
    return Workload(
        namespace=_namespace(obj),
        name=_name(obj),
        uid=get_str(metadata, "uid", "metadata"),
        queue_name=get_str(spec, "queueName", "spec"),
        admission=_parse_admission(status),
        owners=tuple(owners),
        conditions=MappingProxyType(conditions),
        pod_set_counts=_pod_set_counts(spec, "podSets", "spec"),
        reclaimable_pods=_pod_set_counts(status, "reclaimablePods", "status"),
    )


def _pod_set_counts(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, int]:
    """name -> count of spec.podSets or status.reclaimablePods (Kueue defaults a pod set's name to "main")."""
    counts: dict[str, int] = {}
    for item_path, item in map_items(obj, key, path):
        name = get_str(item, "name", item_path, default="main") or "main"
        counts[name] = get_int(item, "count", item_path, default=1, minimum=0)
    return MappingProxyType(counts)


# --- deviceClassMappings ------------------------------------------------------------------------------------

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def _qualified_name_problem(value: str) -> str | None:
    """Why value is not a label key (IsLabelKey: [DNS-subdomain prefix/]name), or None if it is one."""
    prefix, slash, name = value.rpartition("/")
    if slash and not prefix:
        return "prefix part must be non-empty"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QUALIFIED_NAME_PART.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


class DeviceClassSourceKind(StrEnum):
    COUNTER = "counter"
    CAPACITY = "capacity"


@dataclass(frozen=True, slots=True)
class DeviceClassSource:
    """A v1beta2 mapping's accounting source: quota is charged in counter/capacity units, not devices."""

    kind: DeviceClassSourceKind
    name: str
    driver: str
    # deviceSelector.cel.expression: which devices of the driver the source accounts for ("" = every one).
    device_selector: str = ""


@dataclass(frozen=True, slots=True)
class DeviceClassMapping:
    name: str
    device_class_names: tuple[str, ...]
    sources: tuple[DeviceClassSource, ...] = ()

    @property
    def counts_devices(self) -> bool:
        """True when quota is charged per device (no counter/capacity sources), the extender's model."""
        return not self.sources

    @property
    def counter_names(self) -> frozenset[str]:
        return frozenset(s.name for s in self.sources if s.kind is DeviceClassSourceKind.COUNTER)


@dataclass(frozen=True, slots=True)
class DeviceClassMappings:
    mappings: tuple[DeviceClassMapping, ...] = ()

    def resource_for_class(self, class_name: str) -> str | None:
        """The quota resource for a DeviceClass; the first mapping listing it wins, as in Kueue's mapper."""
        for mapping in self.mappings:
            if class_name in mapping.device_class_names:
                return mapping.name
        return None

    def mapping_for_class(self, class_name: str) -> DeviceClassMapping | None:
        for mapping in self.mappings:
            if class_name in mapping.device_class_names:
                return mapping
        return None

    @property
    def resource_names(self) -> tuple[str, ...]:
        return tuple(mapping.name for mapping in self.mappings)

    @property
    def class_names(self) -> frozenset[str]:
        return frozenset(name for mapping in self.mappings for name in mapping.device_class_names)

    def __len__(self) -> int:
        return len(self.mappings)


def _parse_sources(mapping: Mapping[str, Any], path: str) -> tuple[DeviceClassSource, ...]:
    sources = []
    kinds = set()
    for source_path, source in map_items(mapping, "sources", path):
        present = [kind for kind in DeviceClassSourceKind if source.get(kind.value) is not None]
        if len(present) != 1:
            message = "exactly one source type must be set per entry (counter or capacity)"
            raise ObjectError(source_path, message)
        kind = present[0]
        detail = get_map(source, kind.value, source_path)
        detail_path = child_path(source_path, kind.value)
        selector = get_map(detail, "deviceSelector", detail_path)
        selector_path = child_path(detail_path, "deviceSelector")
        cel = get_map(selector, "cel", selector_path)
        sources.append(
            DeviceClassSource(
                kind=kind,
                name=get_str(detail, "name", detail_path, required=True),
                driver=get_str(detail, "driver", detail_path, required=True),
                device_selector=get_str(cel, "expression", child_path(selector_path, "cel")),
            )
        )
        kinds.add(kind)
    if len(kinds) > 1:
        message = "cannot mix counter and capacity sources in the same mapping"
        raise ObjectError(child_path(path, "sources"), message)
    return tuple(sources)


def parse_device_class_mappings(config: Mapping[str, Any]) -> DeviceClassMappings:
    """Read and validate `resources.deviceClassMappings` of a Kueue Configuration document.

    Validation follows Kueue's validateDeviceClassMappings so that a configuration Kueue would refuse to
    start with is refused here too, rather than silently charging quota differently from Kueue.
    """
    if not isinstance(config, Mapping):
        raise ObjectError("", f"must be an object, got {type_name(config)}")
    kind = get_str(config, "kind", "")
    if kind and kind != "Configuration":
        raise ObjectError("kind", f"expected Configuration, got {kind!r}")
    api_version = get_str(config, "apiVersion", "")
    if api_version and api_version not in CONFIG_API_VERSIONS:
        raise ObjectError(
            "apiVersion", f"unsupported {api_version!r}; expected one of {', '.join(CONFIG_API_VERSIONS)}"
        )
    path = "resources.deviceClassMappings"
    raw_mappings = list(map_items(get_map(config, "resources", ""), "deviceClassMappings", "resources"))
    if len(raw_mappings) > MAX_DEVICE_CLASS_MAPPINGS:
        raise ObjectError(path, f"must have at most {MAX_DEVICE_CLASS_MAPPINGS} mappings, got {len(raw_mappings)}")
    mappings = []
    seen_names: set[str] = set()
    class_owner: dict[str, str] = {}
    class_counters: dict[str, set[str]] = {}
    for mapping_path, raw in raw_mappings:
        name = get_str(raw, "name", mapping_path, required=True)
        problem = _qualified_name_problem(name)
        if problem is None and len(name) > 253:
            problem = "must not exceed 253 characters"
        if problem:
            raise ObjectError(child_path(mapping_path, "name"), f"invalid resource name {name!r}: {problem}")
        if name in seen_names:
            raise ObjectError(child_path(mapping_path, "name"), f"duplicate mapping name {name!r}")
        seen_names.add(name)
        classes = get_str_list(raw, "deviceClassNames", mapping_path, required=True)
        classes_path = child_path(mapping_path, "deviceClassNames")
        if not classes:
            raise ObjectError(classes_path, "at least one device class name is required")
        if len(classes) > MAX_DEVICE_CLASSES_PER_MAPPING:
            raise ObjectError(
                classes_path,
                f"must have at most {MAX_DEVICE_CLASSES_PER_MAPPING} device class names, got {len(classes)}",
            )
        sources = _parse_sources(raw, mapping_path) if api_version != CONFIG_API_VERSIONS[1] else ()
        # Kueue keys the exception below on the mapping's first source, when that source is a counter.
        counter = sources[0].name if sources and sources[0].kind is DeviceClassSourceKind.COUNTER else ""
        seen_here: set[str] = set()
        for index, class_name in enumerate(classes):
            class_path = child_path(classes_path, index)
            problem = _qualified_name_problem(class_name)
            if problem is None and len(class_name) > 253:
                problem = "must not exceed 253 characters"
            if problem:
                raise ObjectError(class_path, f"invalid device class name {class_name!r}: {problem}")
            if class_name in seen_here:
                raise ObjectError(class_path, f"duplicate device class {class_name!r}")
            seen_here.add(class_name)
            owner = class_owner.get(class_name)
            if owner is None:
                class_owner[class_name] = name
                class_counters[class_name] = {counter} if counter else set()
                continue
            # Kueue lets one class feed several mappings only when each tracks a different driver counter.
            existing = class_counters[class_name]
            if not counter or not existing:
                message = f"device class {class_name!r} already mapped to resource {owner!r}"
                raise ObjectError(class_path, message)
            if counter in existing:
                message = f"device class {class_name!r} already has a counter source for counter {counter!r}"
                raise ObjectError(class_path, message)
            existing.add(counter)
        mappings.append(DeviceClassMapping(name, classes, sources))
    return DeviceClassMappings(tuple(mappings))


def parse_kueue_configmap(configmap: Mapping[str, Any], key: str = DEFAULT_CONFIGMAP_KEY) -> DeviceClassMappings:
    """deviceClassMappings from Kueue's manager ConfigMap (default kueue-system/kueue-manager-config)."""
    if not isinstance(configmap, Mapping):
        raise ObjectError("", f"must be an object, got {type_name(configmap)}")
    data = get_map(configmap, "data", "", required=True)
    field_path = child_path("data", key)
    if data.get(key) is None:
        raise ObjectError(field_path, "is required")
    text = get_str(data, key, "data")  # present but empty: a Configuration with defaults, no mappings
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ObjectError(field_path, f"is not valid YAML: {exc}") from None
    if document is None:
        return DeviceClassMappings()
    if not isinstance(document, Mapping):
        raise ObjectError(field_path, f"must hold a Configuration object, got {type_name(document)}")
    try:
        return parse_device_class_mappings(document)
    except ObjectError as exc:
        raise ObjectError(f"{field_path}: {exc.field}" if exc.field else field_path, exc.message) from None


# --- what Kueue itself reports about a ClusterQueue -----------------------------------------------------------

FlavorResourceKey = tuple[str, str]  # (flavor, resource)


@dataclass(frozen=True, slots=True)
class KueueQueueStatus:
    """A ClusterQueue's status as Kueue writes it (status.flavorsReservation / flavorsUsage, v1beta1 and v1beta2
    alike: [{name, resources: [{name, total, borrowed}]}]; pkg/controller/core/clusterqueue_controller.go).

    Kept apart from the ClusterQueue model: Kueue rewrites it on every admission, and the quota context (built
    from the spec) must not be rebuilt for that."""

    reservation: Mapping[FlavorResourceKey, Fraction]  # quota reserved for admitted (and reserving) Workloads
    usage: Mapping[FlavorResourceKey, Fraction]  # of those, Workloads that are admitted
    borrowed: Mapping[FlavorResourceKey, Fraction]  # reservation beyond nominal quota
    admitted_workloads: int = 0
    reserving_workloads: int = 0
    pending_workloads: int = 0


def _flavor_totals(status: Mapping[str, Any], key: str) -> tuple[dict[FlavorResourceKey, Fraction], ...]:
    totals: dict[FlavorResourceKey, Fraction] = {}
    borrowed: dict[FlavorResourceKey, Fraction] = {}
    for flavor_path, flavor in map_items(status, key, "status"):
        flavor_name = get_str(flavor, "name", flavor_path, required=True)
        for resource_path, resource in map_items(flavor, "resources", flavor_path):
            resource_key = (flavor_name, get_str(resource, "name", resource_path, required=True))
            totals[resource_key] = _quantity(resource, "total", resource_path) or Fraction(0)
            borrowed[resource_key] = _quantity(resource, "borrowed", resource_path) or Fraction(0)
    return totals, borrowed


def parse_queue_status(obj: Mapping[str, Any]) -> KueueQueueStatus | None:
    """None when the ClusterQueue has no status yet (Kueue not running, or not reconciled it yet)."""
    status = obj.get("status")
    if not isinstance(status, Mapping) or not status:
        return None
    reservation, borrowed = _flavor_totals(status, "flavorsReservation")
    usage, _ = _flavor_totals(status, "flavorsUsage")

    def count(name: str) -> int:
        value = status.get(name, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    return KueueQueueStatus(
        reservation=reservation,
        usage=usage,
        borrowed=borrowed,
        admitted_workloads=count("admittedWorkloads"),
        reserving_workloads=count("reservingWorkloads"),
        pending_workloads=count("pendingWorkloads"),
    )
