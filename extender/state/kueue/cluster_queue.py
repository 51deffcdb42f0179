"""ClusterQueue: quota per flavor, namespace selection, stop policy, flavor fungibility and preemption
(apis/kueue/v1beta2/clusterqueue_types.go)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from extender.state.errors import ObjectError
from extender.state.fields import child_path, get_map, get_optional_str, get_str
from extender.state.kueue.parsing import (
    KUEUE_API_VERSIONS,
    V1BETA1,
    V1BETA2,
    check_kind,
    enum_field,
    object_name,
    optional_enum,
)
from extender.state.kueue.preemption import NO_PREEMPTION, ClusterQueuePreemption, parse_preemption
from extender.state.kueue.quotas import ResourceGroup, ResourceQuota, parse_resource_groups, quota_in
from extender.state.labels import LabelSelector, parse_label_selector


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
    preference = optional_enum(raw, "preference", fungibility_path, FungibilityPreference)
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
    preemption: ClusterQueuePreemption = NO_PREEMPTION
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
        return quota_in(self.resource_groups, flavor, resource)

    @property
    def flavor_names(self) -> tuple[str, ...]:
        return tuple(flavor.name for group in self.resource_groups for flavor in group.flavors)


def parse_cluster_queue(obj: Mapping[str, Any]) -> ClusterQueue:
    api_version = check_kind(obj, "ClusterQueue", KUEUE_API_VERSIONS)
    name = object_name(obj)
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
    groups = parse_resource_groups(
        spec, "spec", has_parent=cohort is not None, owner="cohort", lending_at_most_nominal=True
    )
    return ClusterQueue(
        name=name,
        cohort_name=cohort,
        namespace_selector=selector,
        stop_policy=enum_field(spec, "stopPolicy", "spec", StopPolicy, StopPolicy.NONE),
        resource_groups=groups,
        flavor_fungibility=_parse_fungibility(spec, "spec", allow_v1beta1=api_version != V1BETA2),
        preemption=parse_preemption(spec, "spec"),
        api_version=api_version or V1BETA2,
        uid=get_str(get_map(obj, "metadata", ""), "uid", "metadata"),
    )
