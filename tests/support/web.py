"""The web view's test clusters and a real HTTP server around a service (tests/test_web_view.py, tests/browser)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from typing import Any

import yaml
from werkzeug.serving import make_server

from extender.cli import demo_snapshot_text
from extender.service import ExtenderConfig, SchedulingService
from extender.state.core import parse_pod
from extender.state.sources import SnapshotSource, SourceHealth
from extender.state.store import ClusterStore
from extender.transport.app import create_app
from testkit import builders as b
from testkit.clusters import cluster_objects

DEMO_PODS = ("pod-two-gpus.yaml", "pod-first-available.yaml", "pod-no-claims.yaml")
TAINT = {"key": "gpu.example.com/unhealthy", "value": "true", "effect": "NoSchedule"}


def demo_pod(file_name: str) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(resources.files("extender").joinpath(f"demo/{file_name}").read_text())
    return raw


class PreloadedSource:
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


def service_for_text(text: str, config: ExtenderConfig | None = None) -> SchedulingService:
    service = SchedulingService(SnapshotSource(text=text), config or ExtenderConfig())
    service.start()
    return service


def demo_service() -> SchedulingService:
    """The embedded demo cluster with the demo pods filtered (and one prioritized), as kube-scheduler would."""
    service = service_for_text(demo_snapshot_text())
    nodes = sorted(service.snapshot().nodes)
    for file_name in DEMO_PODS:
        pod = parse_pod(demo_pod(file_name))
        service.filter(pod, nodes)
    first = parse_pod(demo_pod(DEMO_PODS[0]))
    service.prioritize(first, nodes)
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
    service = service_for_objects(varied_objects(nodes))
    names = sorted(service.snapshot().nodes)
    for pod_name in ("waiting-0", "launching"):
        service.filter(service.snapshot().pods[f"bench/{pod_name}"], names)
    return service


@contextmanager
def serve(service: SchedulingService) -> Iterator[str]:
    """The diagnostics app (as the diagnostics listener serves it) on 127.0.0.1, in a thread; yields its URL."""
    app = create_app(service, serve_scheduling=False)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="web-view-test", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
