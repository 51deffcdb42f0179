"""A generated cluster with one node of every device state the web view draws, loaded without a YAML round trip
(tests/transport/test_web_view.py, tests/browser, bench/web_bench.py)."""

from __future__ import annotations

from typing import Any

from extender.service import ExtenderConfig, SchedulingService
from extender.state.sources import SourceHealth, SourceWithoutWatches
from extender.state.store import ClusterStore
from testkit import builders as b
from testkit.clusters import cluster_objects

TAINT = {"key": "gpu.example.com/unhealthy", "value": "true", "effect": "NoSchedule"}


class PreloadedSource(SourceWithoutWatches):
    """A source whose store the test filled already (store.replace per kind, as a live list does): a YAML round
    trip of a 5000-node cluster would take minutes."""

    description = "a generated cluster"

    def start(self, store: ClusterStore) -> None:
        return None

    def stop(self) -> None:
        return None

    def health(self) -> SourceHealth:
        return SourceHealth(True, "generated cluster loaded", {"nodes": 0.0, "resourceslices": 0.0})


def service_for_objects(objects: list[dict[str, Any]]) -> SchedulingService:
    store = ClusterStore()
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    for kind, items in by_kind.items():
        errors = store.replace(kind, items)
        assert not errors, errors
    store.set_synced(True)
    service = SchedulingService(PreloadedSource(), ExtenderConfig(), store=store)
    service.start()
    return service


def varied_objects(nodes: int) -> list[dict[str, Any]]:
    """A generated cluster (testkit.clusters, two flavors, half the GPUs held) plus one node of each state the
    grid draws: a tainted device, devices held for a pod not bound yet (in flight), a partitionable GPU whose
    shared counters a sibling partly consumes, and a pending pod whose queue is in a cohort."""
    objects = cluster_objects(nodes, with_quota=True)
    flat = [obj for items in objects.values() for obj in items]
    special = "node-special"
    counters = [{"name": "gpu-7-counters", "counters": {"memory": {"value": "80Gi"}}}]
    devices = [b.gpu_device(i, node_name=special) for i in range(6)]
    devices[5]["taints"] = [TAINT]
    for name in ("gpu-7-half-a", "gpu-7-half-b"):
        device = b.gpu_device(7, node_name=special, name=name)
        device["consumesCounters"] = [{"counterSet": "gpu-7-counters", "counters": {"memory": {"value": "40Gi"}}}]
        devices.append(device)
    flat += [
        b.node(special, {"example.com/capacity-type": "on-demand"}),
        b.gpu_slice(special, devices=devices, shared_counters=counters),
        b.claim(
            "launching-gpu",
            "bench",
            [b.exact_request("gpu", 2)],
            allocated=[("gpu", special, "gpu-0"), ("gpu", special, "gpu-1")],
            allocated_node=special,
            reserved_for=[("launching", "uid-launching")],
        ),
        b.pod("launching", "bench", claims={"gpu": "launching-gpu"}, queue="bench", uid="uid-launching"),
        b.claim("half-used", "bench", [b.exact_request("gpu", 1)], allocated=[("gpu", special, "gpu-7-half-a")]),
        b.pod("waiting-0", "bench", templates={"gpu": "four"}, queue="bench"),
    ]
    return flat


def varied_service(nodes: int) -> SchedulingService:
    """varied_objects with the two pending pods filtered over every node, as kube-scheduler would."""
    service = service_for_objects(varied_objects(nodes))
    names = sorted(service.snapshot().nodes)
    for pod_name in ("waiting-0", "launching"):
        service.filter(service.snapshot().pods[f"bench/{pod_name}"], names)
    return service
