"""A running extender's diagnostics HTTP API, reached directly (``--server``) or through the API server's
service proxy (the in-cluster extender behind its Service)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from extender.cli import PodFile, network_reason, note_objects_not_sent
from extender.kubectl_plugin.answer_source import Extender
from extender.kubectl_plugin.cluster import Cluster, quote_segment
from extender.kubectl_plugin.plugin_errors import (
    NoExtenderBehindServiceError,
    RefusedError,
    UnreachableError,
    UsageError,
    podgroup_unknown,
    status_message,
)
from extender.transport.wire import DIAGNOSTICS_ELSEWHERE

# send(method, path, body) -> (status, body)
Sender = Callable[[str, str, Any], tuple[int, bytes]]

# API server answers to a service-proxy request that mean "no extender behind this Service": the Service is
# absent (404), has no ready endpoint (503), or the proxy cannot reach it (502, 504); and this user may not use
# the proxy (403). Anything else (401, 400, 5xx from the extender) is an error worth showing.
FALLBACK_STATUSES = frozenset({403, 404, 502, 503, 504})


class HttpExtender(Extender):
    """The diagnostics HTTP API of an extender, at ``send(method, path, body) -> (status, body)``."""

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
        raise RefusedError(f"{self.where}{path}: HTTP {status}: {status_message(data)}")

    def explain(self, pod: dict[str, Any], pod_file: PodFile | None = None) -> dict[str, Any]:
        report = self._json("POST", "/diagnostics/explain", pod)
        if pod_file is not None:
            note_objects_not_sent(pod_file, self.where)
        return report

    def last_decision(self, namespace: str, name: str) -> dict[str, Any]:
        """The extender's last recorded decision for a pod (GET /diagnostics/pods/NS/NAME)."""
        return self._json(
            "GET",
            f"/diagnostics/pods/{quote_segment(namespace)}/{quote_segment(name)}",
            missing=f"the extender has no decision recorded for pod {namespace}/{name}: "
            "pass -f FILE, or a kubeconfig to read the pod from",
        )

    def queues(self) -> dict[str, Any]:
        return self._json("GET", "/diagnostics/queues")

    def node(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/diagnostics/nodes/{quote_segment(name)}", missing=f'node "{name}" is not known')

    def podgroup(self, namespace: str, name: str) -> dict[str, Any]:
        return self._json(
            "GET",
            f"/diagnostics/podgroups/{quote_segment(namespace)}/{quote_segment(name)}",
            missing=podgroup_unknown(namespace, name),
        )


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


def parse_service(text: str) -> tuple[str, str, str]:
    """``NAMESPACE/NAME:PORT`` -> (namespace, name, port)."""
    namespace, _, rest = text.rpartition("/")
    name, _, port = rest.partition(":")
    if not namespace or not name or not port:
        raise UsageError(f"--service must be NAMESPACE/NAME:PORT, got {text!r}")
    return namespace, name, port


def service_sender(cluster: Cluster, service: str) -> Sender:
    """Requests to the extender through the API server's service proxy
    (``/api/v1/namespaces/NS/services/NAME:PORT/proxy/PATH``, core/v1 ServiceProxyOptions): authenticated as
    the kubeconfig user, no port-forward, works wherever kubectl works. Answers that mean "nobody behind the
    Service" raise NoExtenderBehindServiceError."""
    namespace, name, port = parse_service(service)
    service_port = f"{quote_segment(name)}:{quote_segment(port)}"
    prefix = f"/api/v1/namespaces/{quote_segment(namespace)}/services/{service_port}/proxy"

    def send(method: str, path: str, body: Any) -> tuple[int, bytes]:
        try:
            status, data = cluster.request(method, prefix + path, body)
        except UnreachableError as error:  # the API server itself: a local computation could not read it either
            raise UnreachableError(f"cannot reach the API server: {error}") from None
        if status in FALLBACK_STATUSES and not _from_extender(data):
            raise NoExtenderBehindServiceError(f"service {service}: HTTP {status}: {status_message(data)}")
        return status, data

    return send


def _from_extender(data: bytes) -> bool:
    """The extender's own 404s (unknown node) carry {"error": ...}; the API server's carry a metav1.Status. A
    listener that does not serve diagnostics (the deployment's metrics listener: diagnostics stay on loopback)
    says so with reason DIAGNOSTICS_ELSEWHERE: nobody to ask behind this Service either."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return (
        isinstance(document, Mapping)
        and document.get("kind") != "Status"
        and "error" in document
        and document.get("reason") != DIAGNOSTICS_ELSEWHERE
    )
