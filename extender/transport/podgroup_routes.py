"""The `podgroups` blueprint: a PodGroup as the extender sees it, as JSON (/diagnostics/podgroups/<ns>/<name>)
and as a page of the web view (/ui/podgroups/<ns>/<name>): its policy and condition, each member and where its
last decision would put it, what the group needs, what it holds, and how its last attempt went
(service/gang_attempts.py). Read-only, for people, like the rest of /diagnostics and /ui; the report itself is
reports/podgroups.py's."""

from __future__ import annotations

from flask import Blueprint, Response, render_template

from extender.reports.podgroups import podgroup_json
from extender.transport.request_io import current_service, error_response, json_response
from extender.transport.views import page_headers, state_footer

podgroups = Blueprint("podgroups", __name__, template_folder="templates")
podgroups.context_processor(state_footer)  # the web view's footer, on the PodGroup page too
podgroups.after_request(page_headers)  # and its security headers


@podgroups.get("/diagnostics/podgroups/<namespace>/<name>")
def podgroup_diagnostics(namespace: str, name: str) -> Response:
    service = current_service()
    status = service.gang_status(namespace, name)
    if status is None:
        return error_response(f"PodGroup {namespace}/{name} is not known to the extender", 404)
    return json_response(podgroup_json(status, service.group_claims(namespace, name)))


@podgroups.get("/ui/podgroups/<namespace>/<name>")
def podgroup_page(namespace: str, name: str) -> tuple[str, int]:
    service = current_service()
    status = service.gang_status(namespace, name)
    report = podgroup_json(status, service.group_claims(namespace, name)) if status is not None else None
    html = render_template("web/podgroup.html", name=f"{namespace}/{name}", report=report)
    return html, 200 if report is not None else 404
