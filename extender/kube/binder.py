"""Binding a pod to a node, for the extender's optional bind verb.

With the bind verb the extender, not kube-scheduler, writes the binding, which is the one moment it knows for
certain which node a reservation was confirmed on. A failed binding must reach the scheduler with the API
server's own words (UID mismatch, pod already bound, forbidden), so the error keeps the Status message.
"""

from __future__ import annotations

import urllib3
from kubernetes.client import Configuration

from extender.kube.api import ApiError, KubeApi
from extender.kube.paths import path_segment


class BindingError(RuntimeError):
    """The API server refused the binding, or could not be reached (status 0)."""

    def __init__(self, namespace: str, pod_name: str, node_name: str, status: int, reason: str, message: str) -> None:
        self.namespace = namespace
        self.pod_name = pod_name
        self.node_name = node_name
        self.status = status
        self.reason = reason
        self.message = message
        detail = f"HTTP {status}{' ' + reason if reason else ''}: {message}" if status else message
        super().__init__(f"binding pod {namespace}/{pod_name} to node {node_name} failed: {detail}")


class Binder:
    def __init__(self, api_client_config: Configuration, *, timeout_seconds: float = 10.0) -> None:
        self._api = KubeApi(api_client_config)
        self._timeout = timeout_seconds

    def create_binding(self, namespace: str, pod_name: str, pod_uid: str, node_name: str) -> None:
        """POST a v1 Binding; the UID makes the API server refuse if the pod was replaced by a namesake."""
        metadata = {"name": pod_name, "namespace": namespace}
        if pod_uid:
            metadata["uid"] = pod_uid
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        path = f"/api/v1/namespaces/{path_segment(namespace)}/pods/{path_segment(pod_name)}/binding"
        try:
            self._api.post_json(path, body, read_timeout=self._timeout)
        except ApiError as error:
            raise BindingError(
                namespace, pod_name, node_name, error.status, error.reason, error.message or error.describe()
            ) from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise BindingError(namespace, pod_name, node_name, 0, "", f"cannot reach the API server: {error}") from None

    def __call__(self, namespace: str, pod_name: str, pod_uid: str, node_name: str) -> None:
        """The transport layer takes a plain callable for its bind verb."""
        self.create_binding(namespace, pod_name, pod_uid, node_name)

    def close(self) -> None:
        self._api.close()
