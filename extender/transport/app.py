"""The Flask application: kube-scheduler's verbs, diagnostics, health and metrics over HTTP.

An application factory, so tests and the gunicorn entry point build the app around an engine they choose.
Handlers only parse, call the engine and format: every scheduling rule lives in `extender.decisions`.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from importlib import resources
from typing import Any

import orjson
import yaml
from flask import Flask, Response, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from extender.state.core import parse_pod
from extender.state.errors import ObjectError
from extender.transport.diagnostics import decision_json, node_json, queues_json
from extender.transport.engine import BindError, SchedulingEngine
from extender.transport.metrics import ExtenderMetrics
from extender.transport.wire import (
    WireError,
    filter_result,
    parse_binding_args,
    parse_extender_args,
    prioritize_result,
)

log = logging.getLogger(__name__)


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS), status=status, mimetype="application/json")


def _error(message: str, status: int) -> Response:
    return _json({"error": message}, status)


def _body() -> Any:
    data = request.get_data(cache=False)
    if not data:
        raise WireError("request body is empty; a JSON object is required")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise WireError(f"request body is not valid JSON: {error}") from None


def openapi_document() -> str:
    return resources.files("extender.transport").joinpath("openapi.yaml").read_text(encoding="utf-8")


SCHEDULING_ROUTES = frozenset(
    {"/filter", "/prioritize", "/bind", "/healthz", "/readyz", "/openapi.yaml", "/openapi.json"}
)


def create_app(
    engine: SchedulingEngine,
    *,
    metrics: ExtenderMetrics | None = None,
    serve_scheduling: bool = True,
    serve_diagnostics: bool = True,
) -> Flask:
    """The app for one listener. With a separate diagnostics listener, the scheduling listener serves only
    kube-scheduler's verbs and health, and the diagnostics listener everything else (people and Prometheus)."""
    app = Flask("dra-extender")
    app.config["MAX_CONTENT_LENGTH"] = engine.config.max_body_bytes
    metrics = metrics if metrics is not None else ExtenderMetrics(engine)
    app.extensions["dra_engine"] = engine
    app.extensions["dra_metrics"] = metrics
    max_nodes = engine.config.max_nodes_per_request

    def route(method: str, rule: str) -> Callable[[Callable[..., Response]], Callable[..., Response]]:
        scheduling = rule in SCHEDULING_ROUTES
        diagnostics = not rule.startswith(("/filter", "/prioritize", "/bind"))
        wanted = (serve_scheduling and scheduling) or (serve_diagnostics and diagnostics)

        def register(handler: Callable[..., Response]) -> Callable[..., Response]:
            if wanted:
                app.add_url_rule(rule, view_func=handler, methods=[method.upper()])
            return handler

        return register

    def timed(verb: str) -> Callable[[Callable[..., Response]], Callable[..., Response]]:
        def wrap(handler: Callable[..., Response]) -> Callable[..., Response]:
            def run(*args: Any, **kwargs: Any) -> Response:
                started = time.perf_counter()
                try:
                    response = handler(*args, **kwargs)
                except WireError as error:
                    response = _error(str(error), 400)
                except RequestEntityTooLarge:
                    response = _error(f"request body exceeds the limit of {engine.config.max_body_bytes} bytes", 413)
                metrics.request_seconds.labels(verb).observe(time.perf_counter() - started)
                metrics.requests.labels(verb, str(response.status_code)).inc()
                return response

            run.__name__ = handler.__name__
            return run

        return wrap

    @route("post", "/filter")
    @timed("filter")
    def filter_verb() -> Response:
        args = parse_extender_args(_body(), max_nodes=max_nodes)
        decision = engine.filter(args.pod, args.node_names)
        metrics.nodes_evaluated.labels("filter").inc(len(args.node_names))
        if decision.fast_path:
            metrics.fast_path.labels("filter").inc()
        outcomes = Counter("passed" if verdict.passed else verdict.category for verdict in decision.verdicts.values())
        for category, count in outcomes.items():
            metrics.filter_outcomes.labels(category).inc(count)
        return _json(filter_result(args, decision))

    @route("post", "/prioritize")
    @timed("prioritize")
    def prioritize_verb() -> Response:
        args = parse_extender_args(_body(), max_nodes=max_nodes)
        decision = engine.prioritize(args.pod, args.node_names)
        metrics.nodes_evaluated.labels("prioritize").inc(len(args.node_names))
        if decision.fast_path:
            metrics.fast_path.labels("prioritize").inc()
        return _json(prioritize_result(args, decision))

    @route("post", "/bind")
    @timed("bind")
    def bind_verb() -> Response:
        if not engine.config.bind_enabled:
            return _error("the bind verb is disabled (set bind.enabled: true in the extender config)", 404)
        args = parse_binding_args(_body())
        try:
            engine.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        except BindError as error:
            return _json({"Error": str(error)})
        return _json({"Error": ""})

    @route("get", "/diagnostics/pods/<namespace>/<name>")
    @timed("diagnostics")
    def pod_diagnostics(namespace: str, name: str) -> Response:
        record = engine.last_decision(namespace, name)
        if record is None:
            return _error(f"no decision recorded for pod {namespace}/{name}", 404)
        return _json(decision_json(record.decision, record))

    @route("post", "/diagnostics/explain")
    @timed("explain")
    def explain() -> Response:
        data = request.get_data(cache=False)
        if not data:
            raise WireError("request body is empty; send a Pod as JSON or YAML")
        try:
            body = (
                yaml.safe_load(data)
                if request.mimetype in ("application/yaml", "application/x-yaml", "text/yaml")
                else None
            )
            if body is None:
                body = orjson.loads(data)
        except (orjson.JSONDecodeError, yaml.YAMLError, RecursionError):  # PyYAML recurses on deep nesting
            try:
                body = yaml.safe_load(data)
            except (yaml.YAMLError, RecursionError) as error:
                raise WireError(f"request body is neither JSON nor YAML: {error}") from None
        if not isinstance(body, dict):
            raise WireError("request body must be a Pod object")
        if body.get("kind") not in (None, "Pod"):
            raise WireError(f"request body must be a Pod, got kind {body.get('kind')!r}")
        try:
            pod = parse_pod(body)
        except ObjectError as error:
            raise WireError(f"Pod: {error.describe()}") from None
        nodes = request.args.getlist("node") or None
        return _json(decision_json(engine.explain(pod, nodes)))

    @route("get", "/diagnostics/nodes/<name>")
    @timed("diagnostics")
    def node_diagnostics(name: str) -> Response:
        report = node_json(engine.snapshot(), name)
        if report is None:
            return _error(f"node {name} is not known to the extender", 404)
        return _json(report)

    @route("get", "/diagnostics/queues")
    @timed("diagnostics")
    def queue_diagnostics() -> Response:
        return _json(queues_json(engine))

    @route("get", "/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @route("get", "/readyz")
    def readyz() -> Response:
        health = engine.health()
        snapshot = engine.snapshot()
        ready = health.ready and snapshot.synced
        payload = {
            "ready": ready,
            "message": health.message,
            "source": engine.source.description,
            "stateVersion": snapshot.version,
            "freshnessSeconds": health.freshness_seconds,
        }
        return _json(payload, 200 if ready else 503)

    @route("get", "/metrics")
    def metrics_endpoint() -> Response:
        return Response(generate_latest(metrics.registry), mimetype=CONTENT_TYPE_LATEST)

    @route("get", "/openapi.yaml")
    def openapi_yaml() -> Response:
        return Response(openapi_document(), mimetype="application/yaml")

    @route("get", "/openapi.json")
    def openapi_json() -> Response:
        return _json(yaml.safe_load(openapi_document()))

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> Response:
        if isinstance(error, RequestEntityTooLarge):
            return _error(f"request body exceeds the limit of {engine.config.max_body_bytes} bytes", 413)
        response = _error(f"{error.name}: {error.description}", error.code or 500)
        # Keep werkzeug's protocol headers (Allow on 405, as RFC 9110 requires); the body is ours.
        response.headers.extend((k, v) for k, v in error.get_headers() if k.lower() != "content-type")
        return response

    @app.errorhandler(Exception)
    def unexpected(error: Exception) -> Response:
        log.exception("unexpected error answering %s %s", request.method, request.path)
        return _error(f"internal error: {type(error).__name__}: {error}", 500)

    return app
