"""Inside a Flask request: the body read as data, a JSON answer written, and the service and metrics the app
holds (app.extensions, set by the app factory in transport/app.py)."""

from __future__ import annotations

from typing import Any

import orjson
import yaml
from flask import Response, current_app, request
from werkzeug.exceptions import RequestEntityTooLarge

from extender.kube import strict_objects
from extender.service import SchedulingService
from extender.transport.metrics import ExtenderMetrics
from extender.transport.wire import WireError

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS), status=status, mimetype="application/json")


def error_response(message: str, status: int) -> Response:
    return json_response({"error": message}, status)


def current_service() -> SchedulingService:
    service: SchedulingService = current_app.extensions["dra_service"]
    return service


def current_metrics() -> ExtenderMetrics:
    metrics: ExtenderMetrics = current_app.extensions["dra_metrics"]
    return metrics


def request_body(*, yaml_allowed: bool = False, max_bytes: int | None = None, yaml_max_bytes: int = 0) -> Any:
    """The request body as data: JSON, or (where allowed) YAML when labelled so or when it is not JSON.

    YAML only up to `yaml_max_bytes`: PyYAML's parser is pure Python, slow and memory-hungry on large documents
    (and recursive on deep ones); larger bodies must be JSON, which orjson parses in milliseconds. YAML aliases
    are refused (strict_objects.load_data): expanded, a few kilobytes of them are millions of nodes."""
    data = request.get_data(cache=False)
    if max_bytes is not None and len(data) > max_bytes:
        raise RequestEntityTooLarge(f"request body exceeds the limit of {max_bytes} bytes")
    if not yaml_allowed:
        return json_body(data)
    if not data:
        raise WireError("request body is empty; send a Pod as JSON or YAML")
    if len(data) > yaml_max_bytes:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as error:
            raise WireError(
                f"request body is not valid JSON ({error}); YAML is accepted only up to {yaml_max_bytes} bytes"
            ) from None
    try:
        body = strict_objects.load_data(data) if request.mimetype in YAML_TYPES else None
        return body if body is not None else orjson.loads(data)
    except strict_objects.AliasRefusedError as error:
        raise WireError(f"request body: {strict_objects.yaml_problem(error)}") from None
    except (orjson.JSONDecodeError, yaml.YAMLError, RecursionError):  # PyYAML recurses on deep nesting
        try:
            return strict_objects.load_data(data)
        except strict_objects.AliasRefusedError as error:
            raise WireError(f"request body: {strict_objects.yaml_problem(error)}") from None
        except (yaml.YAMLError, RecursionError) as error:
            raise WireError(f"request body is neither JSON nor YAML: {error}") from None


def json_body(data: bytes) -> Any:
    """A JSON request body as data (kube-scheduler's verbs and bind accept nothing else)."""
    if not data:
        raise WireError("request body is empty; a JSON object is required")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise WireError(f"request body is not valid JSON: {error}") from None
