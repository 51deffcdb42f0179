"""Liveness that notices a wedged request path, not just a running process.

/healthz answers from whatever thread serves it, so it stays 200 while slow clients hold every thread and
kube-scheduler's /filter calls time out. /livez fails when either
- a scheduling verb has been in flight longer than `server.stuckRequestSeconds` (verbs have a 4 s deadline:
  one still running after 20 s means a thread is stuck), or
- with a separate diagnostics listener, a request to the scheduling listener's /healthz does not come back
  within `server.livenessProbeTimeoutSeconds`: it goes through the same accept loop and worker threads as
  kube-scheduler's calls, so a starved pool fails the probe and the kubelet restarts the container.
"""

from __future__ import annotations

import http.client
import itertools
import ssl
import threading
import time


class InFlight:
    """Start times of the scheduling verbs being answered, by token; shared by the apps of one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[int, float] = {}
        self._tokens = itertools.count()

    def begin(self) -> int:
        token = next(self._tokens)
        with self._lock:
            self._started[token] = time.monotonic()
        return token

    def end(self, token: int) -> None:
        with self._lock:
            self._started.pop(token, None)

    def oldest_seconds(self) -> float:
        with self._lock:
            oldest = min(self._started.values(), default=None)
        return 0.0 if oldest is None else time.monotonic() - oldest


def probe_listener(address: str, *, tls: bool, timeout: float) -> str:
    """GET /healthz on the scheduling listener: "" when it answered in time, else why not.

    Under TLS the server's certificate is not checked (it is our own listener on loopback) and no client
    certificate is shown: a listener that requires one answers with a handshake alert, which still proves a
    worker thread took the connection."""
    host, _, port = address.rpartition(":")
    host = "127.0.0.1" if host in ("", "0.0.0.0") else ("::1" if host in ("::", "[::]") else host.strip("[]"))
    connection: http.client.HTTPConnection
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        connection = http.client.HTTPSConnection(host, int(port), timeout=timeout, context=context)
    else:
        connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    started = time.monotonic()
    try:
        connection.request("GET", "/healthz", headers={"Connection": "close"})
        response = connection.getresponse()
        response.read()
        return "" if response.status == 200 else f"scheduling listener answered /healthz with {response.status}"
    except ssl.SSLError:
        return ""  # a handshake alert (client certificate required) came from a worker thread
    except TimeoutError:
        return f"scheduling listener {address} did not answer /healthz within {timeout:g}s"
    except OSError as error:
        return f"scheduling listener {address} unreachable after {time.monotonic() - started:.1f}s: {error}"
    finally:
        connection.close()
