"""The `diagnostics` blueprint: what people read about the extender's decisions (a pod's last decision, a what-if
explain, a node's devices, the queues), as JSON. The reports themselves are built in extender/reports/."""

from __future__ import annotations

import threading

from flask import Blueprint, Response, current_app, request

from extender.kube import strict_objects
from extender.reports.decisions import decision_json
from extender.reports.devices import node_json
from extender.reports.queues import queues_json
from extender.service import SchedulingService
from extender.service.config import DiagnosticsSection
from extender.state.core import parse_pod
from extender.state.errors import ObjectError
from extender.transport.request_io import current_service, error_response, json_response, request_body
from extender.transport.wire import WireError

diagnostics = Blueprint("diagnostics", __name__)


@diagnostics.get("/diagnostics/pods/<namespace>/<name>")
def pod_diagnostics(namespace: str, name: str) -> Response:
    record = current_service().last_decision(namespace, name)
    if record is None:
        return error_response(f"no decision recorded for pod {namespace}/{name}", 404)
    return json_response(decision_json(record.ranking, record))


@diagnostics.post("/diagnostics/explain")
def explain() -> Response:
    """A what-if decision: bounded in body size, YAML size, nodes, time and concurrency (it runs the full
    search over every node asked about, on the threads kube-scheduler's verbs use)."""
    service = current_service()
    settings = service.config.diagnostics
    gate: threading.BoundedSemaphore = current_app.extensions["dra_explain_gate"]
    if not gate.acquire(blocking=False):
        return error_response(
            f"too many explain requests in progress (at most {settings.explain.concurrency}); retry", 429
        )
    try:
        return _explain_posted_pod(service, settings)
    finally:
        gate.release()


def _explain_posted_pod(service: SchedulingService, settings: DiagnosticsSection) -> Response:
    body = request_body(yaml_allowed=True, max_bytes=settings.max_body_bytes, yaml_max_bytes=settings.yaml_max_bytes)
    if not isinstance(body, dict):
        raise WireError("request body must be a Pod object")
    if body.get("kind") not in (None, "Pod"):
        raise WireError(f"request body must be a Pod, got kind {body.get('kind')!r}")
    unknown = _unknown_fields(body)
    try:
        pod = parse_pod(body)
    except ObjectError as error:
        raise WireError(f"Pod: {error.describe()}") from None
    nodes = request.args.getlist("node") or None
    explain_limits(service, nodes, settings.explain.max_nodes)
    response = json_response(decision_json(service.explain(pod, nodes)))
    for path in unknown:
        response.headers.add("Warning", f'299 - "unknown field \\"{path}\\""')
    return response


def explain_limits(service: SchedulingService, nodes: list[str] | None, limit: int) -> None:
    """diagnostics.explain.maxNodes, for this endpoint and the web view's what-if alike: at most `limit` nodes
    named, and without names a cluster of at most `limit` nodes (an explain of every node otherwise)."""
    if nodes is not None and len(nodes) > limit:
        raise WireError(f"{len(nodes)} nodes asked about; the limit is {limit} (diagnostics.explain.maxNodes)")
    if nodes is None and len(cluster_nodes := service.snapshot().nodes) > limit:
        raise WireError(
            f"the cluster has {len(cluster_nodes)} nodes, more than diagnostics.explain.maxNodes ({limit}): "
            "name the nodes to explain with ?node=NAME (repeatable)"
        )


FIELD_VALIDATION = ("Strict", "Warn", "Ignore")


def _unknown_fields(body: dict[str, object]) -> list[str]:
    """kube-apiserver's ``fieldValidation`` query parameter, applied to the posted pod: ``Strict`` refuses unknown
    fields (400, the apiserver's message), ``Warn`` (the default, as kube-apiserver's) answers with one
    ``Warning: 299`` header per unknown field, ``Ignore`` drops them silently. The CLI and the kubectl plugin check
    a person's file strictly before posting it; a pod they read from the API server is posted as it is."""
    mode = request.args.get("fieldValidation", "Warn")
    if mode not in FIELD_VALIDATION:
        raise WireError(f"fieldValidation must be one of {', '.join(FIELD_VALIDATION)}, got {mode!r}")
    if mode == "Ignore":
        return []
    unknown = strict_objects.unknown_fields(body)
    if unknown and mode == "Strict":
        raise WireError(str(strict_objects.StrictDecodingError(unknown)))
    return unknown


@diagnostics.get("/diagnostics/nodes/<name>")
def node_diagnostics(name: str) -> Response:
    report = node_json(current_service().snapshot(), name)
    if report is None:
        return error_response(f"node {name} is not known to the extender", 404)
    return json_response(report)


@diagnostics.get("/diagnostics/queues")
def queue_diagnostics() -> Response:
    service = current_service()
    view = service.quota_view()
    return json_response(queues_json(view, service.unplaced_workloads(view.snapshot), service.uncharged_pods()))
