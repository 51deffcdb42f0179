"""kube-scheduler's filter and prioritize answered straight from WSGI, without Flask's request machinery."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from functools import partial
from http import HTTPStatus
from typing import Any

import orjson
from flask import Flask

from extender.service import NotSyncedError, SchedulingService
from extender.transport.error_answers import internal_error
from extender.transport.foreground import ForegroundWork, RunningMark
from extender.transport.liveness import InFlight
from extender.transport.metrics import ExtenderMetrics
from extender.transport.request_io import json_body
from extender.transport.verb_answers import (
    FollowedAnswer,
    PrioritizeAhead,
    VerbAnswer,
    answer_filter,
    answer_prioritize,
)
from extender.transport.wire import WireError

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class SchedulingVerbs:
    """kube-scheduler's filter and prioritize, answered straight from WSGI (the middleware pattern Flask
    documents: the app's `wsgi_app` wrapped), without a request context, URL matching and request hooks.

    kube-scheduler waits for these two inside its serial scheduling cycle, for every pod, and Flask's machinery
    costs more CPU per request than the rest of a small filter does. Everything else goes to Flask, and so do
    these two when they lack a Content-Length (chunked) or exceed the body limit, so that werkzeug's own handling
    and the 413 stay the only ones. What the Flask path does for a request is done here too, with the same
    functions: the request metrics and the in-flight record (liveness), the body parse and its 400s, the verb
    (answer_filter, answer_prioritize), the 503 of an unsynced prioritize and the 500 with a request id
    (internal_error). The server's direct path (transport/direct_http.py), which reads the verbs' requests off
    the connection without gunicorn's parser, calls `respond` as this WSGI entry does."""

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
        self.foreground: ForegroundWork = app.extensions["dra_foreground"]

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

    def respond(self, path: str, body: bytes) -> tuple[int, list[tuple[str, str]], WrittenAnswer]:
        """The answer to a POST of `body` to one of the verbs' paths: status, headers (with Content-Length) and
        the body, whose `close` the server calls once it has written it."""
        verb, answer = self.verbs[path]
        # kube-scheduler waits for this answer: the extender's background threads hold off meanwhile
        # (transport/foreground.py), from the body's parse until the server has written the answer and closes it.
        running = self.foreground.mark()
        try:
            status, headers, encoded, then = self._serve(verb, answer, path, body)
            return status, headers, WrittenAnswer(encoded, running, then)
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


class WrittenAnswer(list[bytes]):
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
