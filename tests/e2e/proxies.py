"""Loopback proxies the chaos and restart e2e tests put between components: a TCP proxy that can drop every connection
(a watch reset) or hold every byte for a while (an API server that answers one client late), and an HTTP proxy
between kube-scheduler and the extender that lets a test act on the moment a filter verdict goes back."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from testkit.control_plane import LOOPBACK


class TcpProxy:
    """127.0.0.1:port -> 127.0.0.1:target_port. `reset()` drops every connection; `pause()` holds every byte in
    both directions until `resume()` (the connections stay open, as on a congested link)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server((LOOPBACK, 0))
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._flowing = threading.Event()
        self._flowing.set()
        self.resets = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((LOOPBACK, self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._flowing.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def reset(self) -> None:
        with self._lock:
            victims = list(self._open)
        for sock in victims:
            self._close(sock)
        self.resets += 1

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._stopping.set()
        self.resume()
        self.listener.close()
        self.reset()


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """kube-scheduler closing a keep-alive connection is not worth a traceback."""


UNAVAILABLE = (503, b'{"error": "the extender is not answering"}')


class FilterTap:
    """An HTTP proxy for the extender verbs: forwards each POST to `target()` and, for a /filter answer that
    lets the pod through somewhere, calls `on_pass(pod name)` before the answer goes back to kube-scheduler.

    Every failure kube-scheduler sees from it is the same 503: while `hold` is set, when the extender cannot be
    reached, and when it answers with an Error (not synced yet). kube-scheduler words a failed call by verb,
    URL and status code only (pkg/scheduler/extender.go send), so a pod failing again has an unchanged
    PodScheduled condition and kube-scheduler's failure handler makes no API call: that call is synchronous in
    its scheduling loop, which must keep running while a test holds its connection to the API server."""

    def __init__(self, target: Callable[[], str]) -> None:
        self.target = target
        self.on_pass: Callable[[str], None] | None = None
        self.hold = threading.Event()
        self.filters: list[tuple[str, bool, int]] = []  # (pod, passed, status sent) of verdicts, in order
        self._lock = threading.Lock()
        tap = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, data = tap._forward(self.path, body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = _QuietServer((LOOPBACK, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _forward(self, path: str, body: bytes) -> tuple[int, bytes]:
        pod = ""
        if path.endswith("/filter"):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                pod = json.loads(body)["Pod"]["metadata"]["name"]
        if self.hold.is_set():
            return UNAVAILABLE
        request = urllib.request.Request(
            self.target() + path, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, data = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, data = error.code, error.read()
        except OSError:
            return UNAVAILABLE
        if path.endswith("/filter") and status == 200:
            try:
                answer = json.loads(data)
            except ValueError:
                answer = {}
            if answer.get("Error"):
                return UNAVAILABLE
            passed = bool(answer.get("NodeNames"))
            with self._lock:
                self.filters.append((pod, passed, status))
            hook = self.on_pass
            if passed and hook is not None:
                hook(pod)
        return status, data

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
