"""The DRA example driver's own demo specs (../shared/examples/dra-example-driver), decided against slices
shaped like the ones that driver publishes: the allocator must do with them what the real cluster does."""

from __future__ import annotations

import os
from typing import Any

import pytest
import yaml

from extender.decisions.devices.feasibility import device_outcomes
from extender.decisions.devices.pod_claims import resolve_pod_claims
from extender.decisions.devices.results import Allocation, NotAllocatable
from extender.decisions.devices.selection import DeviceMatcher
from extender.state.core import parse_pod
from extender.state.store import ClusterStore
from testkit import builders as b
from tests.support.paths import SHARED

EXAMPLES = SHARED / "examples" / "dra-example-driver"

if not EXAMPLES.is_dir():
    if os.environ.get("CI", "").lower() == "true":
        raise RuntimeError(f"CI=true and the example driver specs are missing: {EXAMPLES}")
    pytest.skip(f"example driver specs not found at {EXAMPLES}", allow_module_level=True)


def spec_documents(name: str) -> list[dict[str, Any]]:
    documents = []
    for path in sorted((EXAMPLES / name).glob("*.yaml")):
        documents += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return documents


def cluster_with(
    spec: str,
    nodes: dict[str, int] | None = None,
    *,
    devices: dict[str, list] | None = None,
    extra: list[dict[str, Any]] | None = None,
) -> tuple[ClusterStore, list[dict[str, Any]]]:
    """The spec's objects (pods kept aside) plus nodes with example-driver GPUs and its DeviceClass."""
    store = ClusterStore()
    pods = []
    for document in spec_documents(spec):
        if document["kind"] == "Pod":
            pods.append(document)
        elif document["kind"] in ("Namespace", "ResourceClaim", "ResourceClaimTemplate"):
            store.apply(document["kind"], "ADDED", document)
    for node_name, count in (nodes or {"node-a": 2}).items():
        store.apply("Node", "ADDED", b.node(node_name))
        node_devices = (devices or {}).get(node_name)
        store.apply("ResourceSlice", "ADDED", b.gpu_slice(node_name, count, devices=node_devices))
    store.apply("DeviceClass", "ADDED", b.device_class())
    for obj in extra or []:
        store.apply(obj["kind"], "ADDED", obj)
    return store, pods


def decide(store: ClusterStore, pod_obj: dict[str, Any], nodes: tuple[str, ...] = ("node-a",)) -> dict:
    snapshot = store.snapshot()
    pod = parse_pod(pod_obj)
    return device_outcomes(snapshot, resolve_pod_claims(snapshot, pod), nodes, DeviceMatcher()).by_node(nodes)


def chosen(outcome: Any) -> list[tuple[str, str]]:
    assert isinstance(outcome, Allocation), outcome
    return [(c.request, c.device.name) for claim in outcome.claims for c in claim.devices]


def pod_named(pods: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(p for p in pods if p["metadata"]["name"] == name)


def test_basic_resourceclaimtemplate_one_gpu_each():
    store, pods = cluster_with("basic-resourceclaimtemplate", {"node-a": 2})
    assert chosen(decide(store, pods[0])["node-a"]) == [("gpu", "gpu-0")]
    # once pod0's claim holds gpu-0, pod1 gets the other GPU; with both held it waits (resolvable)
    template = pods[0]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    namespace = pods[0]["metadata"]["namespace"]
    store.apply(
        "ResourceClaim",
        "ADDED",
        b.claim("pod0-gpu", namespace, [b.exact_request("gpu")], allocated=[("gpu", "node-a", "gpu-0")]),
    )
    assert chosen(decide(store, pods[1])["node-a"]) == [("gpu", "gpu-1")]
    store.apply(
        "ResourceClaim",
        "ADDED",
        b.claim("pod1-gpu", namespace, [b.exact_request("gpu")], allocated=[("gpu", "node-a", "gpu-1")]),
    )
    third = dict(pods[1], metadata={**pods[1]["metadata"], "name": "pod2"})
    outcome = decide(store, third)["node-a"]
    assert isinstance(outcome, NotAllocatable) and not outcome.unresolvable, template


def test_basic_multiple_requests_take_distinct_gpus():
    store, pods = cluster_with("basic-multiple-requests", {"node-a": 2, "node-b": 1})
    outcomes = decide(store, pods[0], ("node-a", "node-b"))
    assert chosen(outcomes["node-a"]) == [("gpu-1", "gpu-0"), ("gpu-2", "gpu-1")]
    assert isinstance(outcomes["node-b"], NotAllocatable)


def test_cel_selector_model_and_memory():
    small = [b.gpu_device(0, memory="2Gi"), b.gpu_device(1, model="OLD-GPU")]
    store, pods = cluster_with("cel-selector", {"node-a": 2, "node-b": 2}, devices={"node-b": small})
    outcomes = decide(store, pods[0], ("node-a", "node-b"))
    assert chosen(outcomes["node-a"]) == [("gpu", "gpu-0")]
    refused = outcomes["node-b"]
    assert isinstance(refused, NotAllocatable) and refused.unresolvable and refused.matching == 0


def test_shared_claim_across_pods_is_allocated_once_and_pins_the_node():
    store, pods = cluster_with("basic-shared-claim-across-pods", {"node-a": 1, "node-b": 1})
    first = decide(store, pod_named(pods, "pod0"), ("node-a", "node-b"))
    assert chosen(first["node-a"]) == [("gpu", "gpu-0")] and chosen(first["node-b"]) == [("gpu", "gpu-0")]
    namespace = pods[0]["metadata"]["namespace"]
    store.apply(
        "ResourceClaim",
        "MODIFIED",
        b.claim(
            "single-gpu",
            namespace,
            [b.exact_request("gpu")],
            allocated=[("gpu", "node-a", "gpu-0")],
            allocated_node="node-a",
            reserved_for=[("pod0", "u0")],
        ),
    )
    second = decide(store, pod_named(pods, "pod1"), ("node-a", "node-b"))
    assert isinstance(second["node-a"], Allocation) and second["node-a"].device_count == 0  # shares, takes nothing
    assert isinstance(second["node-b"], NotAllocatable) and second["node-b"].unresolvable


def test_admin_access_reaches_devices_others_hold():
    admin_namespace = b.namespace("admin-access", {"resource.kubernetes.io/admin-access": "true"})
    held = b.claim(
        "busy", "other", [b.exact_request("gpu", 2)], allocated=[("gpu", "node-a", "gpu-0"), ("gpu", "node-a", "gpu-1")]
    )
    store, pods = cluster_with("admin-access", {"node-a": 2}, extra=[admin_namespace, held])
    outcome = decide(store, pods[0])["node-a"]
    assert sorted(name for _, name in chosen(outcome)) == ["gpu-0", "gpu-1"]
    assert outcome.devices_by_class() == {}  # adminAccess takes nothing from anyone


def test_device_taints_and_tolerations():
    taint = {"key": "gpu.example.com/unhealthy", "value": "true", "effect": "NoExecute"}
    tainted = [b.gpu_device(0, taints=[taint]), b.gpu_device(1, taints=[taint])]
    store, pods = cluster_with(
        "device-taints-tolerations/device-taint-pod-toleration", {"node-a": 2}, devices={"node-a": tainted}
    )
    with_toleration = pod_named(pods, "pod-with-toleration")
    without = pod_named(pods, "pod-without-toleration")
    assert chosen(decide(store, with_toleration)["node-a"]) == [("gpu", "gpu-0")]
    refused = decide(store, without)["node-a"]
    assert isinstance(refused, NotAllocatable) and refused.matching == 2 and refused.free == 0


def test_prioritized_alternatives_fallback_and_preference():
    store, pods = cluster_with("prioritized-alternatives", {"node-a": 2})
    fallback = decide(store, pod_named(pods, "pod0"))["node-a"]
    assert chosen(fallback) == [("gpu/older-gpu", "gpu-0")]
    assert fallback.alternative_rank == 2
    preferred = decide(store, pod_named(pods, "pod1"))["node-a"]
    assert [request for request, _ in chosen(preferred)] == ["gpu/latest-gpu"]
    assert preferred.alternative_rank == 0


def test_partitionable_devices_share_one_gpu_memory():
    counters = [{"name": "gpu-0-counter-set", "counters": {"memory": {"value": "80Gi"}}}]

    def partition(name: str, memory: str) -> dict[str, Any]:
        device = b.gpu_device(0, name=name, memory=memory)
        device["consumesCounters"] = [{"counterSet": "gpu-0-counter-set", "counters": {"memory": {"value": memory}}}]
        return device

    partitions = [partition("gpu-0", "80Gi"), partition("gpu-0-part-0", "40Gi"), partition("gpu-0-part-1", "40Gi")]
    store = ClusterStore()
    for document in spec_documents("partitionable-devices"):
        if document["kind"] != "Pod":
            store.apply(document["kind"], "ADDED", document)
    pods = [d for d in spec_documents("partitionable-devices") if d["kind"] == "Pod"]
    store.apply("Node", "ADDED", b.node("node-a"))
    store.apply("DeviceClass", "ADDED", b.device_class())
    store.apply("ResourceSlice", "ADDED", b.gpu_slice("node-a", 0, devices=partitions, shared_counters=counters))
    outcome = decide(store, pods[0])["node-a"]
    assert sorted(name for _, name in chosen(outcome)) == ["gpu-0-part-0", "gpu-0-part-1"]


def test_device_taint_rule_from_the_spec_taints_the_drivers_devices():
    """The spec's DeviceTaintRule (driver gpu.example.com, NoExecute) applies like a device's own taint."""
    store = ClusterStore()
    pods = []
    for document in spec_documents("device-taints-tolerations/device-taint-pod-toleration"):
        if document["kind"] == "Pod":
            pods.append(document)
        else:
            store.apply(document["kind"], "ADDED", document)
    store.apply("Node", "ADDED", b.node("node-a"))
    store.apply("ResourceSlice", "ADDED", b.gpu_slice("node-a", 2))
    store.apply("DeviceClass", "ADDED", b.device_class())
    refused = decide(store, pod_named(pods, "pod-without-toleration"))["node-a"]
    assert isinstance(refused, NotAllocatable) and refused.free == 0
    assert chosen(decide(store, pod_named(pods, "pod-with-toleration"))["node-a"]) == [("gpu", "gpu-0")]
    rule = next(
        d
        for d in spec_documents("device-taints-tolerations/device-taint-pod-toleration")
        if d["kind"] == "DeviceTaintRule"
    )
    store.apply("DeviceTaintRule", "DELETED", rule)
    assert chosen(decide(store, pod_named(pods, "pod-without-toleration"))["node-a"]) == [("gpu", "gpu-0")]
