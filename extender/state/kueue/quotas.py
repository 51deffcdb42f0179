"""resourceGroups: the quota of each flavor and resource, shared by ClusterQueue and Cohort (Kueue's ResourceGroup,
FlavorQuotas and ResourceQuota, apis/kueue/v1beta2/clusterqueue_types.go)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from extender.state.errors import ObjectError
from extender.state.fields import child_path, get_str, get_str_list, map_items
from extender.state.kueue.parsing import nonnegative_quantity
from extender.state.quantity import format_quantity


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


def parse_resource_groups(
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
                nominal = nonnegative_quantity(quota, "nominalQuota", quota_path, required=True)
                assert nominal is not None
                borrowing = nonnegative_quantity(quota, "borrowingLimit", quota_path)
                lending = nonnegative_quantity(quota, "lendingLimit", quota_path)
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


def quota_in(groups: tuple[ResourceGroup, ...], flavor: str, resource: str) -> ResourceQuota | None:
    """The quota of one resource in one flavor, found in the group covering the resource; None when no group
    covers it or that group does not list the flavor."""
    for group in groups:
        if resource not in group.covered_resources:
            continue
        for flavor_quotas in group.flavors:
            if flavor_quotas.name == flavor:
                return flavor_quotas.resource(resource)
        return None
    return None
