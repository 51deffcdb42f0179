"""Workload: Kueue's unit of admission, its pod sets and the quota its admission reserves
(apis/kueue/v1beta2/workload_types.go)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from extender.state.fields import child_path, get_bool, get_int, get_map, get_optional_int, get_str, map_items
from extender.state.kueue.parsing import (
    KUEUE_API_VERSIONS,
    check_kind,
    frozen_str_map,
    no_entries,
    nonnegative_quantity,
    object_name,
    object_namespace,
)


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
    flavors: Mapping[str, str] = field(default_factory=no_entries)  # resource name -> flavor name
    resource_usage: Mapping[str, Fraction] = field(default_factory=no_entries)
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
    conditions: Mapping[str, bool] = field(default_factory=no_entries)  # condition type -> status is "True"
    pod_set_counts: Mapping[str, int] = field(default_factory=no_entries)  # spec.podSets: name -> count
    reclaimable_pods: Mapping[str, int] = field(default_factory=no_entries)  # status.reclaimablePods
    # spec.priority, which Kueue's webhook fills from the priorityClassRef (WorkloadPriorityClass or
    # PriorityClass); absent means Kueue's default priority 0 (pkg/util/priority Priority).
    priority: int = 0
    created: str = ""  # metadata.creationTimestamp: the queue-order timestamp of LowerOrNewerEqualPriority

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
            quantity = nonnegative_quantity({resource: value}, resource, usage_path, required=True)
            assert quantity is not None
            usage[str(resource)] = quantity
        assignments.append(
            PodSetAssignment(
                name=get_str(assignment, "name", assignment_path, default="main") or "main",
                flavors=frozen_str_map(assignment, "flavors", assignment_path),
                resource_usage=MappingProxyType(usage),
                count=get_optional_int(assignment, "count", assignment_path, minimum=0),
            )
        )
    return Admission(get_str(raw, "clusterQueue", path, required=True), tuple(assignments))


def parse_workload(obj: Mapping[str, Any]) -> Workload:
    check_kind(obj, "Workload", KUEUE_API_VERSIONS)
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
        namespace=object_namespace(obj),
        name=object_name(obj),
        uid=get_str(metadata, "uid", "metadata"),
        queue_name=get_str(spec, "queueName", "spec"),
        admission=_parse_admission(status),
        owners=tuple(owners),
        conditions=MappingProxyType(conditions),
        pod_set_counts=_pod_set_counts(spec, "podSets", "spec"),
        reclaimable_pods=_pod_set_counts(status, "reclaimablePods", "status"),
        priority=get_optional_int(spec, "priority", "spec") or 0,
        created=get_str(metadata, "creationTimestamp", "metadata"),
    )


def _pod_set_counts(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, int]:
    """name -> count of spec.podSets or status.reclaimablePods (Kueue defaults a pod set's name to "main")."""
    counts: dict[str, int] = {}
    for item_path, item in map_items(obj, key, path):
        name = get_str(item, "name", item_path, default="main") or "main"
        counts[name] = get_int(item, "count", item_path, default=1, minimum=0)
    return MappingProxyType(counts)
