"""Who may read what people read (the diagnostics, the web view, the what-if form), in one request hook that
every listener's app runs before any handler.

One rule, deny by default: a request is open only when it is for a probe (/healthz, /livez, /readyz), the API
document, /metrics, or one of kube-scheduler's verbs on the listener that serves them (those are guarded by the
listener itself: loopback, or client certificates pinned to kube-scheduler, transport/server.py). Everything else,
including a path no handler serves, is a request for people's data and goes through, in order:

1. **the people gate**: at most `diagnostics.concurrency` such requests at once in the process (429 beyond), so
   that reviews, explains and page renders can never take the worker threads kube-scheduler's verbs need;
2. **the Host check** (DNS rebinding), on a listener that serves diagnostics: the Host header must be an IP
   literal, ``localhost``, or a name in `diagnostics.allowedHosts`; a web page on a name its author controls,
   pointed at 127.0.0.1, is refused;
3. **the cross-site check** for anything but GET and HEAD: a browser's ``Sec-Fetch-Site`` must not be
   ``cross-site`` or ``same-site``, and ``Origin`` (or, without one, ``Referer``) must name this very host: a
   page elsewhere cannot post to an operator's port-forward. Clients that are not browsers send neither header
   and are not affected;
4. with `diagnostics.auth.mode: kubernetes`, **the token**: a bearer token in the Authorization header (or the
   web view's login cookie, set by /ui/login) that the API server authenticates (TokenReview) and authorizes for
   the request's non-resource path and verb (SubjectAccessReview), as kube-rbac-proxy checks the tokens in front
   of a component's endpoints. The reviewer is transport/access_review.py.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterable
from typing import Protocol
from urllib.parse import urlsplit

from flask import Response, current_app, g, render_template, request

from extender.transport.request_io import error_response

# The blueprints that stay open: the probes and the API document (health), scrapes (metrics), the verbs.
OPEN_BLUEPRINTS = frozenset(("health", "metrics", "scheduling"))
# The web view's login page: open, it only takes a token into the browser's cookie (transport/views.py).
OPEN_ENDPOINTS = frozenset(("web.login", "web.logout"))
TOKEN_COOKIE = "dra-extender-token"
SAFE_METHODS = frozenset(("GET", "HEAD"))
CROSS_SITE = frozenset(("cross-site", "same-site"))
# The web view's policy (transport/views.py CSP) for the login page this hook draws itself.
LOGIN_CSP = "default-src 'none'; style-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"


class AccessDecision(Protocol):
    allowed: bool
    status: int
    reason: str


class Authorizer(Protocol):
    """Decides who may read what people read (transport/access_review.py: TokenReview + SubjectAccessReview)."""

    def review(self, token: str, path: str, verb: str = "get") -> AccessDecision: ...


def guard_people_requests() -> Response | None:
    """The request hook: None to let the request through, or the refusal (see the module docstring)."""
    if request.blueprint in OPEN_BLUEPRINTS and request.endpoint is not None:
        return None
    gate: threading.BoundedSemaphore | None = current_app.extensions.get("dra_people_gate")
    if gate is not None:
        if not gate.acquire(blocking=False):
            response = error_response("too many diagnostics requests in progress (diagnostics.concurrency); retry", 429)
            response.headers["Retry-After"] = "1"
            return response
        g.people_gate = gate
    refusal = None
    if current_app.config.get("DRA_SERVES_DIAGNOSTICS"):  # a listener without them has nothing to rebind to
        refusal = host_refusal(request.host, current_app.extensions.get("dra_allowed_hosts", ()))
    status = 400  # as a server answers a Host it does not serve
    if refusal is None and request.method not in SAFE_METHODS:
        refusal = cross_site_refusal()
        status = 403
    if refusal is not None:
        return error_response(refusal, status)
    if request.endpoint in OPEN_ENDPOINTS:
        return None
    return _authorize()


def people_response_headers(response: Response) -> Response:
    """What people read is neither cached by browsers and proxies nor sniffed into another type (the web view adds
    its Content-Security-Policy, transport/views.py)."""
    if request.blueprint not in OPEN_BLUEPRINTS:
        response.headers.setdefault("Cache-Control", "no-store")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


def release_people_gate(_error: BaseException | None) -> None:
    gate = g.pop("people_gate", None)
    if gate is not None:
        gate.release()


def request_token() -> str:
    """The bearer token of the Authorization header, else the web view's login cookie ("" when neither)."""
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    if header:
        return ""  # another scheme (Basic, ...): not a token, and no fallback to the cookie
    return request.cookies.get(TOKEN_COOKIE, "")


def _authorize() -> Response | None:
    authorizer: Authorizer | None = current_app.extensions.get("dra_authorizer")
    if authorizer is None:
        return None
    # The verb of a non-resource request is its lowercased HTTP method, as the API server's own RequestInfo
    # makes it: get for the reports and pages, post for the explains.
    decision = authorizer.review(request_token(), request.path, request.method.lower())
    if decision.allowed:
        return None
    if decision.status == 401 and _wants_page():
        response = login_page(decision.reason, 401)
    else:
        response = error_response(decision.reason, decision.status)
    if decision.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="dra-extender diagnostics"'
    return response


def _wants_page() -> bool:
    """A browser asking for a page of the web view: it gets the login form with the 401, not JSON."""
    return (request.path == "/ui" or request.path.startswith("/ui/")) and "text/html" in request.headers.get(
        "Accept", ""
    )


def login_page(message: str, status: int) -> Response:
    """The web view's login form (templates/web/login.html) with why it is shown."""
    page = render_template("web/login.html", error=message, next=request.full_path.rstrip("?"))
    response = Response(page, status=status, mimetype="text/html")
    response.headers["Content-Security-Policy"] = LOGIN_CSP
    response.headers["Cache-Control"] = "no-store"
    return response


def _host_name(netloc: str) -> str:
    """The host of a HOST[:PORT] (IPv6 literals in brackets), lowercased."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        return netloc[1 : netloc.find("]")] if "]" in netloc else netloc
    return netloc.rpartition(":")[0] if netloc.count(":") == 1 else netloc


def host_refusal(host: str, allowed: Iterable[str]) -> str | None:
    """Why the Host header cannot be served (None when it can): an IP literal and ``localhost`` always can (a
    DNS rebinding attack needs a name its author controls); other names only when `diagnostics.allowedHosts`
    lists them (``.example.com`` also allows its subdomains)."""
    name = _host_name(host)
    if not name:
        return "the request has no Host header"
    if name in ("localhost", "localhost.") or name.endswith(".localhost"):
        return None
    try:
        ipaddress.ip_address(name)
        return None
    except ValueError:
        pass
    for entry in allowed:
        entry = entry.lower()
        if name == entry or name == entry.rstrip(".") or (entry.startswith(".") and name.endswith(entry)):
            return None
    return (
        f"Host {name!r} is not served: diagnostics answer an IP address, localhost, or a name listed in "
        "diagnostics.allowedHosts"
    )


def _default_port(scheme: str) -> str:
    return "443" if scheme == "https" else "80"


def _same_origin(url: str) -> bool:
    """Whether `url` (an Origin or Referer) has this request's host and port."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    own = urlsplit(f"{request.scheme}://{request.host}")
    return (parts.hostname, str(parts.port or _default_port(parts.scheme))) == (
        own.hostname,
        str(own.port or _default_port(request.scheme)),
    )


def cross_site_refusal() -> str | None:
    """Why a state-changing request looks sent by a page of another site (None when it does not)."""
    if request.headers.get("Sec-Fetch-Site", "").lower() in CROSS_SITE:
        return "cross-site request refused (Sec-Fetch-Site)"
    origin = request.headers.get("Origin")
    if origin is not None:
        return None if _same_origin(origin) else f"cross-site request refused: Origin {origin!r} is not this host"
    referer = request.headers.get("Referer")
    if referer is not None and not _same_origin(referer):
        return "cross-site request refused: Referer is not this host"
    return None
