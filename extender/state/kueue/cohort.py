"""Cohort: a node of the quota tree whose resourceGroups add quota shared by its subtree
(apis/kueue/v1beta2/cohort_types.go)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.state.fields import get_map, get_optional_str
from extender.state.kueue.parsing import KUEUE_API_VERSIONS, V1BETA2, check_kind, object_name
from extender.state.kueue.quotas import ResourceGroup, ResourceQuota, parse_resource_groups, quota_in


@dataclass(frozen=True, slots=True)
class Cohort:
    """An explicit Cohort; its resourceGroups add shared quota to the subtree below it."""

    name: str
    parent_name: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    api_version: str = V1BETA2

    def quota(self, flavor: str, resource: str) -> ResourceQuota | None:
        return quota_in(self.resource_groups, flavor, resource)


def parse_cohort(obj: Mapping[str, Any]) -> Cohort:
    api_version = check_kind(obj, "Cohort", KUEUE_API_VERSIONS)
    name = object_name(obj)
    spec = get_map(obj, "spec", "")
    parent = get_optional_str(spec, "parentName", "spec")
    # Unlike a ClusterQueue, a Cohort's lendingLimit may exceed its own nominalQuota: its subtree lends too.
    groups = parse_resource_groups(
        spec, "spec", has_parent=parent is not None, owner="parent", lending_at_most_nominal=False
    )
    return Cohort(name=name, parent_name=parent, resource_groups=groups, api_version=api_version or V1BETA2)
