"""The Flask application factory: kube-scheduler's verbs, diagnostics, health and metrics over HTTP.

An application factory with blueprints (Flask's own pattern), one module each: `scheduling` holds
kube-scheduler's verbs (transport/scheduling_routes.py), `diagnostics` what people read
(transport/diagnostics_routes.py, and the web view, transport/views.py), `metrics` what Prometheus scrapes
(transport/metrics_routes.py), `health` the probes and the API document both listeners answer
(transport/health_routes.py). With a separate diagnostics listener the process builds two apps around one
service, each with the blueprints it serves. Handlers only parse, call the service and format; request metrics
are taken in request hooks (here), who may read anything but the probes, /metrics and the verbs is decided in one
(transport/diagnostics_auth.py),
and one error handler per kind of failure turns it into a clear status and message (transport/error_answers.py).
filter and prioritize mostly bypass all of this: transport/verb_fast_path.py wraps the app's WSGI entry.
"""

from __future__ import annotations

import threading
import time

from flask import Flask, Response, current_app, g, request
from werkzeug.exceptions import HTTPException

from extender.service import SchedulingService
from extender.transport.diagnostics_auth import (
    Authorizer,
    guard_people_requests,
    people_response_headers,
    release_people_gate,
)
from extender.transport.diagnostics_routes import diagnostics
from extender.transport.error_answers import bad_request, http_error, unexpected_error
from extender.transport.foreground import foreground_for
from extender.transport.health_routes import health
from extender.transport.liveness import InFlight
from extender.transport.metrics import ExtenderMetrics
from extender.transport.metrics_routes import metrics_blueprint
from extender.transport.podgroup_routes import podgroups
from extender.transport.request_io import current_metrics
from extender.transport.scheduling_routes import scheduling
from extender.transport.verb_fast_path import SchedulingVerbs
from extender.transport.views import web
from extender.transport.wire import WireError

# endpoint -> the verb label of the request metrics (endpoints not listed are not timed: probes, scrapes)
TIMED_ENDPOINTS = {
    "scheduling.filter_verb": "filter",
    "scheduling.prioritize_verb": "prioritize",
    "scheduling.bind_verb": "bind",
    "diagnostics.pod_diagnostics": "diagnostics",
    "diagnostics.node_diagnostics": "diagnostics",
    "diagnostics.queue_diagnostics": "diagnostics",
    "diagnostics.explain": "explain",
    "web.pods": "web",
    "web.pod": "web",
    "web.explain": "web",
    "web.nodes": "web",
    "web.node": "web",
    "web.queues": "web",
    "web.login": "web",
}
SCHEDULING_ENDPOINTS = frozenset(("scheduling.filter_verb", "scheduling.prioritize_verb", "scheduling.bind_verb"))


def _start_timer() -> None:
    g.started = time.perf_counter()
    if request.endpoint in SCHEDULING_ENDPOINTS:
        g.in_flight = current_app.extensions["dra_in_flight"].begin()


def _end_in_flight(_error: BaseException | None) -> None:
    token = g.pop("in_flight", None)
    if token is not None:
        current_app.extensions["dra_in_flight"].end(token)


def _observe(response: Response) -> Response:
    verb = TIMED_ENDPOINTS.get(request.endpoint or "")
    if verb is not None and "started" in g:
        metrics = current_metrics()
        metrics.child(metrics.request_seconds, verb).observe(time.perf_counter() - g.started)
        metrics.child(metrics.requests, verb, str(response.status_code)).inc()
    return response


def create_app(
    service: SchedulingService,
    *,
    metrics: ExtenderMetrics | None = None,
    serve_scheduling: bool = True,
    serve_diagnostics: bool = True,
    serve_metrics: bool | None = None,
    in_flight: InFlight | None = None,
    explain_gate: threading.BoundedSemaphore | None = None,
    people_gate: threading.BoundedSemaphore | None = None,
    self_probe: tuple[str, bool] | None = None,
    authorizer: Authorizer | None = None,
) -> Flask:
    """The app for one listener. With a separate diagnostics listener, the scheduling listener serves only
    kube-scheduler's verbs and health, and the diagnostics listener everything else (people and Prometheus);
    a metrics listener (serve_scheduling=False, serve_diagnostics=False, serve_metrics=True) only /metrics and
    the probes, so it can face the pod network while the diagnostics listener stays on loopback.
    The two apps of one process share `metrics`, `in_flight`, `explain_gate` and `people_gate` (the bound on
    diagnostics requests at once, transport/diagnostics_auth.py), and the service's
    ForegroundWork (transport/foreground.py); the diagnostics app's /livez probes the scheduling listener at
    `self_probe` (address, TLS)."""
    app = Flask("dra-extender")
    limits = service.config.limits.max_body_bytes
    app.config["MAX_CONTENT_LENGTH"] = limits if serve_scheduling else service.config.diagnostics.max_body_bytes
    foreground = foreground_for(service.store)
    app.extensions["dra_service"] = service
    app.extensions["dra_foreground"] = foreground
    app.extensions["dra_metrics"] = metrics if metrics is not None else ExtenderMetrics(service, foreground)
    app.extensions["dra_in_flight"] = in_flight if in_flight is not None else InFlight()
    app.extensions["dra_explain_gate"] = explain_gate or threading.BoundedSemaphore(
        service.config.diagnostics.explain.concurrency
    )
    app.extensions["dra_people_gate"] = people_gate or threading.BoundedSemaphore(
        service.config.diagnostics.concurrency
    )
    app.extensions["dra_allowed_hosts"] = service.config.diagnostics.allowed_hosts
    if self_probe is not None:
        app.extensions["dra_self_probe"] = self_probe
    if authorizer is not None:
        app.extensions["dra_authorizer"] = authorizer
    _register_blueprints(app, serve_scheduling, serve_diagnostics, serve_metrics)
    app.before_request(_start_timer)
    app.before_request(guard_people_requests)  # deny by default: only probes, /metrics and the verbs are open
    app.after_request(_observe)
    app.after_request(people_response_headers)
    app.teardown_request(_end_in_flight)
    app.teardown_request(release_people_gate)
    app.register_error_handler(WireError, bad_request)
    app.register_error_handler(HTTPException, http_error)
    app.register_error_handler(Exception, unexpected_error)
    if serve_scheduling:
        verbs = SchedulingVerbs(app, app.wsgi_app)
        app.wsgi_app = verbs  # type: ignore[method-assign]
        app.extensions["dra_scheduling_verbs"] = verbs  # the server's direct path answers through it too
    return app


def _register_blueprints(
    app: Flask, serve_scheduling: bool, serve_diagnostics: bool, serve_metrics: bool | None
) -> None:
    """The listener's blueprints; /metrics goes with diagnostics unless said otherwise."""
    if serve_scheduling:
        app.register_blueprint(scheduling)
    app.config["DRA_SERVES_DIAGNOSTICS"] = serve_diagnostics
    if serve_diagnostics:
        app.register_blueprint(diagnostics)
        app.register_blueprint(web)  # the read-only web view (transport/views.py): people only, never kube-scheduler
        app.register_blueprint(podgroups)  # a PodGroup, as JSON and as a page of the web view
    if serve_diagnostics if serve_metrics is None else serve_metrics:
        app.register_blueprint(metrics_blueprint)
    app.register_blueprint(health)
