"""Requests to the API server of a kubeconfig context, through the one API client (kube/api.py KubeApi)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from extender.commands.assembly import check_kubeconfig_file
from extender.commands.outcomes import InputError, RefusedError, UnreachableError, answer_message, network_reason
from extender.kube.paths import path_segment

if TYPE_CHECKING:  # the Kubernetes client loads when a kubeconfig is opened, not for a command that needs none
    from extender.kube.api import KubeApi


class Cluster:
    """The API server of a kubeconfig context (TLS, client certificates, tokens and exec plugins as the kubeconfig
    says). One attempt per request, bounded by `timeout`: an API server that does not answer costs one timeout
    before the command can say so."""

    def __init__(self, kubeconfig: str, context: str | None, timeout: float) -> None:
        from extender.kube.api import ApiConfigError, KubeApi, load_kubeconfig

        check_kubeconfig_file(kubeconfig)
        try:
            self._api: KubeApi = KubeApi(load_kubeconfig(kubeconfig, context=context))
        except ApiConfigError as error:
            raise InputError(str(error)) from None
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """(status, body) of one request; raises UnreachableError when no HTTP answer came back."""
        import urllib3

        try:
            return self._api.exchange(method, path, body=body, timeout=self.timeout)
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise UnreachableError(f"{self._api.host}: {network_reason(error)}") from None

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{path_segment(namespace)}/pods/{path_segment(name)}"
        try:
            status, data = self.request("GET", path)
        except UnreachableError as error:
            raise UnreachableError(f"cannot reach the API server: {error}") from None
        if status == 404:
            raise RefusedError(f'pods "{name}" not found in namespace "{namespace}"')
        if status != 200:
            raise RefusedError(f"reading pod {namespace}/{name}: HTTP {status}: {answer_message(data)}")
        pod: dict[str, Any] = orjson.loads(data)
        pod.setdefault("kind", "Pod")
        pod.setdefault("apiVersion", "v1")
        return pod

    def close(self) -> None:
        self._api.close()
