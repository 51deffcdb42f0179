"""The app's error handlers: one per kind of failure, each turning it into a clear status and JSON message."""

from __future__ import annotations

import logging
import uuid

from flask import Response, current_app, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from extender.reports.answers import DIAGNOSTICS_ELSEWHERE, DIAGNOSTICS_ELSEWHERE_MESSAGE
from extender.transport.logs import current_request_id
from extender.transport.request_io import error_response, json_response
from extender.transport.wire import WireError

log = logging.getLogger(__name__)


def bad_request(error: WireError) -> Response:
    return error_response(str(error), 400)


def _is_diagnostics_path() -> bool:
    path = request.path
    return path.startswith("/diagnostics") or path == "/ui" or path.startswith("/ui/")


def http_error(error: HTTPException) -> Response:
    if isinstance(error, RequestEntityTooLarge):
        limit = current_app.config["MAX_CONTENT_LENGTH"]
        description = error.description if str(error.description).startswith("request body exceeds") else ""
        return error_response(description or f"request body exceeds the limit of {limit} bytes", 413)
    if error.code == 404 and not current_app.config.get("DRA_SERVES_DIAGNOSTICS") and _is_diagnostics_path():
        # A listener without diagnostics (the deployment's metrics listener on the pod IP, reached by the kubectl
        # plugin through the Service proxy): say where they are, so the plugin computes locally instead.
        return json_response({"error": DIAGNOSTICS_ELSEWHERE_MESSAGE, "reason": DIAGNOSTICS_ELSEWHERE}, 404)
    response = error_response(f"{error.name}: {error.description}", error.code or 500)
    # Keep werkzeug's protocol headers (Allow on 405, as RFC 9110 requires); the body is ours.
    response.headers.extend((k, v) for k, v in error.get_headers() if k.lower() != "content-type")
    return response


def internal_error(method: str, path: str) -> tuple[dict[str, str], str]:
    """The answer to an unexpected exception (being handled): the exception goes to the log under a request
    id; the client gets the id, never the exception's text (it can hold object names, paths, or what an API
    server said). Returns the JSON body and the id (for the X-Request-Id header)."""
    request_id = current_request_id() or uuid.uuid4().hex[:16]
    log.exception(
        "unexpected error answering %s %s (request id %s)", method, path, request_id, extra={"requestId": request_id}
    )
    return {"error": f"internal error; the extender's log has the details under request id {request_id}"}, request_id


def unexpected_error(error: Exception) -> Response:
    payload, request_id = internal_error(request.method, request.path)
    response = json_response(payload, 500)
    response.headers["X-Request-Id"] = request_id
    return response
