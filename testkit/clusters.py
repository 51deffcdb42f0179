"""Generated clusters for benchmarks: N nodes x 8 example-driver GPUs, a share of them allocated."""

from __future__ import annotations

import random
from typing import Any

from extender.state.store import ClusterStore
from testkit import builders as b
from testkit.scenarios import cluster_queue, flavor, kueue_config, local_queue

CAPACITY_SELECTOR = "device.capacity['gpu.example.com'].memory.compareTo(quantity('40Gi')) >= 0"


def build_cluster(
    nodes: int,
    devices_per_node: int = 8,
    allocated_share: float = 0.5,
    *,
    seed: int = 7,
    pods: int = 0,
    with_quota: bool = False,
) -> ClusterStore:
    """A store filled through the same code path as a live list (store.replace per kind)."""
    return filled_store(
        cluster_objects(nodes, devices_per_node, allocated_share, seed=seed, pods=pods, with_quota=with_quota)
    )


def filled_store(objects: dict[str, list[dict[str, Any]]]) -> ClusterStore:
    """A store filled with `objects` (by kind) through the path a live list takes (store.replace per kind)."""
    store = ClusterStore()
    for kind, items in objects.items():
        store.replace(kind, items)
    store.set_synced(True)
    return store


# scheduler_perf's Partitionable case (k8s.io/kubernetes test/integration/scheduler_perf/dra/partitionabledevices,
# its templates resourceslice-partitionable-countersets.yaml and -devices.yaml): per node one pool of two slices,
# a counter set of four counters of 1, and two devices that draw two counters each; pods ask for both devices.
PARTITIONED_TEMPLATE = "two-partitions"
PARTITIONED_COUNT = 2


def partitioned_cluster(nodes: int, *, with_quota: bool = False) -> ClusterStore:
    """A store of `nodes` nodes of scheduler_perf's Partitionable shape, filled as a live list fills one."""
    objects = cluster_objects(0, with_quota=with_quota)
    objects["ResourceClaimTemplate"] = [
        b.claim_template(PARTITIONED_TEMPLATE, "bench", [b.exact_request("gpu", PARTITIONED_COUNT)])
    ]
    counters = [{"name": "counter-set", "counters": {f"counter{i}": {"value": "1"} for i in range(1, 5)}}]
    for index in range(nodes):
        name = f"node-{index:05d}"
        capacity_type = "on-demand" if index % 2 == 0 else "spot"
        objects["Node"].append(b.node(name, {"example.com/capacity-type": capacity_type}))
        devices = []
        for position, drawn in enumerate((("counter1", "counter2"), ("counter3", "counter4"))):
            consumes = [{"counterSet": "counter-set", "counters": {c: {"value": "1"} for c in drawn}}]
            devices.append(b.gpu_device(position, node_name=name, name=f"device-{position + 1}", consumes=consumes))
        objects["ResourceSlice"] += [
            b.gpu_slice(name, 0, slice_count=2, name=f"{name}-counters", devices=[], shared_counters=counters),
            b.gpu_slice(name, 0, slice_count=2, name=f"{name}-devices", devices=devices),
        ]
    return filled_store(objects)


def cluster_objects(
    nodes: int,
    devices_per_node: int = 8,
    allocated_share: float = 0.5,
    *,
    seed: int = 7,
    pods: int = 0,
    with_quota: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """The API objects of a generated cluster, by kind; half the nodes in each of two flavors."""
    rng = random.Random(seed)
    node_objs: list[dict[str, Any]] = []
    slices: list[dict[str, Any]] = []
    claims: list[dict[str, Any]] = []
    pod_objs: list[dict[str, Any]] = []
    memories = ["80Gi", "40Gi", "24Gi", "80Gi"]
    for index in range(nodes):
        name = f"node-{index:05d}"
        capacity_type = "on-demand" if index % 2 == 0 else "spot"
        node_objs.append(b.node(name, {"example.com/capacity-type": capacity_type}))
        devices = [b.gpu_device(i, node_name=name, memory=memories[i % 4]) for i in range(devices_per_node)]
        slices.append(b.gpu_slice(name, devices=devices))
        taken = [i for i in range(devices_per_node) if rng.random() < allocated_share]
        if taken:
            claim_name = f"held-{index}"
            claims.append(
                b.claim(
                    claim_name,
                    "bench",
                    [b.exact_request("gpu", len(taken))],
                    allocated=[("gpu", name, f"gpu-{i}") for i in taken],
                    allocated_node=name,
                    reserved_for=[(f"holder-{index}", f"uid-holder-{index}")],
                )
            )
            pod_objs.append(
                b.pod(
                    f"holder-{index}",
                    "bench",
                    claims={"gpu": claim_name},
                    queue="q" if with_quota else None,
                    node_name=name,
                    phase="Running",
                    uid=f"uid-holder-{index}",
                )
            )
    for index in range(max(0, pods - len(pod_objs))):
        node_name = node_objs[index % nodes]["metadata"]["name"]
        pod_objs.append(b.pod(f"filler-{index}", "bench", node_name=node_name, phase="Running"))
    objects: dict[str, list[dict[str, Any]]] = {
        "Node": node_objs,
        "ResourceSlice": slices,
        "DeviceClass": [b.device_class()],
        "ResourceClaim": claims,
        "Pod": pod_objs,
        "Namespace": [b.namespace("bench")],
        "ResourceClaimTemplate": [
            b.claim_template("two-big", "bench", [b.exact_request("gpu", 2, selectors=[CAPACITY_SELECTOR])]),
            b.claim_template("one", "bench", [b.exact_request("gpu", 1)]),
            b.claim_template("four", "bench", [b.exact_request("gpu", 4)]),
            b.claim_template(
                "pair-matched",
                "bench",
                [b.exact_request("a", 1), b.exact_request("b", 1)],
                [{"matchAttribute": "gpu.example.com/model"}],
            ),
        ],
    }
    if with_quota:
        quota = {"nominal": 100_000}
        objects["ConfigMap"] = [kueue_config()]
        objects["ResourceFlavor"] = [flavor("on-demand"), flavor("spot")]
        objects["ClusterQueue"] = [cluster_queue("bench", {"on-demand": quota, "spot": quota}, cohort=None)]
        objects["LocalQueue"] = [local_queue("bench", "bench")]
    return objects
