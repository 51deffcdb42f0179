"""HTTP access to the API server through the official client's configuration and connection pool.

The client's generated model classes cost far more CPU than the API server spends on a large list, so requests
go through the client's own urllib3 pool (which already carries the kubeconfig's TLS, proxy and credential
setup, including token refresh hooks) and bodies are decoded with orjson. Going to the pool rather than
`ApiClient.call_api` also keeps this module independent of the generator version: `call_api`'s signature
changed between client releases, the pool did not.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlencode

import orjson
import urllib3
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration

log = logging.getLogger(__name__)

USER_AGENT = "dra-quota-extender"
CONNECT_TIMEOUT_SECONDS = 10.0
# Enough connections for one long-lived watch per kind plus lists, discovery and binds at the same time;
# below that urllib3 discards connections on release and logs a warning each time.
MIN_POOL_SIZE = 32


class ApiConfigError(ValueError):
    """No usable API server configuration (missing kubeconfig, not running in a pod, ...)."""


# metav1.CauseTypeResourceVersionTooLarge, and the cause message API servers 1.17.0-1.18.5 sent without a type
# (client-go tools/cache/reflector.go, isTooLargeResourceVersionError).
CAUSE_RESOURCE_VERSION_TOO_LARGE = "ResourceVersionTooLarge"
TOO_LARGE_RESOURCE_VERSION_MESSAGE = "Too large resource version"


class ApiError(Exception):
    """The API server answered with an error status; carries its Status message for people to read."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        method: str = "",
        path: str = "",
        causes: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.method = method
        self.path = path
        self.causes = causes  # (type, message) of the Status's details.causes
        super().__init__(self.describe())

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def resource_version_too_large(self) -> bool:
        """The resourceVersion asked for is newer than the server's (etcd restored or migrated, a lagging watch
        cache that gave up waiting): apiserver storage.NewTooLargeResourceVersionError, a 504 Timeout Status
        with the ResourceVersionTooLarge cause."""
        return too_large_resource_version(self.status, self.causes)

    @property
    def resource_version_unavailable(self) -> bool:
        """Expired (410) or too large: only a list at the server's newest version can go on from here."""
        return self.gone or self.resource_version_too_large

    def describe(self) -> str:
        where = f"{self.method} {self.path}: " if self.method else ""
        reason = f" {self.reason}" if self.reason else ""
        message = f": {self.message}" if self.message else ""
        return f"{where}HTTP {self.status}{reason}{message}"


def status_details(body: bytes) -> tuple[str, str]:
    """(reason, message) of a metav1.Status body; the raw text when the body is not one (proxies, LBs)."""
    try:
        status = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "", body[:500].decode("utf-8", "replace").strip()
    if not isinstance(status, Mapping):
        return "", str(status)[:500]
    return str(status.get("reason") or ""), str(status.get("message") or "")


def status_causes(status: object) -> tuple[tuple[str, str], ...]:
    """(type, message) of each entry of a metav1.Status's details.causes; () for anything else."""
    if not isinstance(status, Mapping):
        return ()
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, Mapping) else None
    if not isinstance(causes, list):
        return ()
    return tuple(
        (str(cause.get("reason") or ""), str(cause.get("message") or ""))  # StatusCause.Type is "reason" in JSON
        for cause in causes
        if isinstance(cause, Mapping)
    )


def too_large_resource_version(code: object, causes: tuple[tuple[str, str], ...]) -> bool:
    """Whether a Status says the requested resourceVersion is ahead of the server, as client-go's
    isTooLargeResourceVersionError decides (tools/cache/reflector.go): the ResourceVersionTooLarge cause, or, from
    servers that set no cause type, a 504 whose cause message is "Too large resource version"."""
    if any(kind == CAUSE_RESOURCE_VERSION_TOO_LARGE for kind, _ in causes):
        return True
    return code == 504 and any(message == TOO_LARGE_RESOURCE_VERSION_MESSAGE for _, message in causes)


def load_kubeconfig(path: str | os.PathLike[str], *, context: str | None = None) -> Configuration:
    config = Configuration()
    try:
        kube_config.load_kube_config(  # type: ignore[no-untyped-call]  # the client ships no annotations
            config_file=os.fspath(path), context=context, client_configuration=config, persist_config=False
        )
    except (kube_config.ConfigException, OSError) as error:
        raise ApiConfigError(f"cannot use kubeconfig {os.fspath(path)}: {error}") from None
    return config


def load_in_cluster() -> Configuration:
    config = Configuration()
    try:
        kube_config.load_incluster_config(client_configuration=config)  # type: ignore[no-untyped-call]  # as above
    except kube_config.ConfigException as error:
        raise ApiConfigError(f"cannot use in-cluster configuration: {error}") from None
    return config


def keepalive_socket_options(idle: int = 30, interval: int = 10, count: int = 3) -> list[tuple[int, int, int]]:
    """TCP keepalive on every connection, as client-go asks the kernel for.

    A watch on a quiet collection can carry nothing for minutes, so only the transport can tell a dead peer
    (a vanished load balancer, a partitioned node: no FIN ever arrives) from silence; with these values it
    does so within about a minute, the default stale grace, instead of the kernel's two hours.
    """
    options = list(urllib3.connection.HTTPConnection.default_socket_options)  # keeps TCP_NODELAY
    options.append((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", count)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


class KubeApi:
    """Raw JSON requests against one API server; safe to share between threads (the pool is)."""

    def __init__(self, config: Configuration) -> None:
        if not config.host:
            raise ApiConfigError("the API client configuration has no host")
        if (config.connection_pool_maxsize or 0) < MIN_POOL_SIZE:
            config.connection_pool_maxsize = MIN_POOL_SIZE
        if getattr(config, "socket_options", None) is None:
            config.socket_options = keepalive_socket_options()
        self.config = config
        self.host = config.host.rstrip("/")
        self._client = ApiClient(config)
        self._pool = self._client.rest_client.pool_manager
        self._closed = threading.Event()

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        # auth_settings() runs the configuration's refresh hook, so expiring tokens (exec plugins, projected
        # service account tokens) are renewed on every request, as the generated API classes would.
        settings: Mapping[str, Any] = self.config.auth_settings()
        for setting in settings.values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[str(setting["key"])] = str(setting["value"])
        if self.config.username or self.config.password:
            basic = self.config.get_basic_auth_token()
            if basic:
                headers.setdefault("authorization", basic)
        if extra:
            headers.update(extra)
        return headers

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        read_timeout: float | None = 60.0,
        raw_body: bytes | None = None,
        content_type: str = "application/json",
    ) -> urllib3.BaseHTTPResponse:
        """The open response (body not read yet); an error status is raised as ApiError with its message.
        `raw_body` with `content_type` sends a body as is (a merge patch)."""
        url = self.host + path + (f"?{urlencode(query)}" if query else "")
        payload = orjson.dumps(body) if body is not None else raw_body
        extra = {"Content-Type": content_type} if payload is not None else None
        response = self._pool.request(
            method,
            url,
            body=payload,
            headers=self._headers(extra),
            timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_SECONDS, read=read_timeout),
            preload_content=False,
            retries=False,  # the callers retry with their own backoff, and a POST must not be repeated blindly
        )
        if response.status >= 400:
            try:
                data = response.data
            finally:
                response.release_conn()
            reason, message = status_details(data or b"")
            raise ApiError(
                response.status,
                reason or str(response.reason or ""),
                message,
                method=method,
                path=path,
                causes=_causes_of(data or b""),
            )
        return response

    def exchange(
        self, method: str, path: str, *, body: Any = None, timeout: float = CONNECT_TIMEOUT_SECONDS
    ) -> tuple[int, bytes]:
        """One request whose every HTTP answer comes back as (status, body), error statuses included, within
        `timeout` to connect and again to read: for a caller that reads the statuses itself (the kubectl plugin
        going through the API server's service proxy, where a 404 may be the extender's own answer). Network
        failures are raised as urllib3 raises them."""
        payload = orjson.dumps(body) if body is not None else None
        extra = {"Content-Type": "application/json"} if payload is not None else None
        response = self._pool.request(
            method,
            self.host + path,
            body=payload,
            headers=self._headers(extra),
            timeout=urllib3.Timeout(connect=min(timeout, CONNECT_TIMEOUT_SECONDS), read=timeout),
            retries=False,
        )
        return response.status, response.data or b""

    def get_json(self, path: str, *, query: Mapping[str, str] | None = None, read_timeout: float | None = 60.0) -> Any:
        response = self.request("GET", path, query=query, read_timeout=read_timeout)
        try:
            return orjson.loads(response.data)
        finally:
            response.release_conn()

    def post_json(self, path: str, body: Mapping[str, Any], *, read_timeout: float | None = 30.0) -> Any:
        response = self.request("POST", path, body=body, read_timeout=read_timeout)
        try:
            data = response.data
        finally:
            response.release_conn()
        return orjson.loads(data) if data else None

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._pool.clear()


def _causes_of(body: bytes) -> tuple[tuple[str, str], ...]:
    try:
        return status_causes(orjson.loads(body))
    except orjson.JSONDecodeError:
        return ()


def iter_lines(response: urllib3.BaseHTTPResponse, *, chunk_size: int = 65536) -> Iterator[bytes]:
    """Newline-delimited frames of a streaming body as they arrive.

    `read1` returns whatever the server has flushed (one or more chunks) instead of waiting for `chunk_size`
    bytes, which a quiet watch would otherwise never deliver. A frame split over several chunks is reassembled.
    """
    buffer = bytearray()
    read1 = getattr(response, "read1", None)
    chunks: Iterator[bytes] = iter(lambda: read1(chunk_size), b"") if read1 is not None else response.stream(None)
    for chunk in chunks:
        if not chunk:
            break
        start = len(buffer)
        buffer += chunk
        newline = buffer.find(b"\n", start)
        if newline < 0:
            continue
        *lines, rest = bytes(buffer).split(b"\n")
        buffer = bytearray(rest)
        for line in lines:
            if line.strip():
                yield line
    if bytes(buffer).strip():
        yield bytes(buffer)
