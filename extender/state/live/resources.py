"""Which collections to read from this particular API server, and how to list one of them completely.

Clusters differ in what they serve: resource.k8s.io is v1 from Kubernetes 1.34, v1beta2 or v1beta1 before;
Kueue may be absent, or an older release may lack a kind. Discovery runs against the server rather than
assuming, so one extender build works across releases, and a missing kind switches a feature off instead of
failing every request with 404.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.kube.api import ApiError, KubeApi
from extender.kube.paths import path_segment
from extender.state.kinds import KINDS, RESOURCE_GROUP, KindInfo

log = logging.getLogger(__name__)

DEFAULT_KUEUE_CONFIGMAP: tuple[str, str] = ("kueue-system", "kueue-manager-config")
KUEUE_ABSENT_MESSAGE = "Kueue CRDs not found: quota features off; devices still served"
DRA_ABSENT_MESSAGE = "resource.k8s.io is not served: no devices to allocate (is DynamicResourceAllocation enabled?)"


@dataclass(frozen=True, slots=True)
class Resource:
    """One collection the extender lists and watches, at the version this server serves."""

    info: KindInfo
    version: str
    namespace: str = ""  # restrict to one namespace (Kueue's ConfigMap)
    field_selector: str = ""

    @property
    def name(self) -> str:
        return self.info.plural

    @property
    def kind(self) -> str:
        return self.info.kind

    @property
    def api_version(self) -> str:
        return f"{self.info.group}/{self.version}" if self.info.group else self.version

    @property
    def path(self) -> str:
        base = f"/apis/{self.info.group}/{self.version}" if self.info.group else f"/api/{self.version}"
        scope = f"/namespaces/{path_segment(self.namespace)}" if self.namespace else ""
        return f"{base}{scope}/{self.info.plural}"

    def describe(self) -> str:
        selector = f" ({self.field_selector})" if self.field_selector else ""
        scope = f" in {self.namespace}" if self.namespace else ""
        return f"{self.info.plural}.{self.api_version}{scope}{selector}"

    def query(self) -> dict[str, str]:
        return {"fieldSelector": self.field_selector} if self.field_selector else {}


@dataclass(frozen=True, slots=True)
class Discovery:
    resources: Mapping[str, Resource]  # kind -> served collection
    served_versions: Mapping[str, tuple[str, ...]]  # API group -> versions the server serves
    missing: Mapping[str, str] = field(default_factory=dict)  # kind -> why it is not watched

    @property
    def kueue_available(self) -> bool:
        return "ClusterQueue" in self.resources

    @property
    def dra_available(self) -> bool:
        return RESOURCE_GROUP in self.served_versions


def discover(
    api: KubeApi,
    *,
    kueue_configmap: tuple[str, str] = DEFAULT_KUEUE_CONFIGMAP,
    kinds: Iterable[KindInfo] = KINDS,
    read_timeout: float = 30.0,
) -> Discovery:
    """Pick, per kind, the first version we understand that the server serves with list and watch."""
    group_list = api.get_json("/apis", read_timeout=read_timeout)
    served: dict[str, tuple[str, ...]] = {}
    for group in group_list.get("groups") or ():
        versions = tuple(str(v.get("version", "")) for v in group.get("versions") or ())
        served[str(group.get("name", ""))] = versions
    resource_lists: dict[tuple[str, str], dict[str, frozenset[str]]] = {}

    def served_resources(group: str, version: str) -> dict[str, frozenset[str]]:
        if (group, version) not in resource_lists:
            try:
                body = api.get_json(f"/apis/{group}/{version}", read_timeout=read_timeout)
            except ApiError as error:
                if error.status != 404:  # a version can vanish between the two requests (CRD update)
                    raise
                body = {}
            resource_lists[(group, version)] = {
                str(r.get("name", "")): frozenset(r.get("verbs") or ()) for r in body.get("resources") or ()
            }
        return resource_lists[(group, version)]

    resources: dict[str, Resource] = {}
    missing: dict[str, str] = {}
    for info in kinds:
        if not info.group:
            if info.kind == "ConfigMap":
                namespace, name = kueue_configmap
                resources[info.kind] = Resource(info, "v1", namespace, f"metadata.name={name}")
            else:
                resources[info.kind] = Resource(info, info.versions[0])
            continue
        group_versions = served.get(info.group)
        if group_versions is None:
            missing[info.kind] = f"API group {info.group} is not served"
            continue
        for version in info.versions:
            if version not in group_versions:
                continue
            verbs = served_resources(info.group, version).get(info.plural)
            if verbs is not None and {"list", "watch"} <= verbs:
                resources[info.kind] = Resource(info, version)
                break
        else:
            understood = ", ".join(info.versions)
            missing[info.kind] = (
                f"{info.plural}.{info.group} is not served at a version we understand ({understood}); "
                f"the server serves {', '.join(group_versions) or 'no versions'}"
            )
    return Discovery(resources, served, missing)


def normalise_item(resource: Resource, item: dict[str, Any]) -> dict[str, Any]:
    """List items come without apiVersion and kind; version-dependent parsers need them."""
    if "apiVersion" not in item or "kind" not in item:
        item.setdefault("apiVersion", resource.api_version)
        item.setdefault("kind", resource.info.wire_kind)
    return item


def list_objects(
    api: KubeApi, resource: Resource, *, page_size: int = 500, read_timeout: float = 60.0
) -> tuple[list[dict[str, Any]], str]:
    """Every object of the collection and the list's resourceVersion, in pages so no response is huge.

    A continue token can expire mid-way on a busy cluster (410); the list then restarts unpaginated, as
    client-go's pager does, rather than failing the whole relist.
    """
    items: list[dict[str, Any]] = []
    resource_version = ""
    token = ""
    while True:
        query = resource.query()
        if page_size > 0:
            query["limit"] = str(page_size)
        if token:
            query["continue"] = token
        try:
            body = api.get_json(resource.path, query=query, read_timeout=read_timeout)
        except ApiError as error:
            if not (error.gone and token):
                raise
            log.info("continue token for %s expired; listing it in one request", resource.describe())
            body = api.get_json(resource.path, query=resource.query(), read_timeout=read_timeout)
            items = []
            token = ""
        for item in body.get("items") or ():
            if isinstance(item, dict):
                items.append(normalise_item(resource, item))
            else:
                log.warning("skipping a non-object item in the list of %s", resource.describe())
        metadata = body.get("metadata") or {}
        resource_version = str(metadata.get("resourceVersion") or resource_version)
        token = str(metadata.get("continue") or "")
        if not token:
            return items, resource_version
