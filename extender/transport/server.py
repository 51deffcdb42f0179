"""Running the app under gunicorn from our own CLI, with the service built before workers start.

One worker process with threads: the cluster view, the selector caches and the reservation ledger live in
one process, so every request sees every reservation. More processes would each hold their own ledger and
together over-admit quota; throughput comes from threads plus per-request work proportional to nodes.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication
from werkzeug.serving import make_server

log = logging.getLogger(__name__)


class ExtenderServer(BaseApplication):  # type: ignore[misc]  # gunicorn ships no type information
    def __init__(self, app: Flask, options: dict[str, Any]) -> None:
        self._app = app
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        assert self.cfg is not None
        for key, value in self._options.items():
            if key in self.cfg.settings and value is not None:
                self.cfg.set(key, value)

    def load(self) -> Flask:
        return self._app


def tls_options(cert_file: str, key_file: str, client_ca_file: str) -> dict[str, Any]:
    """gunicorn's TLS settings; with a client CA, a client without a certificate from it is refused in the
    handshake, as kube-scheduler's extender tlsConfig (certFile/keyFile/caFile) expects."""
    if not cert_file:
        return {}
    options: dict[str, Any] = {"certfile": cert_file, "keyfile": key_file}
    if client_ca_file:
        options.update({"ca_certs": client_ca_file, "cert_reqs": ssl.CERT_REQUIRED})
    return options


def diagnostics_starter(app: Flask, listen: str) -> Callable[[Any], None]:
    """A gunicorn post_worker_init hook serving `app` on its own plain-HTTP listener inside the worker, so
    diagnostics and metrics see the same service while the scheduling listener stays private (and TLS)."""

    def start(_worker: Any) -> None:
        host, _, port = listen.rpartition(":")
        server = make_server(host or "127.0.0.1", int(port), app, threaded=True)
        thread = threading.Thread(target=server.serve_forever, name="diagnostics-listener", daemon=True)
        thread.start()
        log.info("diagnostics and metrics on http://%s", listen)

    return start


# The one source of the server's settings: config/gunicorn.conf.py documents the same values (a test keeps them
# equal) and `--gunicorn-config` overrides them.
GUNICORN_DEFAULTS: dict[str, Any] = {
    "workers": 1,  # never more: see the module docstring
    "worker_class": "gthread",
    "threads": 8,
    "timeout": 30,  # kube-scheduler gives up after httpTimeout (5 s by default); a stuck request must not pin a thread
    "graceful_timeout": 10,
    "keepalive": 30,
    "accesslog": None,
    "errorlog": "-",
    "loglevel": "warning",
    "preload_app": True,
    # Bounds on what one request may send before the app sees it (the body limit is the app's).
    "limit_request_line": 8190,
    "limit_request_fields": 100,
    "limit_request_field_size": 16380,
}


def gunicorn_options(listen: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    options: dict[str, Any] = {"bind": listen, **GUNICORN_DEFAULTS}
    if overrides:
        options.update({k: v for k, v in overrides.items() if v is not None})
    return options
