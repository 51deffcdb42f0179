"""A running extender's diagnostics HTTP API reached through the API server's service proxy (the in-cluster
extender behind its Service); the client itself is commands/diagnostics_client.py's, as for ``--server``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from extender.commands.diagnostics_client import Sender
from extender.commands.outcomes import UnreachableError, UsageError, answer_message
from extender.kube.paths import path_segment
from extender.kubectl_plugin.cluster import Cluster
from extender.kubectl_plugin.plugin_errors import NoExtenderBehindServiceError
from extender.reports.answers import DIAGNOSTICS_ELSEWHERE

# API server answers to a service-proxy request that mean "no extender behind this Service": the Service is
# absent (404), has no ready endpoint (503), or the proxy cannot reach it (502, 504); and this user may not use
# the proxy (403). Anything else (401, 400, 5xx from the extender) is an error worth showing.
FALLBACK_STATUSES = frozenset({403, 404, 502, 503, 504})


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
    service_port = f"{path_segment(name)}:{path_segment(port)}"
    prefix = f"/api/v1/namespaces/{path_segment(namespace)}/services/{service_port}/proxy"

    def send(method: str, path: str, body: Any) -> tuple[int, bytes]:
        try:
            status, data = cluster.request(method, prefix + path, body)
        except UnreachableError as error:  # the API server itself: a local computation could not read it either
            raise UnreachableError(f"cannot reach the API server: {error}") from None
        if status in FALLBACK_STATUSES and not _from_extender(data):
            raise NoExtenderBehindServiceError(f"service {service}: HTTP {status}: {answer_message(data)}")
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
