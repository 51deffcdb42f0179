"""Cluster shapes for placement: partitionable GPUs (MIG-like profiles drawing on a counter set per GPU), GPUs
shared by consumable capacity, plain GPUs; claims that hold their devices; pods asking for one shape.

Shared by tests/decisions/test_device_fit.py and bench/placement_bench.py. A partitionable GPU follows the DRA
partitionable-devices model (k8s.io/api resource/v1: a ResourceSlice's sharedCounters, each device's
consumesCounters): one counter set per GPU with `slices` (7) and `memory` counters, and devices whole / 3g / 2g /
1g drawing 7 / 3 / 2 / 1 slices and 1 / 1/2 / 1/4 / 1/8 of the memory, as the MIG profiles of a 40Gi or 80Gi
GPU do. Devices are listed GPU by GPU, small profiles first, so the allocator's first fit takes the smallest
device that a selector admits on the first GPU that still has room.

Every object is one kube-apiserver v1.37 accepts (pkg/apis/resource/validation): a node's partitionable GPUs are
a pool of two ResourceSlices, one with the devices and one with the counter sets (`node_pool`), and a shared
GPU's requestPolicy gives the `default` its `validRange` requires (`shared_node`).
"""

from __future__ import annotations

import uuid
from typing import Any

from testkit import builders as b

PROFILES = (("1g", 1, 8, 7), ("2g", 2, 4, 3), ("3g", 3, 2, 2), ("whole", 7, 1, 1))  # name, slices, 1/mem, count
PROFILE_EIGHTHS = {"1g": 1, "2g": 2, "3g": 4, "whole": 8}  # memory in eighths of the GPU


def partitioned_gpu(node: str, gpu: int, memory_gi: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The devices of one partitionable GPU and its counter set."""
    counter_set = f"gpu-{gpu}"
    devices = []
    for profile, slices, divisor, count in PROFILES:
        memory = f"{memory_gi * 1024 // divisor}Mi"
        for index in range(count):
            device = b.gpu_device(gpu, node_name=node, memory=memory, name=f"gpu{gpu}-{profile}-{index}")
            del device["capacity"]["compute"]
            device["attributes"]["profile"] = {"string": profile}
            device["consumesCounters"] = [
                {"counterSet": counter_set, "counters": {"slices": {"value": str(slices)}, "memory": {"value": memory}}}
            ]
            devices.append(device)
    counters = {"name": counter_set, "counters": {"slices": {"value": "7"}, "memory": {"value": f"{memory_gi}Gi"}}}
    return devices, counters


def node_pool(
    node: str, devices: list[dict[str, Any]], counter_sets: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The ResourceSlices of one node's pool (named after the node), as the API server accepts them.

    A slice holds devices or sharedCounters, not both (validateResourceSliceSpec: "only one of `sharedCounters`
    or `devices` is allowed"), so a pool with counter sets is two slices: `<node>-<driver>-counters` with the
    counter sets alone and `<node>-<driver>-devices` with the devices, both naming the node (every slice needs
    exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection) and carrying the same pool name,
    generation and resourceSliceCount 2. That is how dynamic-resource-allocation's resourceslice controller
    publishes a node's pool (every slice gets the owner node's nodeName and a ResourcePool whose
    ResourceSliceCount is the number of slices). The allocator finds a device's counter set in any slice of the
    pool's generation (structured GatherPools / buildPool; extender/state/inventory.py build_pool), and the
    counter slice contributes no devices, so the device order is that of the devices slice. Without counter
    sets the pool is one slice, `<node>-<driver>`."""
    if not counter_sets:
        return [b.gpu_slice(node, devices=devices)]
    base = f"{node}-{b.DRIVER}"
    counters = b.gpu_slice(node, devices=[], slice_count=2, name=f"{base}-counters", shared_counters=counter_sets)
    del counters["spec"]["devices"]  # present, even empty, it would count as set beside sharedCounters
    return [counters, b.gpu_slice(node, devices=devices, slice_count=2, name=f"{base}-devices")]


def partitioned_node(node: str, memories_gi: list[int]) -> list[dict[str, Any]]:
    """A node and its pool of partitionable GPUs (one per entry of `memories_gi`): a slice of counter sets and
    one of devices (`node_pool`)."""
    devices: list[dict[str, Any]] = []
    counter_sets = []
    for gpu, memory_gi in enumerate(memories_gi):
        gpu_devices, counters = partitioned_gpu(node, gpu, memory_gi)
        devices.extend(gpu_devices)
        counter_sets.append(counters)
    return [b.node(node), *node_pool(node, devices, counter_sets)]


SHARE_STEP = "5Gi"


def shared_node(node: str, memories_gi: list[int]) -> list[dict[str, Any]]:
    """A node whose GPUs allow multiple allocations, shared by memory in steps of 5Gi.

    The requestPolicy's `default` (what a request naming no memory consumes) is the range's minimum: resource/v1
    validation requires a default beside a validRange ("required when validRange is defined") and a valid one
    (validateRequestPolicyRange: at least min, at most max and the capacity, a whole number of steps from min).
    Every request of these shapes names its memory, so no pod consumes the default."""
    devices = []
    for gpu, memory_gi in enumerate(memories_gi):
        device = b.gpu_device(gpu, node_name=node, memory=f"{memory_gi}Gi")
        del device["capacity"]["compute"]
        device["allowMultipleAllocations"] = True
        device["capacity"]["memory"]["requestPolicy"] = {
            "default": SHARE_STEP,
            "validRange": {"min": SHARE_STEP, "step": SHARE_STEP},
        }
        devices.append(device)
    return [b.node(node), *node_pool(node, devices)]


def plain_node(node: str, gpus: int, memory_gi: int = 80) -> list[dict[str, Any]]:
    """A node with `gpus` whole GPUs of `memory_gi` each, one allocation apiece."""
    devices = [b.gpu_device(i, node_name=node, memory=f"{memory_gi}Gi") for i in range(gpus)]
    return [b.node(node), *node_pool(node, devices)]


def profile_request(profile: str) -> dict[str, Any]:
    return b.exact_request("gpu", selectors=[f"device.attributes['{b.DRIVER}'].profile == '{profile}'"])


def memory_at_least_request(memory_gi: int) -> dict[str, Any]:
    """A partition with at least this much memory (the first fit takes the smallest listed that has it)."""
    expression = f"device.capacity['{b.DRIVER}'].memory.compareTo(quantity('{memory_gi}Gi')) >= 0"
    return b.exact_request("gpu", selectors=[expression])


def share_request(memory_gi: int) -> dict[str, Any]:
    request = b.exact_request("gpu")
    request["exactly"]["capacity"] = {"requests": {"memory": f"{memory_gi}Gi"}}
    return request


def holding_claim(
    name: str, node: str, devices: list[str], *, share_memory_gi: int | None = None, namespace: str = "other"
) -> dict[str, Any]:
    """A claim allocated on `node` holding `devices` (of the node's pool), or one share of each with
    `share_memory_gi` consumed."""
    obj = b.claim(
        name,
        namespace,
        [b.exact_request("gpu", len(devices))],
        allocated=[("gpu", node, device) for device in devices],
        allocated_node=node,
    )
    if share_memory_gi is not None:
        for index, result in enumerate(obj["status"]["allocation"]["devices"]["results"]):
            result["shareID"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{name}/{index}"))
            result["consumedCapacity"] = {"memory": f"{share_memory_gi}Gi"}
    return obj
