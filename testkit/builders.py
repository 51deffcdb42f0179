"""Builders of API objects (plain dicts, as the API server would send them) for tests and benchmarks."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.example.com"
GPU_CLASS = "gpu.example.com"


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def gpu_device(
    index: int,
    *,
    node_name: str = "",
    memory: str = "80Gi",
    model: str = "LATEST-GPU-MODEL",
    extra_attributes: dict[str, Any] | None = None,
    taints: list[dict[str, Any]] | None = None,
    consumes: list[dict[str, Any]] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": name or f"gpu-{index}",
        "attributes": {
            "index": {"int": index},
            "uuid": {"string": f"gpu-{node_name}-{index}"},
            "model": {"string": model},
            "driverVersion": {"version": "1.0.0"},
            **(extra_attributes or {}),
        },
        "capacity": {"memory": {"value": memory}, "compute": {"value": "100"}},
    }
    if taints:
        device["taints"] = taints
    if consumes:
        device["consumesCounters"] = consumes
    return device


def gpu_slice(
    node_name: str,
    count: int = 8,
    *,
    generation: int = 1,
    slice_count: int = 1,
    name: str | None = None,
    devices: list[dict[str, Any]] | None = None,
    driver: str = DRIVER,
    pool: str | None = None,
    shared_counters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "nodeName": node_name,
        "pool": {"name": pool or node_name, "generation": generation, "resourceSliceCount": slice_count},
        "devices": devices if devices is not None else [gpu_device(i, node_name=node_name) for i in range(count)],
    }
    if shared_counters:
        spec["sharedCounters"] = shared_counters
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node_name}-{driver}"},
        "spec": spec,
    }


def device_class(name: str = GPU_CLASS, selectors: list[str] | None = None) -> dict[str, Any]:
    exprs = selectors if selectors is not None else [f"device.driver == '{DRIVER}'"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in exprs]},
    }


def exact_request(
    name: str = "gpu",
    count: int = 1,
    *,
    device_class_name: str = GPU_CLASS,
    selectors: list[str] | None = None,
    mode: str = "ExactCount",
    admin: bool = False,
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class_name, "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if admin:
        exactly["adminAccess"] = True
    if tolerations:
        exactly["tolerations"] = tolerations
    return {"name": name, "exactly": exactly}


def first_available_request(name: str, subrequests: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": subrequests}


def subrequest(
    name: str,
    count: int = 1,
    *,
    device_class_name: str = GPU_CLASS,
    selectors: list[str] | None = None,
    mode: str = "ExactCount",
) -> dict[str, Any]:
    sub: dict[str, Any] = {"name": name, "deviceClassName": device_class_name, "allocationMode": mode}
    if mode == "ExactCount":
        sub["count"] = count
    if selectors:
        sub["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return sub


def claim_spec(requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def claim(
    name: str,
    namespace_name: str,
    requests: list[dict[str, Any]],
    *,
    constraints: list[dict[str, Any]] | None = None,
    allocated: list[tuple[str, str, str]] | None = None,
    allocated_node: str | None = None,
    reserved_for: list[tuple[str, str]] | None = None,
    admin_results: bool = False,
    owner_uid: str = "",
    pod_claim_name: str = "",
    owner_name: str = "x",
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace_name, "uid": f"uid-claim-{namespace_name}-{name}"},
        "spec": claim_spec(requests, constraints),
    }
    if owner_uid:
        obj["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": owner_name, "uid": owner_uid}]
    if pod_claim_name:
        obj["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": pod_claim_name}
    status: dict[str, Any] = {}
    if allocated is not None:
        results = [
            {"request": request, "driver": DRIVER, "pool": pool, "device": device, "adminAccess": admin_results}
            for (request, pool, device) in allocated
        ]
        allocation: dict[str, Any] = {"devices": {"results": results}}
        if allocated_node:
            allocation["nodeSelector"] = {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [allocated_node]}]}
                ]
            }
        status["allocation"] = allocation
    if reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": pod_name, "uid": uid} for pod_name, uid in reserved_for]
    if status:
        obj["status"] = status
    return obj


def claim_template(
    name: str, namespace_name: str, requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace_name},
        "spec": {"spec": claim_spec(requests, constraints)},
    }


def pod(
    name: str,
    namespace_name: str,
    *,
    templates: dict[str, str] | None = None,
    claims: dict[str, str] | None = None,
    queue: str | None = None,
    node_name: str = "",
    phase: str = "",
    uid: str | None = None,
    claim_statuses: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    pod_group: str = "",
    nominated_node: str = "",
) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    resource_claims = [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    resource_claims += [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace_name,
            "uid": uid or f"uid-{namespace_name}-{name}",
            "labels": labels,
            "annotations": annotations or {},
        },
        "spec": {
            "containers": [
                {
                    "name": "ctr",
                    "image": "busybox",
                    "resources": {"claims": [{"name": c["name"]} for c in resource_claims]},
                }
            ],
            "resourceClaims": resource_claims,
        },
        "status": {},
    }
    if node_name:
        obj["spec"]["nodeName"] = node_name
    if pod_group:
        obj["spec"]["schedulingGroup"] = {"podGroupName": pod_group}
    if nominated_node:
        obj["status"]["nominatedNodeName"] = nominated_node
    if phase:
        obj["status"]["phase"] = phase
    if claim_statuses:
        obj["status"]["resourceClaimStatuses"] = [
            {"name": k, "resourceClaimName": v} for k, v in claim_statuses.items()
        ]
    return obj


def workload(
    name: str,
    namespace_name: str,
    cluster_queue: str,
    usage: dict[str, int | str],
    flavor: str,
    *,
    owner_uid: str,
    owner_kind: str = "Job",
    pods: int = 1,
    reclaimable: int = 0,
    quota_reserved: bool = True,
    finished: bool = False,
) -> dict[str, Any]:
    """A Kueue Workload (v1beta2) owned by a Job (or a Pod), admitted with `usage` (the pod set's total
    resourceUsage) in one flavor, as Kueue's scheduler writes status.admission."""
    conditions = [
        {"type": kind, "status": "True", "reason": "Test", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        for kind, on in (("QuotaReserved", quota_reserved), ("Admitted", quota_reserved), ("Finished", finished))
        if on
    ]
    status: dict[str, Any] = {
        "admission": {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {resource: flavor for resource in usage},
                    "resourceUsage": {resource: str(amount) for resource, amount in usage.items()},
                    "count": pods,
                }
            ],
        },
        "conditions": conditions,
    }
    if reclaimable:
        status["reclaimablePods"] = [{"name": "main", "count": reclaimable}]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace_name,
            "uid": f"uid-workload-{namespace_name}-{name}",
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1" if owner_kind == "Job" else "v1",
                    "kind": owner_kind,
                    "name": name,
                    "uid": owner_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "queueName": "q",
            "podSets": [{"name": "main", "count": pods, "template": {"spec": {"containers": []}}}],
        },
        "status": status,
    }


def owned_by(obj: dict[str, Any], owner_uid: str, kind: str = "Job") -> dict[str, Any]:
    """The pod, owned (controller) by a Job or other object with that uid, as the Job controller creates it."""
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": kind, "name": "owner", "uid": owner_uid, "controller": True}
    ]
    return obj


def pod_group(
    name: str,
    namespace_name: str,
    *,
    min_count: int | None = None,
    claim_templates: dict[str, str] | None = None,
    claims: dict[str, str] | None = None,
    claim_statuses: dict[str, str] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    uid: str | None = None,
    parent: str = "",
) -> dict[str, Any]:
    """A scheduling.k8s.io/v1beta1 PodGroup: gang with ``min_count``, else basic; ``parent``: the
    CompositePodGroup it is a child of."""
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    resource_claims = [{"name": k, "resourceClaimTemplateName": v} for k, v in (claim_templates or {}).items()]
    resource_claims += [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
    status: dict[str, Any] = {}
    if claim_statuses:
        status["resourceClaimStatuses"] = [{"name": k, "resourceClaimName": v} for k, v in claim_statuses.items()]
    if conditions:
        status["conditions"] = conditions
    spec: dict[str, Any] = {"schedulingPolicy": policy, "resourceClaims": resource_claims}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace_name, "uid": uid or f"uid-pg-{namespace_name}-{name}"},
        "spec": spec,
        "status": status,
    }


def composite_pod_group(
    name: str, namespace_name: str, *, min_group_count: int | None = None, parent: str = ""
) -> dict[str, Any]:
    """A scheduling.k8s.io/v1alpha3 CompositePodGroup: gang with ``min_group_count``, else basic."""
    policy: dict[str, Any] = {"gang": {"minGroupCount": min_group_count}} if min_group_count else {"basic": {}}
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": namespace_name, "uid": f"uid-cpg-{namespace_name}-{name}"},
        "spec": spec,
    }


def reserved_for_group(obj: dict[str, Any], group_name: str, group_uid: str = "") -> dict[str, Any]:
    """A ResourceClaim reserved for a PodGroup, as kube-scheduler writes it (resourceclaim.BindTo)."""
    obj.setdefault("status", {})["reservedFor"] = [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": group_name, "uid": group_uid}
    ]
    return obj
