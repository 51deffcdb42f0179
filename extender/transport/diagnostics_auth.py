"""Who may read /diagnostics: the request hook that asks the API server (diagnostics.auth.mode kubernetes).

The reviewer itself is transport/access_review.py (TokenReview + SubjectAccessReview); this hook only takes the
bearer token and the request's path and verb to it, and turns a refusal into 401 or 403, as kube-rbac-proxy does
in front of a component's metrics and debug endpoints.
"""

from __future__ import annotations

from typing import Protocol

from flask import Response, current_app, request

from extender.transport.request_io import error_response


class AccessDecision(Protocol):
    allowed: bool
    status: int
    reason: str


class Authorizer(Protocol):
    """Decides who may read /diagnostics (transport/access_review.py: TokenReview + SubjectAccessReview)."""

    def review(self, token: str, path: str, verb: str = "get") -> AccessDecision: ...


def authorize_diagnostics() -> Response | None:
    """With diagnostics.auth.mode kubernetes: /diagnostics/* only for a bearer token the API server authenticates
    and authorizes for the path; /metrics and the probes stay open, as on kube-rbac-proxy's
    --ignore-paths."""
    authorizer: Authorizer | None = current_app.extensions.get("dra_authorizer")
    # by path too: /diagnostics/podgroups is served by the podgroups blueprint (transport/podgroup_routes.py)
    if authorizer is None or (request.blueprint != "diagnostics" and not request.path.startswith("/diagnostics/")):
        return None
    header = request.headers.get("Authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else ""
    # The verb of a non-resource request is its lowercased HTTP method, as the API server's own RequestInfo
    # makes it: get for the reports, post for /diagnostics/explain.
    decision = authorizer.review(token, request.path, request.method.lower())
    if decision.allowed:
        return None
    response = error_response(decision.reason, decision.status)
    if decision.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="dra-extender diagnostics"'
    return response
