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


@dataclass(frozen=True, slots=True)
class KindInfo:
    kind: str
    group: str  # "" for the core group
    versions: tuple[str, ...]  # served versions we understand, preferred first
    plural: str
    namespaced: bool
    parse: Callable[[Mapping[str, Any]], Any]


RESOURCE_GROUP = "resource.k8s.io"
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")
KUEUE_VERSIONS = ("v1beta2", "v1beta1")

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
)

KINDS_BY_NAME: Mapping[str, KindInfo] = {info.kind: info for info in KINDS}


def object_key(info: KindInfo, obj: Mapping[str, Any]) -> str:
    """'namespace/name' for namespaced kinds, 'name' otherwise; the key every index uses."""
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise ObjectError("metadata", f"must be an object, got {type_name(meta)}")
    name = meta.get("name", "")
    if info.namespaced:
        return f"{meta.get('namespace') or 'default'}/{name}"
    return str(name)
