"""The `scheduling` blueprint: kube-scheduler's verbs (filter, prioritize, bind) as Flask routes.

filter and prioritize are answered by the WSGI fast path (transport/verb_fast_path.py) whenever their request
carries a Content-Length within the body limit; these routes answer the rest, through the same functions
(transport/verb_answers.py).
"""

from __future__ import annotations

from flask import Blueprint, Response

from extender.service import BindError, NotSyncedError
from extender.transport.request_io import (
    current_metrics,
    current_service,
    error_response,
    json_response,
    request_body,
)
from extender.transport.verb_answers import answer_filter, answer_prioritize
from extender.transport.wire import parse_binding_args

scheduling = Blueprint("scheduling", __name__)


@scheduling.post("/filter")
def filter_verb() -> Response:
    """Reached only when SchedulingVerbs hands the request on (no Content-Length, or over the body limit)."""
    return json_response(answer_filter(current_service(), current_metrics(), request_body()))


@scheduling.post("/prioritize")
def prioritize_verb() -> Response:
    """As filter_verb: SchedulingVerbs answers the requests that carry a Content-Length."""
    try:
        return json_response(answer_prioritize(current_service(), current_metrics(), request_body()))
    except NotSyncedError as error:
        # HostPriorityList has no Error field; kube-scheduler logs a failed prioritize and scores without us.
        return error_response(str(error), 503)


@scheduling.post("/bind")
def bind_verb() -> Response:
    service = current_service()
    if not service.config.bind.enabled:
        return error_response("the bind verb is disabled (set bind.enabled: true in the extender config)", 404)
    args = parse_binding_args(request_body())
    try:
        service.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
    except BindError as error:
        return json_response({"Error": str(error)})
    return json_response({"Error": ""})
