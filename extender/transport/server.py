"""Running the app under gunicorn from our own CLI, with the engine built before workers start.

One worker process with threads: the cluster view, the selector caches and the reservation ledger live in
one process, so every request sees every reservation. More processes would each hold their own ledger and
together over-admit quota; throughput comes from threads plus per-request work proportional to nodes.
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication


class ExtenderServer(BaseApplication):
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


def gunicorn_options(listen: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bind": listen,
        "workers": 1,  # never more: see the module docstring
        "worker_class": "gthread",
        "threads": 8,
        "timeout": 30,
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
    if overrides:
        options.update({k: v for k, v in overrides.items() if v is not None})
    return options
