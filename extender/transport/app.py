"""The Flask application: kube-scheduler's verbs, diagnostics, health and metrics over HTTP.

An application factory with blueprints (Flask's own pattern): `scheduling` holds kube-scheduler's verbs,
`diagnostics` what people and Prometheus read, `health` the probes and the API document both listeners answer.
With a separate diagnostics listener the process builds two apps around one service, each with the blueprints
it serves. Handlers only parse, call the service and format; request metrics are taken in request hooks, and
one error handler per kind of failure turns it into a clear status and message.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from http import HTTPStatus
from importlib import resources
from typing import Any, NamedTuple, Protocol

import orjson
import yaml
from flask import Blueprint, Flask, Response, current_app, g, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from extender.decisions.pod_decision import PodDecision
from extender.decisions.ranking import Ranking
from extender.service import BindError, NotSyncedError, SchedulingService
from extender.state.core import parse_pod
from extender.state.errors import ObjectError
from extender.state.foreground import ForegroundWork, RunningMark
from extender.transport.diagnostics import decision_json, node_json, queues_json
from extender.transport.liveness import InFlight, probe_listener
from extender.transport.metrics import ExtenderMetrics
from extender.transport.views import web
from extender.transport.wire import (
    DIAGNOSTICS_ELSEWHERE,
    DIAGNOSTICS_ELSEWHERE_MESSAGE,
    WireError,
    filter_error,
    filter_result,
    host_priority_list,
    parse_binding_args,
    parse_extender_args,
    prioritize_result,
)

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
# A verb's answer to a parsed request body: a payload to encode, or bytes encoded already.
VerbAnswer = Callable[[SchedulingService, ExtenderMetrics, Any], Any]

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")

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
}
SCHEDULING_ENDPOINTS = frozenset(("scheduling.filter_verb", "scheduling.prioritize_verb", "scheduling.bind_verb"))


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS), status=status, mimetype="application/json")


def _error(message: str, status: int) -> Response:
    return _json({"error": message}, status)


def _service() -> SchedulingService:
    service: SchedulingService = current_app.extensions["dra_service"]
    return service


def _metrics() -> ExtenderMetrics:
    metrics: ExtenderMetrics = current_app.extensions["dra_metrics"]
    return metrics


def request_body(*, yaml_allowed: bool = False, max_bytes: int | None = None, yaml_max_bytes: int = 0) -> Any:
    """The request body as data: JSON, or (where allowed) YAML when labelled so or when it is not JSON.

    YAML only up to `yaml_max_bytes`: PyYAML's pure-Python parser took ~82 s and ~500 MiB for a 7.6 MiB body
    (issue 15); larger bodies must be JSON, which orjson parses in milliseconds."""
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
        body = yaml.safe_load(data) if request.mimetype in YAML_TYPES else None
        return body if body is not None else orjson.loads(data)
    except (orjson.JSONDecodeError, yaml.YAMLError, RecursionError):  # PyYAML recurses on deep nesting
        try:
            return yaml.safe_load(data)
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


def openapi_document() -> str:
    return resources.files("extender.transport").joinpath("openapi.yaml").read_text(encoding="utf-8")


# --- kube-scheduler's verbs ---------------------------------------------------------------------------------------

scheduling = Blueprint("scheduling", __name__)


class PrioritizeAhead:
    """prioritize's answers made ahead: once filter's answer is written, the pod's ranking (SchedulingService.
    rank_ahead) and its HostPriorityList encoded for the nodes filter passed, while kube-scheduler runs its own
    score plugins; prioritize, inside the serial cycle, then answers with those bytes when it is handed that
    very ranking (the service hands it out only for the very list filter passed). One answer is kept: the
    scheduling cycle is serial, and a second scheduler's pod in between only means encoding as before."""

    __slots__ = ("_answer", "service")

    def __init__(self, service: SchedulingService) -> None:
        self.service = service
        self._answer: tuple[Ranking, bytes] | None = None

    def follow(self, decision: PodDecision) -> Callable[[], None]:
        """The work to do once filter's answer for `decision` is written (the service says whether there is any:
        a pod with nothing of ours to decide, or refused everywhere, has nothing to score)."""
        return partial(self._make, decision)

    def _make(self, decision: PodDecision) -> None:
        ranking = self.service.rank_ahead(decision)
        if ranking is not None:
            self._answer = (ranking, host_priority_list(decision.passed, ranking))

    def answer(self, ranking: Ranking) -> bytes | None:
        """The encoded answer made ahead for this very ranking, if it was."""
        made = self._answer
        return made[1] if made is not None and made[0] is ranking else None


class FollowedAnswer(NamedTuple):
    """A verb's payload, and the work to do once the server has written it (filter's: PrioritizeAhead)."""

    payload: Any
    then: Callable[[], None]


def answer_filter(
    service: SchedulingService, metrics: ExtenderMetrics, body: Any, ahead: PrioritizeAhead | None = None
) -> Any:
    """ExtenderFilterResult for a parsed ExtenderArgs body (WireError for one that breaks the protocol). With
    `ahead`, a FollowedAnswer when prioritize's answer can be made once this one is written."""
    args = parse_extender_args(body, max_nodes=service.config.limits.max_nodes_per_request, stored=service.stored_pod)
    try:
        decision = service.filter(args.pod, args.node_names)
    except NotSyncedError as error:
        metrics.child(metrics.filter_outcomes, "not-synced").inc()
        return filter_error(str(error))
    metrics.child(metrics.nodes_evaluated, "filter").inc(len(args.node_names))
    if decision.fast_path:
        metrics.child(metrics.fast_path, "filter").inc()
    for category, count in decision.outcome_counts().items():
        metrics.child(metrics.filter_outcomes, category).inc(count)
    result = filter_result(args, decision)
    return result if ahead is None else FollowedAnswer(result, ahead.follow(decision))


def answer_prioritize(
    service: SchedulingService,
    metrics: ExtenderMetrics,
    body: Any,
    encoded: bool = False,
    ahead: PrioritizeAhead | None = None,
) -> Any:
    """HostPriorityList for a parsed ExtenderArgs body; raises NotSyncedError when verdicts cannot be given.
    With `encoded`, the list comes encoded already (bytes: wire.host_priority_list, or the answer `ahead` made
    of the very ranking the service hands back)."""
    args = parse_extender_args(body, max_nodes=service.config.limits.max_nodes_per_request, stored=service.stored_pod)
    ranking = service.prioritize(args.pod, args.node_names)
    metrics.child(metrics.nodes_evaluated, "prioritize").inc(len(args.node_names))
    if ranking.decision.fast_path:
        metrics.child(metrics.fast_path, "prioritize").inc()
    if encoded:
        made = ahead.answer(ranking) if ahead is not None else None
        return made if made is not None else host_priority_list(args.node_names, ranking)
    return prioritize_result(args, ranking)


@scheduling.post("/filter")
def filter_verb() -> Response:
    """Reached only when SchedulingVerbs hands the request on (no Content-Length, or over the body limit)."""
    return _json(answer_filter(_service(), _metrics(), request_body()))


@scheduling.post("/prioritize")
def prioritize_verb() -> Response:
    """As filter_verb: SchedulingVerbs answers the requests that carry a Content-Length."""
    try:
        return _json(answer_prioritize(_service(), _metrics(), request_body()))
    except NotSyncedError as error:
        # HostPriorityList has no Error field; kube-scheduler logs a failed prioritize and scores without us.
        return _error(str(error), 503)


@scheduling.post("/bind")
def bind_verb() -> Response:
    service = _service()
    if not service.config.bind.enabled:
        return _error("the bind verb is disabled (set bind.enabled: true in the extender config)", 404)
    args = parse_binding_args(request_body())
    try:
        service.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
    except BindError as error:
        return _json({"Error": str(error)})
    return _json({"Error": ""})


# --- what people and Prometheus read ------------------------------------------------------------------------------

diagnostics = Blueprint("diagnostics", __name__)


@diagnostics.get("/diagnostics/pods/<namespace>/<name>")
def pod_diagnostics(namespace: str, name: str) -> Response:
    record = _service().last_decision(namespace, name)
    if record is None:
        return _error(f"no decision recorded for pod {namespace}/{name}", 404)
    return _json(decision_json(record.ranking, record))


@diagnostics.post("/diagnostics/explain")
def explain() -> Response:
    """A what-if decision: bounded in body size, YAML size, nodes, time and concurrency (it runs the full
    search over every node asked about, on the threads kube-scheduler's verbs use)."""
    service = _service()
    settings = service.config.diagnostics
    gate: threading.BoundedSemaphore = current_app.extensions["dra_explain_gate"]
    if not gate.acquire(blocking=False):
        return _error(f"too many explain requests in progress (at most {settings.explain.concurrency}); retry", 429)
    try:
        return _explain(service, settings)
    finally:
        gate.release()


def _explain(service: SchedulingService, settings: Any) -> Response:
    body = request_body(yaml_allowed=True, max_bytes=settings.max_body_bytes, yaml_max_bytes=settings.yaml_max_bytes)
    if not isinstance(body, dict):
        raise WireError("request body must be a Pod object")
    if body.get("kind") not in (None, "Pod"):
        raise WireError(f"request body must be a Pod, got kind {body.get('kind')!r}")
    try:
        pod = parse_pod(body)
    except ObjectError as error:
        raise WireError(f"Pod: {error.describe()}") from None
    nodes = request.args.getlist("node") or None
    limit = settings.explain.max_nodes
    if nodes is not None and len(nodes) > limit:
        raise WireError(f"{len(nodes)} nodes asked about; the limit is {limit} (diagnostics.explain.maxNodes)")
    if nodes is None and len(known := service.snapshot().nodes) > limit:
        raise WireError(
            f"the cluster has {len(known)} nodes, more than diagnostics.explain.maxNodes ({limit}): "
            "name the nodes to explain with ?node=NAME (repeatable)"
        )
    return _json(decision_json(service.explain(pod, nodes)))


@diagnostics.get("/diagnostics/nodes/<name>")
def node_diagnostics(name: str) -> Response:
    report = node_json(_service().snapshot(), name)
    if report is None:
        return _error(f"node {name} is not known to the extender", 404)
    return _json(report)


@diagnostics.get("/diagnostics/queues")
def queue_diagnostics() -> Response:
    service = _service()
    view = service.quota_view()
    return _json(queues_json(view, service.unplaced_workloads(view.snapshot)))


metrics_blueprint = Blueprint("metrics", __name__)


@metrics_blueprint.get("/metrics")
def metrics_endpoint() -> Response:
    return Response(generate_latest(_metrics().registry), mimetype=CONTENT_TYPE_LATEST)


# --- probes and the API document (both listeners) -----------------------------------------------------------------

health = Blueprint("health", __name__)


@health.get("/healthz")
def healthz() -> Response:
    return _json({"status": "ok"})


@health.get("/livez")
def livez() -> Response:
    """Fails when the request path is wedged (see transport/liveness.py); /healthz only says the process runs."""
    service = _service()
    settings = service.config.server
    problems = []
    oldest = current_app.extensions["dra_in_flight"].oldest_seconds()
    if oldest > settings.stuck_request_seconds:
        problems.append(f"a scheduling request has been in flight for {oldest:.0f}s")
    probe = current_app.extensions.get("dra_self_probe")
    if probe is not None:
        address, tls = probe
        problem = probe_listener(address, tls=tls, timeout=settings.liveness_probe_timeout_seconds)
        if problem:
            problems.append(problem)
    if problems:
        log.error("liveness failing: %s", "; ".join(problems))
        return _json({"status": "wedged", "problems": problems}, 503)
    return _json({"status": "ok"})


@health.get("/readyz")
def readyz() -> Response:
    service = _service()
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
    return _json(payload, 200 if ready else 503)


@health.get("/openapi.yaml")
def openapi_yaml() -> Response:
    return Response(openapi_document(), mimetype="application/yaml")


@health.get("/openapi.json")
def openapi_json() -> Response:
    return _json(yaml.safe_load(openapi_document()))


# --- the factory --------------------------------------------------------------------------------------------------


def _start_timer() -> None:
    g.started = time.perf_counter()
    if request.endpoint in SCHEDULING_ENDPOINTS:
        g.in_flight = current_app.extensions["dra_in_flight"].begin()


class AccessDecision(Protocol):
    allowed: bool
    status: int
    reason: str


class Authorizer(Protocol):
    """Decides who may read /diagnostics (transport/access_review.py: TokenReview + SubjectAccessReview)."""

    def review(self, token: str, path: str, verb: str = "get") -> AccessDecision: ...


def _authorize() -> Response | None:
    """With diagnostics.auth.mode kubernetes: /diagnostics/* only for a bearer token the API server authenticates
    and authorizes for the path; /metrics and the probes stay open, as on kube-rbac-proxy's
    --ignore-paths."""
    authorizer: Authorizer | None = current_app.extensions.get("dra_authorizer")
    if authorizer is None or request.blueprint != "diagnostics":
        return None
    header = request.headers.get("Authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else ""
    # The verb of a non-resource request is its lowercased HTTP method, as the API server's own RequestInfo
    # makes it: get for the reports, post for /diagnostics/explain.
    decision = authorizer.review(token, request.path, request.method.lower())
    if decision.allowed:
        return None
    response = _error(decision.reason, decision.status)
    if decision.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="dra-extender diagnostics"'
    return response


def _end_in_flight(_error: BaseException | None) -> None:
    token = g.pop("in_flight", None)
    if token is not None:
        current_app.extensions["dra_in_flight"].end(token)


def _observe(response: Response) -> Response:
    verb = TIMED_ENDPOINTS.get(request.endpoint or "")
    if verb is not None and "started" in g:
        metrics = _metrics()
        metrics.child(metrics.request_seconds, verb).observe(time.perf_counter() - g.started)
        metrics.child(metrics.requests, verb, str(response.status_code)).inc()
    return response


def _bad_request(error: WireError) -> Response:
    return _error(str(error), 400)


def _is_diagnostics_path() -> bool:
    path = request.path
    return path.startswith("/diagnostics") or path == "/ui" or path.startswith("/ui/")


def _http_error(error: HTTPException) -> Response:
    if isinstance(error, RequestEntityTooLarge):
        limit = current_app.config["MAX_CONTENT_LENGTH"]
        description = error.description if str(error.description).startswith("request body exceeds") else ""
        return _error(description or f"request body exceeds the limit of {limit} bytes", 413)
    if error.code == 404 and not current_app.config.get("DRA_SERVES_DIAGNOSTICS") and _is_diagnostics_path():
        # A listener without diagnostics (the deployment's metrics listener on the pod IP, reached by the kubectl
        # plugin through the Service proxy): say where they are, so the plugin computes locally instead.
        return _json({"error": DIAGNOSTICS_ELSEWHERE_MESSAGE, "reason": DIAGNOSTICS_ELSEWHERE}, 404)
    response = _error(f"{error.name}: {error.description}", error.code or 500)
    # Keep werkzeug's protocol headers (Allow on 405, as RFC 9110 requires); the body is ours.
    response.headers.extend((k, v) for k, v in error.get_headers() if k.lower() != "content-type")
    return response


def internal_error(method: str, path: str) -> tuple[dict[str, str], str]:
    """The answer to an unexpected exception (being handled): the exception goes to the log under a request
    id; the client gets the id, never the exception's text (it can hold object names, paths, or what an API
    server said). Returns the JSON body and the id (for the X-Request-Id header)."""
    request_id = uuid.uuid4().hex[:16]
    log.exception(
        "unexpected error answering %s %s (request id %s)", method, path, request_id, extra={"requestId": request_id}
    )
    return {"error": f"internal error; the extender's log has the details under request id {request_id}"}, request_id


def _unexpected(error: Exception) -> Response:
    payload, request_id = internal_error(request.method, request.path)
    response = _json(payload, 500)
    response.headers["X-Request-Id"] = request_id
    return response


class SchedulingVerbs:
    """kube-scheduler's filter and prioritize, answered straight from WSGI (the middleware pattern Flask
    documents: the app's `wsgi_app` wrapped), without a request context, URL matching and request hooks.

    kube-scheduler waits for these two inside its serial scheduling cycle, for every pod; Flask's machinery
    measured 180-250 us of CPU per request in-process, against 45-100 us for the rest of a claimless one-node
    filter. Everything else goes to Flask, and so do these two when they lack a Content-Length (chunked) or
    exceed the body limit, so that werkzeug's own handling and the 413 stay the only ones. What the Flask path
    does for a request is done here too, with the same functions: the request metrics and the in-flight record
    (liveness), the body parse and its 400s, the verb (answer_filter, answer_prioritize), the 503 of an unsynced
    prioritize and the 500 with a request id (internal_error). The server's direct path (transport/direct_http.py),
    which reads the verbs' requests off the connection without gunicorn's parser, calls `respond` as this WSGI
    entry does."""

    def __init__(self, app: Flask, wsgi_app: WSGIApp) -> None:
        self.wsgi_app = wsgi_app
        self.service: SchedulingService = app.extensions["dra_service"]
        self.metrics: ExtenderMetrics = app.extensions["dra_metrics"]
        self.in_flight: InFlight = app.extensions["dra_in_flight"]
        self.max_body_bytes: int = app.config["MAX_CONTENT_LENGTH"]
        self.ahead = PrioritizeAhead(self.service)
        self.verbs: dict[str, tuple[str, VerbAnswer]] = {
            "/filter": ("filter", partial(answer_filter, ahead=self.ahead)),
            "/prioritize": ("prioritize", partial(answer_prioritize, encoded=True, ahead=self.ahead)),
        }
        self.paths = frozenset(self.verbs)  # what the server's direct path (transport/direct_http.py) hands us
        self.foreground: ForegroundWork = self.service.store.foreground

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        length = environ.get("CONTENT_LENGTH") or ""
        if (
            path not in self.verbs
            or environ.get("REQUEST_METHOD") != "POST"
            or not length.isdigit()
            or int(length) > self.max_body_bytes
        ):
            return self.wsgi_app(environ, start_response)
        status, headers, answer = self.respond(path, environ["wsgi.input"].read(int(length)))
        start_response(f"{status} {HTTPStatus(status).phrase}", headers)
        return answer

    def respond(self, path: str, body: bytes) -> tuple[int, list[tuple[str, str]], _WrittenAnswer]:
        """The answer to a POST of `body` to one of the verbs' paths: status, headers (with Content-Length) and
        the body, whose `close` the server calls once it has written it."""
        verb, answer = self.verbs[path]
        # kube-scheduler waits for this answer: the extender's background threads hold off meanwhile
        # (state/foreground.py), from the body's parse until the server has written the answer and closes it.
        running = self.foreground.mark()
        try:
            status, headers, encoded, then = self._serve(verb, answer, path, body)
            return status, headers, _WrittenAnswer(encoded, running, then)
        except BaseException:
            running.end()
            raise

    def _serve(
        self, verb: str, answer: VerbAnswer, path: str, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes, Callable[[], None] | None]:
        started = time.perf_counter()
        token = self.in_flight.begin()
        headers = [("Content-Type", "application/json")]
        then: Callable[[], None] | None = None
        try:
            status, payload = 200, answer(self.service, self.metrics, json_body(body))
            if type(payload) is FollowedAnswer:
                payload, then = payload
        except WireError as error:
            status, payload = 400, {"error": str(error)}
        except NotSyncedError as error:  # prioritize only (filter answers it in its Error field)
            status, payload = 503, {"error": str(error)}
        except Exception:
            status = 500
            payload, request_id = internal_error("POST", path)
            headers.append(("X-Request-Id", request_id))
        finally:
            self.in_flight.end(token)
        encoded = payload if type(payload) is bytes else orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS)
        headers.append(("Content-Length", str(len(encoded))))
        self.metrics.child(self.metrics.request_seconds, verb).observe(time.perf_counter() - started)
        self.metrics.child(self.metrics.requests, verb, str(status)).inc()
        return status, headers, encoded, then


class _WrittenAnswer(list[bytes]):
    """A verb's answer as the WSGI iterable; the server calls `close` once it has written it (PEP 3333, also
    when the write failed), which ends the verb's foreground mark and then runs the verb's follow-up work
    (`then`: PrioritizeAhead's, which kube-scheduler does not wait for). The server writes the headers and the
    body with a system call each: a watch thread woken meanwhile would otherwise take the interpreter between
    them and hold kube-scheduler's answer back by one event's work."""

    __slots__ = ("_running", "_then")

    def __init__(self, encoded: bytes, running: RunningMark, then: Callable[[], None] | None = None) -> None:
        super().__init__((encoded,))
        self._running = running
        self._then = then

    def close(self) -> None:
        self._running.end()
        then, self._then = self._then, None  # a second close runs nothing
        if then is not None:
            try:
                then()
            except Exception:  # the answer is out: a failure here only means prioritize does the work itself
                log.exception("making prioritize's answer ahead failed")


def create_app(
    service: SchedulingService,
    *,
    metrics: ExtenderMetrics | None = None,
    serve_scheduling: bool = True,
    serve_diagnostics: bool = True,
    serve_metrics: bool | None = None,
    in_flight: InFlight | None = None,
    explain_gate: threading.BoundedSemaphore | None = None,
    self_probe: tuple[str, bool] | None = None,
    authorizer: Authorizer | None = None,
) -> Flask:
    """The app for one listener. With a separate diagnostics listener, the scheduling listener serves only
    kube-scheduler's verbs and health, and the diagnostics listener everything else (people and Prometheus);
    a metrics listener (serve_scheduling=False, serve_diagnostics=False, serve_metrics=True) only /metrics and
    the probes, so it can face the pod network while the diagnostics listener stays on loopback.
    The two apps of one process share `metrics`, `in_flight` and `explain_gate`; the diagnostics app's /livez
    probes the scheduling listener at `self_probe` (address, TLS)."""
    app = Flask("dra-extender")
    limits = service.config.limits.max_body_bytes
    app.config["MAX_CONTENT_LENGTH"] = limits if serve_scheduling else service.config.diagnostics.max_body_bytes
    app.extensions["dra_service"] = service
    app.extensions["dra_metrics"] = metrics if metrics is not None else ExtenderMetrics(service)
    app.extensions["dra_in_flight"] = in_flight if in_flight is not None else InFlight()
    app.extensions["dra_explain_gate"] = explain_gate or threading.BoundedSemaphore(
        service.config.diagnostics.explain.concurrency
    )
    if self_probe is not None:
        app.extensions["dra_self_probe"] = self_probe
    if authorizer is not None:
        app.extensions["dra_authorizer"] = authorizer
    if serve_scheduling:
        app.register_blueprint(scheduling)
    app.config["DRA_SERVES_DIAGNOSTICS"] = serve_diagnostics
    if serve_diagnostics:
        app.register_blueprint(diagnostics)
        app.register_blueprint(web)  # the read-only web view (transport/views.py): people only, never kube-scheduler
    if serve_diagnostics if serve_metrics is None else serve_metrics:
        app.register_blueprint(metrics_blueprint)
    app.register_blueprint(health)
    app.before_request(_start_timer)
    app.before_request(_authorize)
    app.after_request(_observe)
    app.teardown_request(_end_in_flight)
    app.register_error_handler(WireError, _bad_request)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
    if serve_scheduling:
        verbs = SchedulingVerbs(app, app.wsgi_app)
        app.wsgi_app = verbs  # type: ignore[method-assign]
        app.extensions["dra_scheduling_verbs"] = verbs  # the server's direct path answers through it too
    return app
