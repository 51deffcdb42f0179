"""The `metrics` blueprint: /metrics in Prometheus' text format (the families: transport/metrics.py)."""

from __future__ import annotations

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from extender.transport.request_io import current_metrics

metrics_blueprint = Blueprint("metrics", __name__)


@metrics_blueprint.get("/metrics")
def metrics_endpoint() -> Response:
    return Response(generate_latest(current_metrics().registry), mimetype=CONTENT_TYPE_LATEST)
