"""Which API kinds the extender reads, and how each is parsed and keyed.

One table serves the snapshot loader, the live watchers and the snapshot writer, so that adding a kind is one
entry here rather than three parallel edits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from extender.state.core import parse_config_map, parse_namespace, parse_node, parse_pod
from extender.state.dra.claims import parse_resource_claim, parse_resource_claim_template
from extender.state.dra.device_class import parse_device_class
from extender.state.dra.devices import parse_resource_slice
from extender.state.dra.taint_rules import parse_device_taint_rule
from extender.state.errors import ObjectError
from extender.state.fields import type_name
from extender.state.kueue.cluster_queue import parse_cluster_queue
from extender.state.kueue.cohort import parse_cohort
from extender.state.kueue.local_queue import parse_local_queue
from extender.state.kueue.parsing import KUEUE_GROUP
from extender.state.kueue.resource_flavor import parse_resource_flavor
from extender.state.kueue.workload import parse_workload
from extender.state.podgroups.podgroup import (
    SCHEDULING_GROUP,
    parse_composite_pod_group,
    parse_pod_group,
    parse_scheduling_workload,
)


@dataclass(frozen=True, slots=True)
class KindInfo:
    kind: str
    group: str  # "" for the core group
    versions: tuple[str, ...]  # served versions we understand, preferred first
    plural: str
    namespaced: bool
    parse: Callable[[Mapping[str, Any]], Any]
    api_kind: str = ""  # the kind as the API spells it, when `kind` must differ (two groups' Workload)

    @property
    def wire_kind(self) -> str:
        return self.api_kind or self.kind


RESOURCE_GROUP = "resource.k8s.io"
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
# Workload-aware scheduling is served at v1beta1 in 1.37 (with --runtime-config; GenericWorkload gate)
SCHEDULING_VERSIONS = ("v1beta1",)
COMPOSITE_VERSIONS = ("v1alpha3",)  # CompositePodGroup is alpha in 1.37 (gate CompositePodGroup)

KINDS: tuple[KindInfo, ...] = (
    KindInfo("Node", "", ("v1",), "nodes", False, parse_node),
    KindInfo("Namespace", "", ("v1",), "namespaces", False, parse_namespace),
    KindInfo("Pod", "", ("v1",), "pods", True, parse_pod),
    KindInfo("ConfigMap", "", ("v1",), "configmaps", True, parse_config_map),
    KindInfo("ResourceSlice", RESOURCE_GROUP, DRA_VERSIONS, "resourceslices", False, parse_resource_slice),
    KindInfo("DeviceClass", RESOURCE_GROUP, DRA_VERSIONS, "deviceclasses", False, parse_device_class),
    KindInfo(
        "DeviceTaintRule",
        RESOURCE_GROUP,
        ("v1", "v1beta2", "v1alpha3"),
        "devicetaintrules",
        False,
        parse_device_taint_rule,
    ),
    KindInfo("ResourceClaim", RESOURCE_GROUP, DRA_VERSIONS, "resourceclaims", True, parse_resource_claim),
    KindInfo(
        "ResourceClaimTemplate",
        RESOURCE_GROUP,
        DRA_VERSIONS,
        "resourceclaimtemplates",
        True,
        parse_resource_claim_template,
    ),
    KindInfo("ClusterQueue", KUEUE_GROUP, KUEUE_VERSIONS, "clusterqueues", False, parse_cluster_queue),
    KindInfo("Cohort", KUEUE_GROUP, KUEUE_VERSIONS, "cohorts", False, parse_cohort),
    KindInfo("LocalQueue", KUEUE_GROUP, KUEUE_VERSIONS, "localqueues", True, parse_local_queue),
    KindInfo("ResourceFlavor", KUEUE_GROUP, KUEUE_VERSIONS, "resourceflavors", False, parse_resource_flavor),
    KindInfo("Workload", KUEUE_GROUP, KUEUE_VERSIONS, "workloads", True, parse_workload),
    KindInfo("PodGroup", SCHEDULING_GROUP, SCHEDULING_VERSIONS, "podgroups", True, parse_pod_group),
    KindInfo(
        "CompositePodGroup",
        SCHEDULING_GROUP,
        COMPOSITE_VERSIONS,
        "compositepodgroups",
        True,
        parse_composite_pod_group,
    ),
    KindInfo(
        "SchedulingWorkload",
        SCHEDULING_GROUP,
        SCHEDULING_VERSIONS,
        "workloads",
        True,
        parse_scheduling_workload,
        api_kind="Workload",
    ),
)

KINDS_BY_NAME: Mapping[str, KindInfo] = {info.kind: info for info in KINDS}
_BY_WIRE_KIND: Mapping[tuple[str, str], KindInfo] = {(info.wire_kind, info.group): info for info in KINDS}


def kind_of_document(kind: str, api_version: str) -> KindInfo | None:
    """The kind a document of `kind` at `api_version` is read as: Workload is Kueue's or scheduling.k8s.io's."""
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    return _BY_WIRE_KIND.get((kind, group)) or KINDS_BY_NAME.get(kind)


def object_key(info: KindInfo, obj: Mapping[str, Any]) -> str:
    """'namespace/name' for namespaced kinds, 'name' otherwise; the key every index uses."""
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise ObjectError("metadata", f"must be an object, got {type_name(meta)}")
    name = meta.get("name", "")
    if info.namespaced:
        return f"{meta.get('namespace') or 'default'}/{name}"
    return str(name)
