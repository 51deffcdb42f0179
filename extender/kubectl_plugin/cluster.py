"""Raw JSON requests to the API server of a kubeconfig context."""

from __future__ import annotations

import urllib.parse
from typing import Any

import orjson

from extender.cli import check_kubeconfig_file, network_reason
from extender.kubectl_plugin.plugin_errors import InputError, RefusedError, UnreachableError, status_message


def quote_segment(segment: str) -> str:
    """One path segment of an API URL (a namespace, a name, a port), escaped."""
    return urllib.parse.quote(segment, safe="")


class Cluster:
    """Raw JSON requests to the API server of a kubeconfig context, through the kubernetes client's
    configuration (TLS, client certificates, tokens and exec plugins as the kubeconfig says)."""

    def __init__(self, kubeconfig: str, context: str | None, timeout: float) -> None:
        from kubernetes import config
        from kubernetes.client import Configuration

        # One attempt per request, bounded by `timeout`: urllib3's default three retries would make an API server
        # that does not answer cost four timeouts before the command can say so.
        check_kubeconfig_file(kubeconfig)
        settings = Configuration()
        settings.retries = False
        try:
            self._api = config.new_client_from_config(  # type: ignore[no-untyped-call]  # client has no annotations
                config_file=kubeconfig, context=context, persist_config=False, client_configuration=settings
            )
        except (config.ConfigException, OSError) as error:
            raise InputError(f"cannot use kubeconfig {kubeconfig}: {error}") from None
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """(status, body) of one request; raises UnreachableError when no HTTP answer came back."""
        import urllib3
        from kubernetes.client import ApiException

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            serialized = self._api.param_serialize(
                method, path, header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            response = self._api.call_api(*serialized[:4], _request_timeout=self.timeout)
            data = response.read()
        except ApiException as error:  # the client's transport errors (SSL, protocol); HTTP statuses come back
            raise UnreachableError(f"{self._api.configuration.host}: {getattr(error, 'reason', error)}") from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise UnreachableError(f"{self._api.configuration.host}: {network_reason(error)}") from None
        return response.status, data

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{quote_segment(namespace)}/pods/{quote_segment(name)}"
        try:
            status, data = self.request("GET", path)
        except UnreachableError as error:
            raise UnreachableError(f"cannot reach the API server: {error}") from None
        if status == 404:
            raise RefusedError(f'pods "{name}" not found in namespace "{namespace}"')
        if status != 200:
            raise RefusedError(f"reading pod {namespace}/{name}: HTTP {status}: {status_message(data)}")
        pod: dict[str, Any] = orjson.loads(data)
        pod.setdefault("kind", "Pod")
        pod.setdefault("apiVersion", "v1")
        return pod

    def close(self) -> None:
        self._api.close()
