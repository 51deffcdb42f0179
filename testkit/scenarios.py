"""Kueue objects and GPU nodes for two-team, two-flavor quota scenarios, built as plain API objects.

Used by the quota tests (through tests/support/scenarios.py, which adds the engine around them) and by the
benchmarks' generated clusters (testkit/clusters.py).
"""

from __future__ import annotations

from typing import Any

import yaml

from testkit import builders as b

RESOURCE = "example.com/gpu"
FLAVOR_LABEL = "example.com/capacity-type"


def flavor(name: str, node_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A ResourceFlavor for the nodes with `node_labels` (default: FLAVOR_LABEL set to the flavor's name)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": {FLAVOR_LABEL: name} if node_labels is None else node_labels},
    }


def cluster_queue(
    name: str,
    quotas: dict[str, dict[str, Any]],
    *,
    cohort: str | None = "pool",
    try_next: bool = False,
    when_can_borrow: str | None = None,
    stop: str | None = None,
    namespace_selector: dict[str, Any] | None = None,
    api_version: str = "kueue.x-k8s.io/v1beta2",
) -> dict[str, Any]:
    flavors = []
    for flavor_name, quota in quotas.items():
        resource = {"name": RESOURCE, "nominalQuota": quota["nominal"]}
        for key in ("borrowingLimit", "lendingLimit"):
            if key in quota:
                resource[key] = quota[key]
        flavors.append({"name": flavor_name, "resources": [resource]})
    spec: dict[str, Any] = {
        "namespaceSelector": {} if namespace_selector is None else namespace_selector,
        "resourceGroups": [{"coveredResources": [RESOURCE], "flavors": flavors}],
    }
    if cohort:
        spec["cohortName" if api_version.endswith("v1beta2") else "cohort"] = cohort
    if when_can_borrow or try_next:
        spec["flavorFungibility"] = {"whenCanBorrow": when_can_borrow or "TryNextFlavor"}
    if stop:
        spec["stopPolicy"] = stop
    return {"apiVersion": api_version, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def cohort(name: str, parent: str | None = None, nominal: dict[str, int] | None = None) -> dict[str, Any]:
    """A Kueue Cohort: a child of `parent` when given, with `nominal` quota of RESOURCE per flavor when given."""
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if nominal:
        flavors = [{"name": f, "resources": [{"name": RESOURCE, "nominalQuota": n}]} for f, n in nominal.items()]
        spec["resourceGroups"] = [{"coveredResources": [RESOURCE], "flavors": flavors}]
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def local_queue(namespace: str, cq: str, name: str = "q") -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cq},
    }


def kueue_config(mappings: dict[str, list[str]] | None = None) -> dict[str, Any]:
    mappings = mappings or {RESOURCE: ["gpu.example.com"]}
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "resources": {"deviceClassMappings": [{"name": k, "deviceClassNames": v} for k, v in mappings.items()]},
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
        "data": {"controller_manager_config.yaml": yaml.safe_dump(config)},
    }


def nodes_in_flavor(flavor_name: str, count: int, gpus: int) -> list[dict[str, Any]]:
    objects = []
    for index in range(count):
        name = f"{flavor_name}-{index}"
        objects.append(b.node(name, {FLAVOR_LABEL: flavor_name}))
        objects.append(b.gpu_slice(name, gpus))
    return objects


def gpu_pod(
    name: str, namespace: str = "team-a", template: str = "two", queue: str | None = "q", **kwargs: Any
) -> dict[str, Any]:
    return b.pod(name, namespace, templates={"gpu": template}, queue=queue, **kwargs)


def templates(namespace: str) -> list[dict[str, Any]]:
    return [
        b.claim_template("one", namespace, [b.exact_request("gpu", 1)]),
        b.claim_template("two", namespace, [b.exact_request("gpu", 2)]),
        b.claim_template("four", namespace, [b.exact_request("gpu", 4)]),
        b.claim_template("all", namespace, [b.exact_request("gpu", mode="All")]),
        b.claim_template(
            "four-or-two",
            namespace,
            [b.first_available_request("gpu", [b.subrequest("four", 4), b.subrequest("two", 2)])],
        ),
    ]
