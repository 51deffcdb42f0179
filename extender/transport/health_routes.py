"""The `health` blueprint, served on every listener: the probes (/healthz, /livez, /readyz) and the API document."""

from __future__ import annotations

import logging
from importlib import resources

import yaml
from flask import Blueprint, Response, current_app

from extender.transport.liveness import probe_listener
from extender.transport.request_io import current_service, json_response

log = logging.getLogger(__name__)

health = Blueprint("health", __name__)


def openapi_document() -> str:
    return resources.files("extender.transport").joinpath("openapi.yaml").read_text(encoding="utf-8")


@health.get("/healthz")
def healthz() -> Response:
    return json_response({"status": "ok"})


@health.get("/livez")
def livez() -> Response:
    """Fails when the request path is wedged (see transport/liveness.py); /healthz only says the process runs."""
    service = current_service()
    settings = service.config.server
    problems = []
    oldest = current_app.extensions["dra_in_flight"].oldest_seconds()
    if oldest > settings.stuck_request_seconds:
        problems.append(f"a scheduling request has been in flight for {oldest:.0f}s")
    # The cluster view heals from whatever the API server does; only a thread of it that ended needs a restart.
    if problem := service.source.liveness_problem():
        problems.append(problem)
    probe = current_app.extensions.get("dra_self_probe")
    if probe is not None:
        address, tls = probe
        problem = probe_listener(address, tls=tls, timeout=settings.liveness_probe_timeout_seconds)
        if problem:
            problems.append(problem)
    if problems:
        log.error("liveness failing: %s", "; ".join(problems))
        return json_response({"status": "wedged", "problems": problems}, 503)
    return json_response({"status": "ok"})


@health.get("/readyz")
def readyz() -> Response:
    service = current_service()
    source_health = service.health()
    snapshot = service.snapshot()
    problem = service.sync_problem()  # the same test that gates filter, prioritize and bind
    ready = not problem
    payload = {
        "ready": ready,
        "message": problem or source_health.message,
        "source": service.source.description,
        "stateVersion": snapshot.version,
        "freshnessSeconds": source_health.freshness_seconds,
    }
    return json_response(payload, 200 if ready else 503)


@health.get("/openapi.yaml")
def openapi_yaml() -> Response:
    return Response(openapi_document(), mimetype="application/yaml")


@health.get("/openapi.json")
def openapi_json() -> Response:
    return json_response(yaml.safe_load(openapi_document()))
