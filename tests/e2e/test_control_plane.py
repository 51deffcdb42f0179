"""Smoke tests of the e2e harness: the real kube-scheduler with its in-tree DynamicResources plugin and no
extender schedules plain pods and DRA pods onto harness nodes, and refuses a pod that no node can serve."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from testkit import builders as b
from testkit.control_plane import DEVICE_CLASS, DRIVER, ControlPlane, pod_manifest

pytestmark = pytest.mark.e2e

NODES = ("smoke-node-a", "smoke-node-b")
GPUS_PER_NODE = 2


@pytest.fixture(scope="module")
def gpu_nodes(control_plane: ControlPlane) -> tuple[str, ...]:
    """Two Ready nodes, each with a ResourceSlice of 2 example GPUs, and the gpu.example.com DeviceClass."""
    control_plane.create_device_class()
    for node in NODES:
        control_plane.create_node(node)
        control_plane.publish_gpus(node, count=GPUS_PER_NODE)
    return NODES


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = control_plane.create_namespace(f"smoke-{uuid.uuid4().hex[:8]}")
    yield name
    control_plane.delete_namespace(name)


def test_nodes_and_crds_are_ready(control_plane: ControlPlane, gpu_nodes: tuple[str, ...]) -> None:
    for name in gpu_nodes:
        node = control_plane.core.read_node(name)
        assert not node.spec.taints
        assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
        assert node.status.allocatable["pods"] == "110"
    slices = control_plane.resource.list_resource_slice(field_selector=f"spec.driver={DRIVER}").items
    assert {s.spec.pool.name for s in slices} >= set(gpu_nodes)
    assert control_plane.crd_established("clusterqueues.kueue.x-k8s.io")
    assert control_plane.crd_established("resourceflavors.kueue.x-k8s.io")


def test_pod_without_claims_is_scheduled(
    control_plane: ControlPlane, gpu_nodes: tuple[str, ...], namespace: str
) -> None:
    control_plane.create_pod(pod_manifest(namespace, "plain"))
    pod = control_plane.wait_for_pod_scheduled(namespace, "plain")
    assert pod.spec.node_name in gpu_nodes


def test_pod_with_one_gpu_gets_a_device_on_its_node(
    control_plane: ControlPlane, gpu_nodes: tuple[str, ...], namespace: str
) -> None:
    control_plane.resource.create_namespaced_resource_claim_template(
        namespace, b.claim_template("one-gpu", namespace, [b.exact_request("gpu", 1)])
    )
    control_plane.create_pod(pod_manifest(namespace, "gpu-pod", claim_templates={"gpu": "one-gpu"}))

    pod = control_plane.wait_for_pod_scheduled(namespace, "gpu-pod")
    assert pod.spec.node_name in gpu_nodes
    (claim,) = control_plane.pod_claims(namespace, "gpu-pod")
    assert claim.metadata.owner_references[0].name == "gpu-pod"  # made by the resourceclaim controller
    allocation = claim.status.allocation
    assert allocation is not None
    (result,) = allocation.devices.results
    assert result.driver == DRIVER
    assert result.pool == pod.spec.node_name  # the example driver's pool is the node
    assert result.device in {f"gpu-{i}" for i in range(GPUS_PER_NODE)}
    assert [r.name for r in claim.status.reserved_for] == ["gpu-pod"]


def test_pod_asking_for_more_gpus_than_any_node_has_stays_pending(
    control_plane: ControlPlane, gpu_nodes: tuple[str, ...], namespace: str
) -> None:
    control_plane.resource.create_namespaced_resource_claim_template(
        namespace, b.claim_template("four-gpus", namespace, [b.exact_request("gpu", 4, device_class_name=DEVICE_CLASS)])
    )
    control_plane.create_pod(pod_manifest(namespace, "greedy", claim_templates={"gpu": "four-gpus"}))

    event = control_plane.wait_for_event(namespace, "greedy", "FailedScheduling")
    assert f"0/{len(control_plane.core.list_node().items)} nodes are available" in event.message
    pod = control_plane.core.read_namespaced_pod("greedy", namespace)
    assert pod.spec.node_name is None
    assert pod.status.phase == "Pending"
    (condition,) = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert (condition.status, condition.reason) == ("False", "Unschedulable")
