"""Consumable capacity and binding conditions on the real kube-scheduler: GPUs shared by capacity
(DRAConsumableCapacity) and devices with binding conditions (DRADeviceBindingConditions), both beta and on by
default in Kubernetes 1.37.

Same control plane and fixtures as test_extender_scenarios.py (kube-scheduler v1.37.2 with its in-tree
DynamicResources plugin calls the extender; no Kueue controller runs, the extender reads Kueue's objects). The
DRA driver is simulated: the tests publish its ResourceSlices and, for binding conditions, write the device
conditions a driver would (ResourceClaim status.devices). The claims are the example driver's own demo specs
(../shared/examples/dra-example-driver: gpu-allow-multiple-allocations, binding-conditions).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.control_plane import DRIVER, wait_until
from tests.e2e.scenarios import (
    QUOTA_EXHAUSTED,
    SCENARIO_LABEL,
    SCHEDULE_TIMEOUT,
    SYNC_TIMEOUT,
    FlavorQuota,
    Scenario,
    extender_get,
    extender_post,
    kueue_plane,
    node_devices,
    queue_rows,
    queue_usage,
    scenario,
)

__all__ = ["kueue_plane", "scenario"]  # fixtures used by this module's tests

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[3] / "shared" / "examples" / "dra-example-driver"
GI = 1024**3


def example_objects(name: str) -> list[dict[str, Any]]:
    """The objects of one of the example driver's demo specs."""
    if not EXAMPLES.is_dir():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and the example driver specs are missing: {EXAMPLES}")
        pytest.skip(f"example driver specs not found at {EXAMPLES}")
    objects: list[dict[str, Any]] = []
    for path in sorted((EXAMPLES / name).glob("*.yaml")):
        objects += [obj for obj in yaml.safe_load_all(path.read_text()) if obj]
    return objects


def example_claim_spec(name: str, kind: str) -> dict[str, Any]:
    """The spec of the first ResourceClaim (or ResourceClaimTemplate) of a demo spec."""
    obj = next(o for o in example_objects(name) if o["kind"] == kind)
    return obj["spec"] if kind == "ResourceClaim" else obj["spec"]["spec"]


def gpu(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"model": {"string": "LATEST-GPU-MODEL"}, "driverVersion": {"version": "1.0.0"}},
        **fields,
    }


def add_node_with(scenario: Scenario, suffix: str, devices: list[dict[str, Any]]) -> str:
    """A node of the scenario whose example-driver slice has exactly `devices`; waits until the extender sees
    them."""
    node = f"{scenario.name}-{suffix}"
    labels = {SCENARIO_LABEL: scenario.name}
    scenario.plane.create_node(node, labels=labels)
    scenario.plane.resource.create_resource_slice(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
    )
    scenario.nodes[node] = labels
    wait_until(
        lambda: node_devices(scenario.url, node) == len(devices),
        timeout=SYNC_TIMEOUT,
        message=f"the extender to see node {node} with {len(devices)} devices",
    )
    return node


def add_template_spec(scenario: Scenario, name: str, spec: dict[str, Any]) -> str:
    scenario.plane.resource.create_namespaced_resource_claim_template(
        scenario.namespace,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": scenario.namespace},
            "spec": {"spec": spec},
        },
    )
    return name


def shared_results(scenario: Scenario, pods: list[str]) -> dict[str, Any]:
    """Pod -> the one allocation result of its claim (allocated and reserved for it)."""
    results = {}
    for pod in pods:
        (claim,) = scenario.claims_of(pod)
        assert claim.status.allocation is not None, f"claim of {pod} not allocated"
        (result,) = claim.status.allocation.devices.results
        assert [r.name for r in claim.status.reserved_for] == [pod]
        results[pod] = result
    return results


def test_pods_share_a_multi_allocatable_gpu_by_capacity_where_the_plugin_puts_them(scenario: Scenario) -> None:
    """Two nodes with one GPU each (allowMultipleAllocations, memory 40Gi in 8Gi steps, compute 100), six pods
    with the example driver's claim (16Gi memory, 20 compute): two fit per GPU by memory, so exactly four bind,
    two per node, each a share (shareID, consumedCapacity 16Gi/20) of its node's GPU; the extender predicted
    that device on the node the in-tree plugin allocated it on, and the two left are refused by both."""
    spec = example_claim_spec("gpu-allow-multiple-allocations", "ResourceClaim")
    assert spec["devices"]["requests"][0]["exactly"]["capacity"]["requests"] == {"memory": "16Gi", "compute": "20"}
    policy = {"default": "8Gi", "validRange": {"min": "8Gi", "max": "40Gi", "step": "8Gi"}}
    shared = gpu(
        "gpu-0",
        allowMultipleAllocations=True,
        capacity={"memory": {"value": "40Gi", "requestPolicy": policy}, "compute": {"value": "100"}},
    )
    nodes = [add_node_with(scenario, f"node-{i}", [shared]) for i in (1, 2)]
    flavor = scenario.add_flavor(f"{scenario.name}-gpus")
    queue = scenario.add_queue(scenario.name, [FlavorQuota(flavor, 10)])  # quota is not what limits here
    add_template_spec(scenario, "shared-gpu", spec)
    scenario.wait_extender_sees("shared-gpu", queue, scenario.name)

    names = [f"pod-{i}" for i in range(6)]
    peak = 0
    for name in names:  # one after the other: each filter sees the shares of the ones before
        scenario.create_pod(name, "shared-gpu", queue)
    deadline = time.monotonic() + SCHEDULE_TIMEOUT
    while True:
        bound = scenario.bound()
        peak = max(peak, len(bound), scenario.allocated_devices())
        failed = scenario.failed_scheduling()
        if len(bound) == 4 and all(name in failed for name in names if name not in bound):
            break
        assert time.monotonic() < deadline, f"bound {bound}, failed {sorted(failed)}"
        time.sleep(0.2)
    assert peak <= 4, f"more than four shares bound or allocated at once: {peak}"
    assert sorted(bound.values()) == sorted(nodes * 2), bound
    results = shared_results(scenario, sorted(bound))
    for pod, result in results.items():
        node = bound[pod]
        assert (result.driver, result.pool, result.device) == (DRIVER, node, "gpu-0")
        assert result.share_id, f"{pod}: not a share"
        consumed = result.consumed_capacity
        assert consumed == {"memory": "16Gi", "compute": "20"}, f"{pod}: consumed {consumed}"
        diagnostics = extender_get(scenario.url, f"/diagnostics/pods/{scenario.namespace}/{pod}")
        verdicts = {v["node"]: v for v in diagnostics["nodes"]}
        assert verdicts[node]["passed"], f"{pod}: the extender did not pass {node}: {verdicts[node]}"
        assert [d["device"] for d in verdicts[node]["devices"]] == [f"{DRIVER}/{node}/gpu-0"]
    assert len({r.share_id for r in results.values()}) == 4
    # Both shares of a GPU together stay within its 40Gi; a third would need 48Gi. The extender says so too
    # (asked now: the in-tree filter refuses the waiting pods before the extender is called).
    pending = [name for name in names if name not in bound]
    query = "&".join(f"node={n}" for n in nodes)
    explained = extender_post(
        scenario.url, f"/diagnostics/explain?{query}", scenario.manifest("probe", "shared-gpu", queue)
    )
    for verdict in explained["nodes"]:
        assert not verdict["passed"] and "capacity" in verdict["reason"], verdict
    # one share per pod is one device of quota, as Kueue's count charge (claims.go countDevicesPerClass)
    wait_until(
        lambda: queue_usage(scenario.url, scenario.name) == {flavor: 4},
        timeout=SYNC_TIMEOUT,
        message="usage 4 (one per share) in the extender",
    )
    # freeing a share lets one of the waiting pods take it, on that GPU
    freed = sorted(bound)[0]
    freed_node = bound[freed]
    scenario.plane.core.delete_namespaced_pod(freed, scenario.namespace, grace_period_seconds=0)
    wait_until(
        lambda: len([p for p in scenario.bound() if p in pending]) == 1,
        timeout=SCHEDULE_TIMEOUT,
        message="a waiting pod to take the freed share",
    )
    (taker,) = [p for p in scenario.bound() if p in pending]
    assert scenario.bound()[taker] == freed_node


def set_device_condition(scenario: Scenario, claim: Any, condition: str) -> None:
    """What the driver does once the device is attached (or failed): a True condition on the allocated
    device's status (ResourceClaim status.devices, DRAResourceClaimDeviceStatus)."""
    (result,) = claim.status.allocation.devices.results
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body = {
        "status": {
            "devices": [
                {
                    "driver": result.driver,
                    "pool": result.pool,
                    "device": result.device,
                    "conditions": [
                        {
                            "type": condition,
                            "status": "True",
                            "reason": "E2E",
                            "message": f"{condition} by the e2e test",
                            "lastTransitionTime": now,
                        }
                    ],
                }
            ]
        }
    }
    scenario.plane.resource.patch_namespaced_resource_claim_status(claim.metadata.name, scenario.namespace, body)


def queue_held(scenario: Scenario, cluster_queue: str) -> dict[str, int]:
    """Usage plus in-flight reservations of a ClusterQueue's GPUs, by flavor (the extender's /diagnostics)."""
    rows = queue_rows(scenario.url, cluster_queue)
    return {flavor: row["usage"] + row["reserved"] for flavor, row in rows.items() if row["usage"] + row["reserved"]}


def allocated_claim(scenario: Scenario, pod: str) -> Any:
    def found() -> Any:
        claims = scenario.claims_of(pod)
        if len(claims) == 1 and claims[0].status and claims[0].status.allocation:
            return claims[0]
        return None

    return wait_until(found, timeout=SCHEDULE_TIMEOUT, message=f"the claim of {pod} to be allocated")


def test_a_device_with_binding_conditions_holds_quota_until_bound_and_a_failure_frees_it(scenario: Scenario) -> None:
    """Quota 1. A pod takes the node's GPU that needs binding conditions: the in-tree plugin allocates it and
    waits in PreBind (pod not bound, claim allocated and reserved for it); meanwhile a second pod, which could
    use a plain GPU on another node, is refused "quota exhausted". The driver reports the condition: the pod
    binds and keeps the quota. Then a third pod waits on a second binding GPU of another queue; the driver
    marks the device unhealthy (taint) and reports the failure condition: the scheduler clears the allocation,
    the quota is free again and that queue's next pod binds on a plain GPU."""
    spec = example_claim_spec("binding-conditions", "ResourceClaimTemplate")
    binding = {"bindingConditions": ["attached"], "bindingFailureConditions": ["attach-failed"]}
    slow = add_node_with(scenario, "slow", [gpu("gpu-0", **binding)])
    plain = add_node_with(scenario, "plain", [gpu("gpu-0")])
    flavor = scenario.add_flavor(f"{scenario.name}-gpus")
    queue = scenario.add_queue(scenario.name, [FlavorQuota(flavor, 1)])
    add_template_spec(scenario, "single-gpu", spec)
    scenario.wait_extender_sees("single-gpu", queue, scenario.name)

    # each pod is pinned to its node by hostname (create_node labels it), so what it may take is unambiguous
    first = scenario.manifest("first", "single-gpu", queue)
    first["spec"]["nodeSelector"]["kubernetes.io/hostname"] = slow
    scenario.plane.create_pod(first)
    claim = allocated_claim(scenario, "first")
    (result,) = claim.status.allocation.devices.results
    assert (result.pool, result.device, list(result.binding_conditions or [])) == (slow, "gpu-0", ["attached"])
    assert not scenario.bound(), "bound before its binding conditions were met"
    wait_until(
        lambda: scenario.plane.events_for(scenario.namespace, "first", "BindingConditionsPending"),
        timeout=SCHEDULE_TIMEOUT,
        message="the scheduler to wait for binding conditions",
    )
    # the waiting claim holds the quota: the extender counts it (usage or its reservation)
    wait_until(
        lambda: queue_usage(scenario.url, scenario.name) == {flavor: 1},
        timeout=SYNC_TIMEOUT,
        message="the waiting claim to count as usage",
    )
    second = scenario.manifest("second", "single-gpu", queue)
    second["spec"]["nodeSelector"]["kubernetes.io/hostname"] = plain
    scenario.plane.create_pod(second)
    wait_until(
        lambda: any(QUOTA_EXHAUSTED in m for m in scenario.failed_scheduling().get("second", [])),
        timeout=SCHEDULE_TIMEOUT,
        message="the second pod to be refused for quota",
    )
    assert "second" not in scenario.bound()

    set_device_condition(scenario, claim, "attached")
    assert scenario.wait_bound("first") == slow
    time.sleep(2)  # the second pod is retried: still no quota
    assert "second" not in scenario.bound()
    assert queue_usage(scenario.url, scenario.name) == {flavor: 1}

    # --- a failure condition frees the device and the quota ---
    other = scenario.add_queue(f"{scenario.name}-b", [FlavorQuota(flavor, 1)])
    failing = add_node_with(scenario, "failing", [gpu("gpu-0", **binding)])
    third = scenario.manifest("third", "single-gpu", other)
    third["spec"]["nodeSelector"]["kubernetes.io/hostname"] = failing
    scenario.plane.create_pod(third)
    failed_claim = allocated_claim(scenario, "third")
    wait_until(
        lambda: queue_usage(scenario.url, f"{scenario.name}-b") == {flavor: 1},
        timeout=SYNC_TIMEOUT,
        message="the third pod's waiting claim to count as usage",
    )
    # the driver takes the device out of service (so the retry cannot pick it again), then reports the failure
    name = f"{failing}-{DRIVER}"
    current = scenario.plane.resource.read_resource_slice(name)
    body = scenario.plane.client.sanitize_for_serialization(current)
    body["spec"]["devices"][0]["taints"] = [{"key": "e2e.dra-extender/attach-failed", "effect": "NoSchedule"}]
    scenario.plane.resource.replace_resource_slice(name, body)
    set_device_condition(scenario, failed_claim, "attach-failed")

    def cleared() -> bool:
        claims = scenario.claims_of("third")
        return all(c.status is None or c.status.allocation is None for c in claims)

    wait_until(cleared, timeout=SCHEDULE_TIMEOUT, message="the scheduler to clear the failed allocation")
    wait_until(
        lambda: not queue_usage(scenario.url, f"{scenario.name}-b"),
        timeout=SYNC_TIMEOUT,
        message="the failed claim's quota to be free in the extender",
    )
    assert "third" not in scenario.bound()
    # the freed quota serves the queue's next pod (on the plain GPU, which the second pod never got)
    scenario.plane.core.delete_namespaced_pod("second", scenario.namespace, grace_period_seconds=0)
    fourth = scenario.manifest("fourth", "single-gpu", other)
    fourth["spec"]["nodeSelector"]["kubernetes.io/hostname"] = plain
    scenario.plane.create_pod(fourth)
    assert scenario.wait_bound("fourth") == plain
