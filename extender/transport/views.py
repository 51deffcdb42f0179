"""The read-only web view: pods and their ranked nodes, the node x device grid, queue bars, for people.

Served wherever the `diagnostics` blueprint is (create_app registers both together): with a separate diagnostics
listener only there, never on the listener kube-scheduler calls. Server-rendered HTML with one stylesheet
shipped in the package and no JavaScript: clusters are often air-gapped, and an operator asking "why is my job
pending" should get an answer from a plain browser.

Every number comes from what the verbs and the JSON diagnostics read: `service.quota_view()` (taken under the
reservation lock only while it is built, then read lock-free), the decision history, `service.explain` (a
what-if that reserves nothing), and the reports built in extender/reports/ (decision_json, node_json,
device_grid, queue_rows, quota_bar, the pods' rows). Nothing here decides or derives anything; it pages, draws
the templates and escapes
(Jinja2 autoescaping is on for .html templates, and the Content-Security-Policy below forbids scripts, so a
name with HTML in it stays text).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import metadata
from typing import Any

import orjson
import yaml
from flask import Blueprint, Response, current_app, redirect, render_template, request, url_for
from werkzeug.exceptions import RequestEntityTooLarge

from extender.kube import strict_objects
from extender.reports.decisions import decision_json, ranked_nodes
from extender.reports.devices import DEVICE_STATES, device_grid, flavor_group, node_json, state_counts
from extender.reports.pods import (
    STATUS_LABELS,
    failure_reasons,
    pod_entries,
    pod_manifest,
    pod_row,
    status_counts,
    status_of,
    whatif_example,
)
from extender.reports.quantities import quantity_text
from extender.reports.queues import queues_page
from extender.state.core import Pod, parse_pod
from extender.state.errors import ObjectError
from extender.transport.diagnostics_auth import TOKEN_COOKIE, login_page
from extender.transport.diagnostics_routes import explain_limits
from extender.transport.request_io import current_service
from extender.transport.wire import WireError

PODS_PER_PAGE = 100
NODE_ROWS_PER_PAGE = 200  # ranked node table of one pod
GRID_NODES_PER_PAGE = 100  # the device grid: 100 nodes x their devices per page
MAX_PER_PAGE = 1000
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

web = Blueprint(
    "web", __name__, url_prefix="/ui", template_folder="templates", static_folder="static", static_url_path="/static"
)


@cache
def extender_version() -> str:
    try:
        return metadata.version("dra-quota-extender")
    except metadata.PackageNotFoundError:
        return "unknown"


def _int_arg(name: str, default: int, *, minimum: int = 1, maximum: int = MAX_PER_PAGE) -> int:
    try:
        value = int(request.args.get(name, default))
    except ValueError:
        return default
    return min(max(value, minimum), maximum)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a long list; the template draws the links from it."""

    number: int
    pages: int
    total: int
    start: int  # index of the first item shown
    items: Sequence[Any] = field(default_factory=tuple)

    @property
    def end(self) -> int:
        return self.start + len(self.items)


def paginate(items: Sequence[Any], number: int, per_page: int) -> Page:
    pages = max(1, math.ceil(len(items) / per_page))
    number = min(max(number, 1), pages)
    start = (number - 1) * per_page
    return Page(number, pages, len(items), start, items[start : start + per_page])


@web.app_template_global("page_url")
def _page_url(page: int) -> str:
    """The current URL with another page number (every other query argument kept)."""
    values: dict[str, Any] = {**(request.view_args or {}), **request.args.to_dict(), "page": page}
    return url_for(request.endpoint or "web.pods", **values)


def _age(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@web.app_template_filter("age")
def _age_filter(seconds: float) -> str:
    return _age(seconds)


@web.context_processor
def state_footer() -> dict[str, Any]:
    """The footer of every page: readiness, snapshot age per watched resource, state and extender version."""
    service = current_service()
    health = service.health()
    snapshot = service.snapshot()
    return {
        "footer": {
            "ready": health.ready and snapshot.synced,
            "message": health.message,
            "source": service.source.description,
            "freshness": sorted(health.freshness_seconds.items()),
            "stateVersion": snapshot.version,
            "version": extender_version(),
        },
    }


@web.context_processor
def _whatif_example() -> dict[str, Any]:
    """The what-if form's example, its text when no pod is given: a Pod naming a LocalQueue this cluster has
    (computed when drawn)."""
    return {"whatif_example": lambda: whatif_example(current_service().snapshot())}


@web.errorhandler(RequestEntityTooLarge)
def _too_large(error: RequestEntityTooLarge) -> tuple[str, int]:
    """A what-if over the diagnostics listener's body limit: the form again with the reason, not the JSON answer
    the API endpoints give (a person pasted it)."""
    limit = current_app.config.get("MAX_CONTENT_LENGTH")
    # create_app gives a listener that also serves kube-scheduler the verbs' limit, a diagnostics listener its own
    option = "limits.maxBodyBytes" if "scheduling" in current_app.blueprints else "diagnostics.maxBodyBytes"
    message = (
        f"The pod text is larger than this listener accepts ({limit} bytes, {option}): "
        "paste only the Pod, or raise the limit."
    )
    return _html("web/explain.html", 413, manifest="", nodes="", error=message)


@web.after_request
def page_headers(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-store"
    return response


def _html(template: str, http_status: int = 200, /, **context: Any) -> tuple[str, int]:
    return render_template(template, **context), http_status


# --- pods ---------------------------------------------------------------------------------------------------------


@web.get("/")
def index() -> Any:
    return redirect(url_for("web.pods"))


@web.get("/pods")
def pods() -> tuple[str, int]:
    """The cluster's governed pods, pending first, each with the last decision this process made for it where
    there is one (kube-scheduler asks only about pods it is scheduling: a pod bound before this process started
    has none), and the pods only the history knows."""
    service = current_service()
    snapshot = service.snapshot()
    entries = pod_entries(snapshot, service.history.recent())
    counts, decided = status_counts(entries)
    page = paginate(entries, _int_arg("page", 1, maximum=1 << 30), _int_arg("per", PODS_PER_PAGE))
    context, now = service.quota_context(snapshot), time.time()
    page = replace(page, items=[pod_row(entry, context, now) for entry in page.items])
    return _html("web/pods.html", page=page, counts=counts, decided=decided, labels=STATUS_LABELS)


def _ranking_context(decision: dict[str, Any]) -> dict[str, Any]:
    ranked = ranked_nodes(decision)
    page = paginate(ranked, _int_arg("page", 1, maximum=1 << 30), _int_arg("per", NODE_ROWS_PER_PAGE))
    return {"decision": decision, "page": page, "reasons": failure_reasons(decision["nodes"])}


@web.get("/pods/<namespace>/<name>")
def pod(namespace: str, name: str) -> tuple[str, int]:
    service = current_service()
    key = f"{namespace}/{name}"
    record = service.last_decision(namespace, name)
    snapshot = service.snapshot()
    current = snapshot.pods.get(key)
    manifest = pod_manifest(current) if current is not None else ""
    status, node = status_of(current)
    facts = {"status": status, "status_label": STATUS_LABELS[status], "bound_node": node}
    if record is None:  # a pod of the cluster kube-scheduler has not asked this process about: 200, rank it below
        http_status = 404 if current is None else 200
        return _html("web/pod.html", http_status, pod_key=key, decision=None, manifest=manifest, whatif=False, **facts)
    decision = decision_json(record.ranking, record)
    return _html(
        "web/pod.html",
        pod_key=key,
        manifest=manifest,
        whatif=False,
        **facts,
        age=max(0.0, time.time() - record.at),
        **_ranking_context(decision),
    )


def _parse_whatif(text: str, yaml_max_bytes: int) -> Pod:
    """The pasted Pod, decoded as POST /diagnostics/explain decodes its body: YAML (aliases refused) only up to
    diagnostics.yamlMaxBytes, JSON beyond."""
    try:
        # beyond the YAML bound, JSON only; a key given twice and aliases are refused (strict_objects.load_documents)
        large = len(text.encode()) > yaml_max_bytes
        documents = [orjson.loads(text)] if large else strict_objects.load_documents(text)
    except orjson.JSONDecodeError as error:
        raise ValueError(
            f"not JSON ({error}); YAML is accepted only up to {yaml_max_bytes} bytes (diagnostics.yamlMaxBytes)"
        ) from None
    except yaml.YAMLError as error:
        raise ValueError(f"not YAML: {strict_objects.yaml_problem(error)}") from None
    except RecursionError:
        raise ValueError("not YAML: nested too deeply") from None
    pods_ = [d for d in documents if isinstance(d, dict) and d.get("kind", "Pod") == "Pod"]
    if not pods_:
        raise ValueError("the text holds no Pod")
    try:
        strict_objects.check(pods_[0])  # a person's manifest: unknown fields refused, as kube-apiserver would
        return parse_pod(pods_[0])
    except ObjectError as error:
        raise ValueError(f"Pod: {error.describe()}") from None
    except strict_objects.StrictDecodingError as error:
        raise ValueError(f"Pod: {error}") from None


@web.route("/explain", methods=["GET", "POST"])
def explain() -> tuple[str, int]:
    """What-if: rank the nodes for a pasted pod now. Reserves nothing (service.explain)."""
    if request.method == "GET":
        return _html("web/explain.html", manifest=request.args.get("pod", ""), nodes="", error="")
    text = request.form.get("pod", "")
    nodes_text = request.form.get("nodes", "")
    service = current_service()
    settings = service.config.diagnostics
    # the gate POST /diagnostics/explain takes: at most diagnostics.explain.concurrency explains at once
    gate: threading.BoundedSemaphore = current_app.extensions["dra_explain_gate"]
    if not gate.acquire(blocking=False):
        busy = f"Too many what-ifs in progress (at most {settings.explain.concurrency}); try again in a moment."
        return _html("web/explain.html", 429, manifest=text, nodes=nodes_text, error=busy)
    try:
        try:
            pod_ = _parse_whatif(text, settings.yaml_max_bytes)
            names = [n for n in nodes_text.replace(",", " ").split() if n] or None
            explain_limits(service, names, settings.explain.max_nodes)
        except (ValueError, WireError) as error:
            return _html("web/explain.html", 400, manifest=text, nodes=nodes_text, error=str(error))
        decision = decision_json(service.explain(pod_, names))
    finally:
        gate.release()
    return _html(
        "web/pod.html", pod_key=pod_.key, manifest=text, nodes=nodes_text, whatif=True, **_ranking_context(decision)
    )


@web.route("/login", methods=["GET", "POST"])
def login() -> Any:
    """With diagnostics.auth.mode kubernetes: a browser cannot add an Authorization header, so the token a person
    pastes here is kept in a cookie (HttpOnly, SameSite=Strict, Secure over TLS, this address only) that the
    auth hook (transport/diagnostics_auth.py) reviews as it would the header. The POST passes the hook's
    cross-site check; the token is not reviewed here but on each page it opens."""
    if request.method == "GET":
        return login_page("", 200)
    target = request.form.get("next", "")
    if not target.startswith("/ui") or target.startswith("//"):  # this site's pages only: no open redirect
        target = url_for("web.pods")
    response = redirect(target, 303)
    token = request.form.get("token", "").strip()
    if not token:
        return login_page("a token is required", 400)
    response.set_cookie(
        TOKEN_COOKIE, token, httponly=True, secure=request.is_secure, samesite="Strict", path="/", max_age=3600
    )
    return response


@web.post("/logout")
def logout() -> Any:
    response = redirect(url_for("web.login"), 303)
    response.delete_cookie(TOKEN_COOKIE, path="/", httponly=True, secure=request.is_secure, samesite="Strict")
    return response


# --- nodes --------------------------------------------------------------------------------------------------------


@web.get("/nodes")
def nodes() -> tuple[str, int]:
    """The device grid (reports/devices.py device_grid), device cells drawn for one page only."""
    service = current_service()
    snapshot = service.snapshot()
    context = service.quota_context(snapshot)  # the context lock only, never the reservation lock
    flavors = sorted(context.flavors.values(), key=lambda f: f.name)
    want_group = request.args.get("flavor", "")
    want_state = request.args.get("state", "")
    query = request.args.get("q", "").strip()
    grid = device_grid(snapshot, flavors, group=want_group, state=want_state, query=query)
    page = paginate(grid.shown, _int_arg("page", 1, maximum=1 << 30), _int_arg("per", GRID_NODES_PER_PAGE))
    return _html(
        "web/nodes.html",
        groups=grid.groups,
        page=page,
        by_group=grid.drawn(page.items),
        states=DEVICE_STATES,
        want_group=want_group,
        want_state=want_state,
        query=query,
        node_count=len(snapshot.nodes),
    )


@web.get("/nodes/<name>")
def node(name: str) -> tuple[str, int]:
    service = current_service()
    snapshot = service.snapshot()
    report = node_json(snapshot, name)
    if report is None:
        return _html("web/node.html", 404, name=name, report=None)
    context = service.quota_context(snapshot)
    flavors = sorted(context.flavors.values(), key=lambda f: f.name)
    counts = state_counts(report)
    return _html(
        "web/node.html",
        name=name,
        report=report,
        group=flavor_group(flavors, snapshot.nodes[name].labels),
        counts=counts,
        states=DEVICE_STATES,
    )


# --- queues -------------------------------------------------------------------------------------------------------


@web.get("/queues")
def queues() -> tuple[str, int]:
    view = current_service().quota_view()  # the reservation lock is held while the view is built, not while drawing
    page = queues_page(view)
    return _html(
        "web/queues.html",
        report=page.report,
        rows=page.bars,
        roots=page.roots,
        alone=page.alone,
        borrowing=page.borrowing,
        reservations=page.reservations,
        fmt=quantity_text,
    )
