"""Kueue v0.19.2 quota semantics on the real kube-scheduler: DRA-backed extended resources, a
counter-sourced deviceClassMapping on MIG-shaped devices, and a tainted ResourceFlavor.

Same control plane and fixtures as test_extender_scenarios.py (no Kueue controller runs; the extender reads
Kueue's objects). Kueue's manager ConfigMap is extended with this module's mappings for its duration and
restored afterwards, so the other scenarios keep their single gpu.example.com -> example.com/gpu mapping.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from testkit import scenarios as ts
from testkit.control_plane import DRIVER, pod_manifest, wait_until
from tests.e2e.conftest import ExtenderControlPlane
from tests.e2e.scenarios import (
    KUEUE_CONFIG_KEY,
    KUEUE_CONFIGMAP,
    KUEUE_GROUP,
    KUEUE_NAMESPACE,
    KUEUE_VERSION,
    QUEUE_LABEL,
    QUOTA_EXHAUSTED,
    SCENARIO_LABEL,
    SYNC_TIMEOUT,
    Scenario,
    extender_get,
    extender_post,
    kueue_plane,
    scenario,
)

__all__ = ["kueue_plane", "scenario"]  # fixtures used by this module's tests

pytestmark = pytest.mark.e2e

EXPLICIT = "example.com/xgpu"
MIG_CLASS = "mig.example.com"
XGPU_CLASS = "xgpu.example.com"
IMPLICIT_CLASS = "igpu.example.com"
IMPLICIT = f"deviceclass.resource.kubernetes.io/{IMPLICIT_CLASS}"
MEMORY = "example.com/gpu-memory"
SPOT_TAINT = {"key": "e2e.dra-extender/spot", "value": "true", "effect": "NoSchedule"}
GI = 1024**3


def device_class(name: str, selector: str, extended_name: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": selector}}]}
    if extended_name:
        spec["extendedResourceName"] = extended_name
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def v019_plane(kueue_plane: ExtenderControlPlane) -> Iterator[ExtenderControlPlane]:
    """The Kueue plane plus: DeviceClasses for the extended-resource and MIG scenarios, and a counter mapping
    (gpu-memory from the counter `memory`) for the MIG class in Kueue's ConfigMap."""
    plane = kueue_plane.plane
    url = kueue_plane.extender_url
    # Each class selects only the devices of its own scenario's nodes (by an attribute they alone publish).
    for obj in (
        device_class(XGPU_CLASS, "device.attributes['gpu.example.com'].model == 'XGPU'", EXPLICIT),
        device_class(IMPLICIT_CLASS, "device.attributes['gpu.example.com'].model == 'IGPU'"),
        device_class(MIG_CLASS, "has(device.attributes['gpu.example.com'].profile)"),
    ):
        plane.resource.create_device_class(obj)
    original = plane.core.read_namespaced_config_map(KUEUE_CONFIGMAP, KUEUE_NAMESPACE)
    configuration = yaml.safe_load(original.data[KUEUE_CONFIG_KEY])
    changed = copy.deepcopy(configuration)
    counter = {"name": "memory", "driver": DRIVER, "deviceSelector": {"cel": {"expression": "true"}}}
    changed["resources"]["deviceClassMappings"].append(
        {"name": MEMORY, "deviceClassNames": [MIG_CLASS], "sources": [{"counter": counter}]}
    )
    plane.core.patch_namespaced_config_map(
        KUEUE_CONFIGMAP, KUEUE_NAMESPACE, {"data": {KUEUE_CONFIG_KEY: yaml.safe_dump(changed, sort_keys=False)}}
    )
    wait_until(
        lambda: MEMORY in extender_get(url, "/diagnostics/queues")["deviceClassMappings"],
        timeout=SYNC_TIMEOUT,
        message="the extender to read the counter mapping",
    )
    try:
        yield kueue_plane
    finally:
        plane.core.patch_namespaced_config_map(
            KUEUE_CONFIGMAP,
            KUEUE_NAMESPACE,
            {"data": {KUEUE_CONFIG_KEY: yaml.safe_dump(configuration, sort_keys=False)}},
        )
        for name in (XGPU_CLASS, IMPLICIT_CLASS, MIG_CLASS):
            plane.resource.delete_device_class(name)


# --- helpers -------------------------------------------------------------------------------------------


def add_node(scn: Scenario, suffix: str, devices: list[dict[str, Any]], *, shared=None, labels=None, taints=None):
    name = f"{scn.name}-{suffix}"
    node_labels = {SCENARIO_LABEL: scn.name, **(labels or {})}
    scn.plane.create_node(name, labels=node_labels)
    if taints:
        scn.plane.core.patch_node(name, {"spec": {"taints": taints}})
    # Since 1.36 a slice publishes devices or sharedCounters, not both: a partitionable GPU is a pool of two.
    slices: list[tuple[str, dict[str, Any]]] = [("gpus", {"devices": devices})]
    if shared:
        slices.append(("counters", {"sharedCounters": shared}))
    for suffix_name, body in slices:
        spec = {
            "driver": DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": len(slices)},
            **body,
        }
        scn.plane.resource.create_resource_slice(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{suffix_name}"},
                "spec": spec,
            }
        )
    scn.nodes[name] = node_labels
    return name


def plain_gpus(count: int, model: str) -> list[dict[str, Any]]:
    return [{"name": f"gpu-{i}", "attributes": {"model": {"string": model}}} for i in range(count)]


def add_flavor(scn: Scenario, name: str, labels: dict[str, str], taints=None) -> str:
    spec: dict[str, Any] = {"nodeLabels": {SCENARIO_LABEL: scn.name, **labels}}
    if taints:
        spec["nodeTaints"] = taints
    scn.plane.custom.create_cluster_custom_object(
        KUEUE_GROUP,
        KUEUE_VERSION,
        "resourceflavors",
        {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
            "kind": "ResourceFlavor",
            "metadata": {"name": name},
            "spec": spec,
        },
    )
    scn.flavors[name] = spec["nodeLabels"]
    return name


def add_queue(scn: Scenario, resource: str, flavors: list[tuple[str, Any]]) -> str:
    """A ClusterQueue covering one resource with (flavor, nominal) in order, and its LocalQueue."""
    body = {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": scn.name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": [resource],
                    "flavors": [{"name": f, "resources": [{"name": resource, "nominalQuota": q}]} for f, q in flavors],
                }
            ],
        },
    }
    scn.plane.custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", body)
    scn.cluster_queues.append(scn.name)
    scn.plane.custom.create_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, scn.namespace, "localqueues", ts.local_queue(scn.namespace, scn.name, scn.name)
    )

    def seen() -> bool:
        for queue in extender_get(scn.url, "/diagnostics/queues")["clusterQueues"]:
            if queue["name"] == scn.name:
                return not queue["problem"] and any(r["resource"] == resource for r in queue["resources"])
        return False

    wait_until(seen, timeout=SYNC_TIMEOUT, message=f"the extender to show ClusterQueue {scn.name}")
    return scn.name


def extended_pod(scn: Scenario, name: str, resource: str, count: int = 1) -> dict[str, Any]:
    manifest = pod_manifest(scn.namespace, name, labels={QUEUE_LABEL: scn.name}, scheduler_name=scn.scheduler_name)
    manifest["spec"]["containers"][0]["resources"]["limits"] = {resource: str(count)}
    manifest["spec"]["containers"][0]["resources"]["requests"][resource] = str(count)
    manifest["spec"]["nodeSelector"] = {SCENARIO_LABEL: scn.name}
    return manifest


def claim_pod(scn: Scenario, name: str, template: str, tolerations=None) -> dict[str, Any]:
    manifest = scn.manifest(name, template, scn.name)
    if tolerations:
        manifest["spec"]["tolerations"] = tolerations
    return manifest


def wait_passes(scn: Scenario, manifest: dict[str, Any], expected_nodes: set[str] | None = None) -> dict[str, Any]:
    """Explain until the extender's view holds everything this pod needs (some node, or exactly these, pass)."""
    query = "&".join(f"node={n}" for n in scn.nodes)
    probe = copy.deepcopy(manifest)
    probe["metadata"]["name"] = "probe"

    def passes() -> dict[str, Any] | None:
        decision = extender_post(scn.url, f"/diagnostics/explain?{query}", probe)
        passed = {n["node"] for n in decision["nodes"] if n["passed"]}
        ok = passed == expected_nodes if expected_nodes is not None else bool(passed)
        return decision if ok else None

    return wait_until(passes, timeout=SYNC_TIMEOUT, message=f"the extender to pass {manifest['metadata']['name']}")


def pending_with_quota_reason(scn: Scenario, name: str) -> bool:
    return any(QUOTA_EXHAUSTED in m for m in scn.failed_scheduling().get(name, []))


def run_to_quota(scn: Scenario, manifests: list[dict[str, Any]], bound_expected: int) -> None:
    """Create the pods one at a time (each bound before the next, or the last ones refused): exactly
    `bound_expected` bind, the rest stay Pending with the extender's quota reason."""
    for manifest in manifests[:bound_expected]:
        scn.plane.create_pod(manifest)
        scn.wait_bound(manifest["metadata"]["name"])
    for manifest in manifests[bound_expected:]:
        scn.plane.create_pod(manifest)
    rest = [m["metadata"]["name"] for m in manifests[bound_expected:]]
    wait_until(
        lambda: all(pending_with_quota_reason(scn, n) for n in rest),
        timeout=60.0,
        message=f"{rest} to be refused for quota",
    )
    bound = scn.bound()
    assert len(bound) == bound_expected, bound
    assert not set(rest) & set(bound)


# --- scenarios -----------------------------------------------------------------------------------------


def test_extended_resource_explicit_name_stops_at_quota(v019_plane: ExtenderControlPlane, scenario: Scenario):
    """Three pods each asking 1 example.com/xgpu (a DeviceClass's extendedResourceName) against quota 2, four
    devices: two bind, the kube-scheduler's extended-resource claim is allocated, the third is refused."""
    node = add_node(scenario, "n", plain_gpus(4, "XGPU"))
    flavor = add_flavor(scenario, f"{scenario.name}-f", {})
    add_queue(scenario, EXPLICIT, [(flavor, 2)])
    pods = [extended_pod(scenario, f"x-{i}", EXPLICIT) for i in range(3)]
    wait_passes(scenario, pods[0], {node})
    run_to_quota(scenario, pods, 2)
    for name in ("x-0", "x-1"):
        pod = scenario.plane.core.read_namespaced_pod(name, scenario.namespace)
        status = pod.status.extended_resource_claim_status
        assert status is not None and status.resource_claim_name, f"{name}: no extended resource claim"
        claim = scenario.plane.resource.read_namespaced_resource_claim(status.resource_claim_name, scenario.namespace)
        assert claim.metadata.annotations.get("resource.kubernetes.io/extended-resource-claim") == "true"
        (result,) = claim.status.allocation.devices.results
        # The extender's diagnostics show the scheduler's claim like any other, with the device it predicted.
        diagnostics = extender_get(scenario.url, f"/diagnostics/pods/{scenario.namespace}/{name}")
        (verdict,) = [v for v in diagnostics["nodes"] if v["node"] == node]
        (device,) = verdict["devices"]
        assert device["claim"] == f"extended resources (1 {EXPLICIT})"
        assert device["device"] == f"{result.driver}/{result.pool}/{result.device}"
    wait_until(
        lambda: _usage(scenario, EXPLICIT) == {flavor: 2},
        timeout=SYNC_TIMEOUT,
        message="usage of 2 from the scheduler's extended-resource claims",
    )


def test_extended_resource_implicit_name_stops_at_quota(v019_plane: ExtenderControlPlane, scenario: Scenario):
    node = add_node(scenario, "n", plain_gpus(3, "IGPU"))
    flavor = add_flavor(scenario, f"{scenario.name}-f", {})
    add_queue(scenario, IMPLICIT, [(flavor, 1)])
    pods = [extended_pod(scenario, f"i-{i}", IMPLICIT) for i in range(2)]
    wait_passes(scenario, pods[0], {node})
    run_to_quota(scenario, pods, 1)


def test_mig_counter_mapping_stops_at_the_counter_quota(v019_plane: ExtenderControlPlane, scenario: Scenario):
    """Four 10Gi MIG partitions sharing 40Gi of one GPU; quota 20Gi of gpu-memory (a counter source): two
    pods bind although devices and counters are left for two more."""

    def mig(i: int) -> dict[str, Any]:
        return {
            "name": f"gpu-0-mig-{i}",
            "attributes": {"profile": {"string": "1g.10gb"}},
            "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "10Gi"}}}],
        }

    node = add_node(
        scenario,
        "n",
        [mig(i) for i in range(4)],
        shared=[{"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}],
    )
    flavor = add_flavor(scenario, f"{scenario.name}-f", {})
    add_queue(scenario, MEMORY, [(flavor, "20Gi")])
    scenario.add_template(
        "mig", [{"name": "gpu", "exactly": {"deviceClassName": MIG_CLASS, "allocationMode": "ExactCount", "count": 1}}]
    )
    pods = [claim_pod(scenario, f"m-{i}", "mig") for i in range(3)]
    decision = wait_passes(scenario, pods[0], {node})
    assert decision["quota"]["reservation"][0]["resource"] == MEMORY
    assert decision["quota"]["reservation"][0]["amount"] == 10 * GI
    run_to_quota(scenario, pods, 2)
    wait_until(
        lambda: _usage(scenario, MEMORY) == {flavor: 20 * GI},
        timeout=SYNC_TIMEOUT,
        message="usage of 20Gi from the allocated partitions' counters",
    )


def test_tainted_flavor_skipped_without_toleration_used_with_it(v019_plane: ExtenderControlPlane, scenario: Scenario):
    """Flavors spot (nodeTaints) then on-demand: a pod without the toleration goes to on-demand (before, the
    extender passed only spot nodes and the pod stayed Pending), one with it to spot."""
    spot = add_node(scenario, "spot", plain_gpus(2, "LATEST-GPU-MODEL"), labels={"pool": "spot"}, taints=[SPOT_TAINT])
    on_demand = add_node(scenario, "od", plain_gpus(2, "LATEST-GPU-MODEL"), labels={"pool": "od"})
    spot_flavor = add_flavor(scenario, f"{scenario.name}-spot", {"pool": "spot"}, taints=[SPOT_TAINT])
    od_flavor = add_flavor(scenario, f"{scenario.name}-od", {"pool": "od"})
    add_queue(scenario, "example.com/gpu", [(spot_flavor, 4), (od_flavor, 4)])
    scenario.add_template("one", [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 1}}])
    toleration = {"key": SPOT_TAINT["key"], "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    plain = claim_pod(scenario, "plain", "one")
    tolerating = claim_pod(scenario, "tolerating", "one", tolerations=[toleration])
    wait_passes(scenario, plain, {on_demand})
    wait_passes(scenario, tolerating, {spot})
    scenario.plane.create_pod(plain)
    assert scenario.wait_bound("plain") == on_demand
    scenario.plane.create_pod(tolerating)
    assert scenario.wait_bound("tolerating") == spot


def _usage(scn: Scenario, resource: str) -> dict[str, int]:
    for queue in extender_get(scn.url, "/diagnostics/queues")["clusterQueues"]:
        if queue["name"] == scn.name:
            return {r["flavor"]: r["usage"] for r in queue["resources"] if r["resource"] == resource and r["usage"]}
    return {}
