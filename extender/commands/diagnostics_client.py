"""The client of a running extender's diagnostics API: `dra-extender explain --server URL` and the kubectl plugin
(``--server``, or through the API server's service proxy) ask it the same way and word its failures the same way.

What it is sent and what it answers are the endpoints of transport/diagnostics_routes.py and
transport/podgroup_routes.py; the documents are reports/'s."""

from __future__ import annotations

import argparse
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import orjson

from extender.commands.outcomes import RefusedError, UnreachableError, answer_message, network_reason
from extender.commands.pod_file import PodFile, note_objects_not_sent
from extender.kube.paths import path_segment

# send(method, path, body) -> (status, body); raises UnreachableError when no HTTP answer came back
Sender = Callable[[str, str, Any], tuple[int, bytes]]


def server_url(text: str) -> str:
    """``--server``: an http:// or https:// URL. argparse turns the ArgumentTypeError into a usage error (exit 2)
    that says what to write; urllib would take ``127.0.0.1:8888`` for a URL of scheme ``127.0.0.1``."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme in ("http", "https") and parts.netloc:
        return text
    if "://" not in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL: write http://{text} (or https://{text})")
    raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL with a host")


def url_sender(base: str, timeout: float) -> Sender:
    """Plain HTTP to an extender's diagnostics listener (``--server``)."""

    def send(method: str, path: str, body: Any) -> tuple[int, bytes]:
        data = orjson.dumps(body) if body is not None else None
        request = urllib.request.Request(
            base.rstrip("/") + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", None) or error
            text = network_reason(reason) if isinstance(reason, BaseException) else reason
            raise UnreachableError(f"cannot reach {base}: {text}") from None

    return send


class DiagnosticsClient:
    """The diagnostics API of one extender, at ``send(method, path, body) -> (status, body)``; `where` names it
    in messages (its URL, or the Service it is reached through)."""

    def __init__(self, send: Sender, where: str) -> None:
        self._send = send
        self.where = where

    def _json(self, method: str, path: str, body: Any = None, missing: str | None = None) -> dict[str, Any]:
        status, data = self._send(method, path, body)
        if status == 200:
            document: dict[str, Any] = orjson.loads(data)
            return document
        if status == 404 and missing:
            raise RefusedError(missing)
        raise RefusedError(f"{self.where}{path}: HTTP {status}: {answer_message(data)}")

    def explain(self, pod: dict[str, Any], pod_file: PodFile | None = None) -> dict[str, Any]:
        """POST /diagnostics/explain: the pod alone is sent (a note names what its file holds beside it)."""
        report = self._json("POST", "/diagnostics/explain", pod)
        if pod_file is not None:
            note_objects_not_sent(pod_file, self.where)
        return report

    def last_decision(self, namespace: str, name: str) -> dict[str, Any]:
        """The extender's last recorded decision for a pod (GET /diagnostics/pods/NS/NAME)."""
        return self._json(
            "GET",
            f"/diagnostics/pods/{path_segment(namespace)}/{path_segment(name)}",
            missing=f"the extender has no decision recorded for pod {namespace}/{name}: "
            "pass -f FILE, or a kubeconfig to read the pod from",
        )

    def queues(self) -> dict[str, Any]:
        return self._json("GET", "/diagnostics/queues")

    def node(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/diagnostics/nodes/{path_segment(name)}", missing=f'node "{name}" is not known')

    def podgroup(self, namespace: str, name: str) -> dict[str, Any]:
        return self._json(
            "GET",
            f"/diagnostics/podgroups/{path_segment(namespace)}/{path_segment(name)}",
            missing=podgroup_unknown(namespace, name),
        )

    def close(self) -> None:
        """Nothing is held between requests."""


def podgroup_unknown(namespace: str, name: str) -> str:
    """The refusal (exit code 5) for a PodGroup the source does not know, no PodGroup object and no pod naming
    it: the same words whether the extender answered 404 or a local computation found nothing."""
    return f'podgroup "{name}" is not known in namespace "{namespace}": no PodGroup object and no pod naming it'
