"""The web view's test clusters and a real HTTP server around a service (tests/transport/test_web_view.py,
tests/browser)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from typing import Any

import yaml
from werkzeug.serving import make_server

from extender.commands.assembly import demo_snapshot_text
from extender.service import ExtenderConfig, SchedulingService
from extender.state.core import parse_pod
from extender.state.sources import SnapshotSource
from extender.transport.app import create_app
from testkit.web_cluster import service_for_objects, varied_objects, varied_service

__all__ = ["demo_pod", "demo_service", "serve", "service_for_objects", "varied_objects", "varied_service"]

DEMO_PODS = ("pod-two-gpus.yaml", "pod-first-available.yaml", "pod-no-claims.yaml")


def demo_pod(file_name: str) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(resources.files("extender").joinpath(f"demo/{file_name}").read_text())
    return raw


def service_for_text(text: str, config: ExtenderConfig | None = None) -> SchedulingService:
    service = SchedulingService(SnapshotSource(text=text), config or ExtenderConfig())
    service.start()
    return service


def demo_service() -> SchedulingService:
    """The embedded demo cluster with the demo pods created (pending, as a live source would see them) and
    filtered, one of them prioritized too, as kube-scheduler would."""
    service = service_for_text(demo_snapshot_text())
    nodes = sorted(service.snapshot().nodes)
    for file_name in DEMO_PODS:
        raw = demo_pod(file_name)
        service.store.apply("Pod", "ADDED", raw)
        service.filter(parse_pod(raw), nodes)
    first = parse_pod(demo_pod(DEMO_PODS[0]))
    service.prioritize(first, nodes)
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
