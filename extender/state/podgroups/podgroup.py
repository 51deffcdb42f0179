"""PodGroup and Workload of scheduling.k8s.io/v1beta1 (k8s.io/api@v0.37.2 scheduling/v1beta1/types.go).

A PodGroup is the runtime unit kube-scheduler schedules all at once (pkg/scheduler/schedule_one_podgroup.go): a
pod joins one through ``spec.schedulingGroup.podGroupName``; its ``spec.schedulingPolicy`` is ``basic`` (pods
scheduled one by one, no group constraint) or ``gang`` with ``minCount`` (at least minCount pods at once, or
none). With DRAWorkloadResourceClaims its ``spec.resourceClaims`` are claims of the whole group: a template
yields ONE claim, recorded in ``status.resourceClaimStatuses`` and reserved for the PodGroup
(k8s.io/dynamic-resource-allocation@v0.37.2 resourceclaim.BindTo). A Workload holds the templates PodGroups are
made from; the extender reads it for diagnostics only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.state.core import PodClaimRef, parse_claim_refs, parse_claim_statuses, parse_metadata
from extender.state.errors import ObjectError
from extender.state.fields import child_path, get_int, get_map, get_str, map_items

SCHEDULING_GROUP = "scheduling.k8s.io"
POD_GROUPS_RESOURCE = "podgroups"
# kube-scheduler's condition after each group attempt (pkg/apis/scheduling PodGroupInitiallyScheduled)
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
REASON_UNSCHEDULABLE = "Unschedulable"
POLICY_BASIC = "basic"
POLICY_GANG = "gang"


# One entry of PodGroup spec.resourceClaims: the same shape as a pod's (a claim named outright, or a template the
# controller instantiates), so the same type.
GroupClaim = PodClaimRef


@dataclass(frozen=True, slots=True)
class GroupCondition:
    status: str  # "True", "False" or "Unknown"
    reason: str = ""
    message: str = ""
    last_transition: str = ""  # RFC 3339, as the API server wrote it


class _GroupIdentity:
    """What PodGroup and CompositePodGroup say alike: their key, whether all or nothing, their parent's key."""

    __slots__ = ()
    namespace: str
    name: str
    policy: str
    parent: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_gang(self) -> bool:
        return self.policy == POLICY_GANG

    @property
    def parent_key(self) -> str:
        return f"{self.namespace}/{self.parent}" if self.parent else ""


@dataclass(frozen=True, slots=True)
class PodGroup(_GroupIdentity):
    namespace: str
    name: str
    uid: str = ""
    policy: str = POLICY_BASIC
    min_count: int = 1  # gang.minCount; 1 for a basic group (each pod on its own)
    claims: tuple[GroupClaim, ...] = ()
    # status.resourceClaimStatuses: group claim entry name -> generated ResourceClaim name (None: none needed)
    claim_statuses: Mapping[str, str | None] = field(default_factory=dict)
    conditions: Mapping[str, GroupCondition] = field(default_factory=dict)
    workload_name: str = ""  # spec.workloadRef.workloadName
    deleting: bool = False
    # spec.parentCompositePodGroupName (CompositePodGroup, alpha): the composite of the same namespace it is a
    # child of, "" for a group of its own
    parent: str = ""

    def claim_names(self) -> frozenset[str]:
        """The ResourceClaims of the whole group (as resourceclaim.NameFromPodGroup resolves its entries)."""
        names = {ref.claim_name for ref in self.claims if ref.claim_name}
        names.update(name for name in self.claim_statuses.values() if name)
        return frozenset(names)

    def unschedulable_since(self) -> str:
        """The transition time of PodGroupInitiallyScheduled=False (Unschedulable), "" when not so."""
        condition = self.conditions.get(INITIALLY_SCHEDULED)
        if condition is None or condition.status != "False" or condition.reason != REASON_UNSCHEDULABLE:
            return ""
        return condition.last_transition or "unknown"


def _parse_policy(spec: Mapping[str, Any], path: str, count: str = "minCount") -> tuple[str, int]:
    """spec.schedulingPolicy: ("gang", its `count`: minCount of a PodGroup, minGroupCount of a composite) or
    ("basic", 1)."""
    policy = get_map(spec, "schedulingPolicy", path)
    policy_path = child_path(path, "schedulingPolicy")
    gang = policy.get("gang")
    if gang is not None:
        if not isinstance(gang, Mapping):
            raise ObjectError(child_path(policy_path, "gang"), "must be an object")
        if gang.get(count) is None:
            raise ObjectError(child_path(policy_path, f"gang.{count}"), "is required")
        return POLICY_GANG, get_int(gang, count, child_path(policy_path, "gang"), minimum=1)
    return POLICY_BASIC, 1


def parse_pod_group(obj: Mapping[str, Any]) -> PodGroup:
    meta = parse_metadata(obj, namespaced=True)
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    policy, min_count = _parse_policy(spec, "spec")
    claims = parse_claim_refs(spec)
    statuses = parse_claim_statuses(status)
    conditions = {
        get_str(raw, "type", path, required=True): GroupCondition(
            get_str(raw, "status", path),
            get_str(raw, "reason", path),
            get_str(raw, "message", path),
            get_str(raw, "lastTransitionTime", path),
        )
        for path, raw in map_items(status, "conditions", "status")
    }
    return PodGroup(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        policy=policy,
        min_count=min_count,
        claims=tuple(claims),
        claim_statuses=statuses,
        conditions=conditions,
        workload_name=get_str(get_map(spec, "workloadRef", "spec"), "workloadName", "spec.workloadRef"),
        deleting=meta.deleting,
        parent=get_str(spec, "parentCompositePodGroupName", "spec"),
    )


@dataclass(frozen=True, slots=True)
class CompositePodGroup(_GroupIdentity):
    """scheduling.k8s.io/v1alpha3 CompositePodGroup (k8s.io/api@v0.37.2 scheduling/v1alpha3/types.go; gate
    CompositePodGroup): a tree of PodGroups scheduled together. Its children (PodGroups, or composites) name it in
    spec.parentCompositePodGroupName. With a gang policy, at least minGroupCount children must be scheduled,
    each by its own policy, or none (kube-scheduler's compositePodGroupSchedulingAlgorithm, all or nothing);
    with basic, each child on its own."""

    namespace: str
    name: str
    uid: str = ""
    policy: str = POLICY_BASIC
    min_group_count: int = 1
    parent: str = ""  # spec.parentCompositePodGroupName: composites nest
    deleting: bool = False


def parse_composite_pod_group(obj: Mapping[str, Any]) -> CompositePodGroup:
    meta = parse_metadata(obj, namespaced=True)
    spec = get_map(obj, "spec", "")
    policy, min_groups = _parse_policy(spec, "spec", "minGroupCount")
    return CompositePodGroup(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        policy=policy,
        min_group_count=min_groups,
        parent=get_str(spec, "parentCompositePodGroupName", "spec"),
        deleting=meta.deleting,
    )


@dataclass(frozen=True, slots=True)
class GroupTemplate:
    name: str
    policy: str
    min_count: int


@dataclass(frozen=True, slots=True)
class SchedulingWorkload:
    """scheduling.k8s.io Workload (not Kueue's): the PodGroup templates a workload controller instantiates."""

    namespace: str
    name: str
    templates: tuple[GroupTemplate, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_scheduling_workload(obj: Mapping[str, Any]) -> SchedulingWorkload:
    meta = parse_metadata(obj, namespaced=True)
    spec = get_map(obj, "spec", "")
    templates = []
    for path, raw in map_items(spec, "podGroupTemplates", "spec"):
        policy, min_count = _parse_policy(raw, path)
        templates.append(GroupTemplate(get_str(raw, "name", path, required=True), policy, min_count))
    return SchedulingWorkload(meta.namespace, meta.name, tuple(templates))
