"""Structured logs: one JSON object per line for everything the process writes to stderr (ours, gunicorn's,
warnings, uncaught exceptions), so that a cluster's log pipeline can index every field; ``text`` for people.

Every line written while a request is served carries its ``requestId``: the client's ``X-Request-Id`` when it
sent one, else an id of this process (a random prefix and a counter), set by the server per request
(transport/server.py) and read here only when a line is written.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import sys
import threading
import time
import types
from typing import Any

import orjson
from gunicorn import glogging

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


# The request the thread serves: this process's number for it, the client's X-Request-Id, or None outside one.
# One attribute of a thread-local, set twice per request: it is on kube-scheduler's path (docs/performance.md).
_CONTEXT = threading.local()
_NUMBERS = itertools.count(1)
_PREFIX = secrets.token_hex(4)


def begin_request() -> None:
    """A request starts on this thread (a counter step: the id's text is made only when a line is written)."""
    _CONTEXT.request = next(_NUMBERS)


def name_request(given: str) -> None:
    """The client named its request (X-Request-Id): lines carry that id."""
    _CONTEXT.request = given[:128]


def end_request() -> None:
    _CONTEXT.request = None


def current_request_id() -> str:
    """The id of the request this thread serves, "" outside one."""
    request: int | str | None = getattr(_CONTEXT, "request", None)
    if request is None or isinstance(request, str):
        return request or ""
    return f"{_PREFIX}-{request:x}"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = current_request_id()
        if request_id:
            payload["requestId"] = request_id
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            payload["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(payload, default=str).decode()


class TextFormatter(logging.Formatter):
    """Lines for people, with the request id when there is one."""

    def __init__(self) -> None:
        super().__init__(_TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        request_id = current_request_id()
        return f"{line} [request {request_id}]" if request_id and "\n" not in line else line


def configure_logging(fmt: str = "json", level: str = "INFO") -> None:
    """Our one stderr handler on the root logger, in ``fmt``; Python's warnings and uncaught exceptions (main
    thread and others) go through it too."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread


def json_logging_configured() -> bool:
    """Whether configure_logging made the process's lines JSON (an error line must then be JSON too)."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def _log_uncaught(kind: type[BaseException], error: BaseException, trace: types.TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, error, trace)
        return
    logging.getLogger("extender").critical("uncaught exception", exc_info=(kind, error, trace))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or issubclass(args.exc_type, SystemExit):
        return
    thread = args.thread.name if args.thread is not None else "?"
    logging.getLogger("extender").critical(
        "uncaught exception in thread %s",
        thread,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        extra={"crashedThread": thread},
    )


class GunicornLogger(glogging.Logger):  # type: ignore[misc]  # gunicorn ships no type information
    """gunicorn's logger (``logger_class``) writing through our root handler: gunicorn sets its own stream
    handlers with its own text format on ``gunicorn.error`` and ``gunicorn.access`` (glogging.Logger.setup);
    here they are dropped and both loggers propagate, so its lines are JSON like ours. Its levels stay
    (``loglevel``; access lines only with ``accesslog`` set). A file named by ``errorlog``/``accesslog`` (not
    ``-``) keeps gunicorn's own handler: the operator asked for that file."""

    error_log: logging.Logger
    access_log: logging.Logger

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for logger, target in ((self.error_log, cfg.errorlog), (self.access_log, cfg.accesslog)):
            if target not in ("-", None):
                continue
            for handler in list(logger.handlers):
                if getattr(handler, "_gunicorn", False):
                    logger.removeHandler(handler)
            logger.propagate = True

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        """gunicorn's access line, with its fields as fields (method, path, status, duration)."""
        if not self.access_log_enabled:
            return
        atoms = self.atoms(resp, req, environ, request_time)
        self.access_log.info(
            self.cfg.access_log_format,
            self.atoms_wrapper_class(atoms),
            extra={
                "method": atoms.get("m"),
                "path": atoms.get("U"),
                "status": atoms.get("s"),
                "durationMs": round(request_time.total_seconds() * 1000, 3),
                "remote": atoms.get("h"),
            },
        )
