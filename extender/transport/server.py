"""Running the app under gunicorn from our own CLI, with the service built before workers start.

One worker process with threads: the cluster view, the selector caches and the reservation ledger live in
one process, so every request sees every reservation. More processes would each hold their own ledger and
together over-admit quota; throughput comes from threads plus per-request work proportional to nodes.

Both listeners (kube-scheduler's verbs, and the optional diagnostics listener) are gunicorn listeners of that
one worker, served by `ExtenderWorker`, gunicorn's gthread worker with the bounds a hostile or broken client
needs (a few clients sending one byte at a time, or many idle connections, must neither block /filter nor
cost a thread each):

- a thread is committed to a connection only once bytes arrive (gthread hands every new connection to a pool
  thread that waits up to 5 s for them; here it waits in the poller, like a kept-alive one);
- a request must arrive whole (headers and body) within `readTimeoutSeconds` of its first byte, and a
  response be written within `requestTimeoutSeconds`: a watchdog shuts the socket of a connection past its
  deadline, which ends the blocked read or write in its thread;
- each listener holds at most `maxConnections`; at the bound the oldest idle connection of that listener is
  closed for the new one (an idle flood cannot lock kube-scheduler out), and when none is idle the new one is
  refused at once;
- the kernel hands over a new connection only once its first bytes arrive, or DEFER_ACCEPT_SECONDS after
  its handshake (TCP_DEFER_ACCEPT on Linux, nginx's `listen ... deferred`): a client sends its request right
  after connecting, so a connection with a request coming is never an idle one that the bound may close (a
  fresh connection accepted a moment before its request arrives would, under an idle flood, soon be the oldest
  idle one);
- a pool thread that answered a kept-alive connection waits up to KEEPALIVE_LINGER_SECONDS for its next
  request and serves it itself (at most half the pool waits so at once): kube-scheduler's filter, prioritize
  and next filter follow one another on one connection, and each skipped trip through the poller saves about a
  third of a request's fixed CPU cost;
- TLS per listener (the scheduling listener's tls section; diagnostics plain unless given its own), with the
  certificate files re-read when they change (gunicorn itself rebuilds an SSLContext per connection).
"""

from __future__ import annotations

import contextlib
import errno
import io
import ipaddress
import logging
import os
import select
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from flask import Flask
from gunicorn import http
from gunicorn.app.base import BaseApplication
from gunicorn.workers import gthread

from extender.transport.direct_http import (
    RECV_BYTES,
    DirectVerbs,
    HeadLimits,
    read_direct_request,
    response_bytes,
)
from extender.transport.foreground import RunningMark
from extender.transport.logs import begin_request, end_request, name_request

log = logging.getLogger(__name__)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

# A new connection gets a pool thread only if its first bytes come this soon; otherwise it waits in the poller.
FIRST_BYTES_WAIT_SECONDS = 0.05
WATCHDOG_PERIOD_SECONDS = 0.1
PHASE_READ = "read"
PHASE_APP = "app"
# How long a pool thread waits on a kept-alive connection for its next request before handing it to the poller.
KEEPALIVE_LINGER_SECONDS = 0.1
# How long the kernel holds back a new connection that has sent nothing (rounded up to SYN-ACK retransmissions).
DEFER_ACCEPT_SECONDS = 1


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    """One listener: its address, the app it serves, its TLS files and its connection bound."""

    address: str  # HOST:PORT as configured
    app: WSGIApp
    max_connections: int
    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""
    # kube-scheduler's verbs answered off the connection (transport/direct_http.py); None: all through gunicorn
    direct: DirectVerbs | None = None
    # With client_ca_file: the identities a client certificate must name (subject CN, DNS or URI SAN); () any
    client_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ServerLimits:
    read_timeout_seconds: float = 3.0
    request_timeout_seconds: float = 30.0
    max_body_bytes: int = 1024 * 1024


class ReloadingTLS:
    """An SSLContext re-created when the certificate, key or CA file changes (cert-manager rotates them in
    place); checked at most once a second. A broken new pair keeps the previous context and logs why."""

    def __init__(self, cert_file: str, key_file: str, client_ca_file: str = "") -> None:
        self.files = tuple(f for f in (cert_file, key_file, client_ca_file) if f)
        self.cert_file, self.key_file, self.client_ca_file = cert_file, key_file, client_ca_file
        self._lock = threading.Lock()
        self._stamp: tuple[float, ...] = ()
        self._checked = 0.0
        self._context = self._build()
        self._stamp = self._stamps()
        self.reloads = 0

    def _stamps(self) -> tuple[float, ...]:
        return tuple(os.stat(f).st_mtime_ns for f in self.files)

    def _build(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.client_ca_file or None)
        context.load_cert_chain(certfile=self.cert_file, keyfile=self.key_file)
        context.verify_mode = ssl.CERT_REQUIRED if self.client_ca_file else ssl.CERT_NONE
        return context

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked < 1.0:
            return self._context
        with self._lock:
            self._checked = now
            try:
                stamp = self._stamps()
                if stamp != self._stamp:
                    self._context = self._build()
                    self._stamp = stamp
                    self.reloads += 1
                    log.warning("TLS certificate reloaded from %s", self.cert_file)
            except (OSError, ssl.SSLError) as error:
                log.error("TLS certificate files changed but cannot be loaded (%s); keeping the previous ones", error)
            return self._context


class _Listener:
    """Runtime state of one listener inside the worker (main thread only, except `tls`)."""

    def __init__(self, settings: ListenerSettings) -> None:
        self.settings = settings
        self.tls = (
            ReloadingTLS(settings.cert_file, settings.key_file, settings.client_ca_file) if settings.cert_file else None
        )
        self.connections: set[BoundedConn] = set()


def certificate_names(certificate: Mapping[str, Any]) -> set[str]:
    """The identities of a verified peer certificate (ssl.SSLSocket.getpeercert): the subject's common names and
    the DNS and URI subject alternative names, as kube-apiserver takes a client certificate's CN for the user
    name (k8s.io/apiserver/pkg/authentication/request/x509 CommonNameUserConversion)."""
    names = {value for rdn in certificate.get("subject", ()) for key, value in rdn if key == "commonName"}
    names.update(value for kind, value in certificate.get("subjectAltName", ()) if kind in ("DNS", "URI"))
    return names


class BoundedConn(gthread.TConn):  # type: ignore[misc]  # gunicorn ships no type information
    """gthread's connection with per-listener TLS and bookkeeping for the listener's connection bound."""

    initialized: bool
    sock: Any
    parser: Any

    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any, listener: _Listener) -> None:
        super().__init__(cfg, sock, client, server)
        self.listener = listener
        listener.connections.add(self)

    def init(self) -> None:
        if self.initialized:
            return
        self.initialized = True
        self.sock.setblocking(True)
        if self.parser is None:
            if self.listener.tls is not None:
                self.sock = self.listener.tls.context().wrap_socket(self.sock, server_side=True)
                self._check_client_name()
            self.parser = http.get_parser(self.cfg, self.sock, self.client)

    def _check_client_name(self) -> None:
        """Pinning: a certificate the CA signed is not enough, it must name one of the listener's clientNames
        (kube-scheduler's identity). Any other is answered 403 and the connection closed (an OSError, which
        gthread and the direct path both take as a client gone)."""
        allowed = self.listener.settings.client_names
        if not allowed:
            return
        names = certificate_names(self.sock.getpeercert() or {})
        if names & set(allowed):
            return
        log.warning(
            "refused a client certificate naming %s: not one of tls.clientNames (%s)",
            ", ".join(sorted(names)) or "nothing",
            ", ".join(allowed),
        )
        body = b'{"error":"this client certificate may not call the extender (tls.clientNames)"}'
        with contextlib.suppress(OSError, ssl.SSLError):
            self.sock.sendall(
                b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
        raise OSError(errno.ENOTCONN, "client certificate not in tls.clientNames")

    def close(self, graceful: bool = False) -> None:
        self.listener.connections.discard(self)
        super().close(graceful)


@dataclass(slots=True)
class _Active:
    conn: BoundedConn
    started: float
    phase: str = PHASE_READ
    killed: bool = False


class _Deadlines:
    """Which connection each pool thread serves, since when, and whether its request has fully arrived."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_thread: dict[int, _Active] = {}
        self.killed = 0

    def begin(self, conn: BoundedConn) -> None:
        with self.lock:
            self.by_thread[threading.get_ident()] = _Active(conn, time.monotonic())

    def request_read(self) -> None:
        with self.lock:
            active = self.by_thread.get(threading.get_ident())
            if active is not None:
                active.phase = PHASE_APP

    def end(self) -> None:
        with self.lock:
            self.by_thread.pop(threading.get_ident(), None)

    def overdue(self, limits: ServerLimits, now: float) -> list[_Active]:
        with self.lock:
            late = [
                active
                for active in self.by_thread.values()
                if not active.killed
                and now - active.started
                > (limits.read_timeout_seconds if active.phase == PHASE_READ else limits.request_timeout_seconds)
            ]
            for active in late:
                active.killed = True
            self.killed += len(late)
            return late


DEADLINES = _Deadlines()


class ExtenderWorker(gthread.ThreadWorker):  # type: ignore[misc]  # gunicorn ships no type information
    """gthread with the bounds of the module docstring. Configured through `configure()` before gunicorn runs
    (gunicorn has no place for settings of a custom worker; the worker is forked from the configured master)."""

    listeners: Mapping[str, ListenerSettings] = {}
    limits = ServerLimits()
    wsgi: Any
    alive: bool  # gunicorn's, as the attributes below
    nr: int
    max_requests: int

    @classmethod
    def configure(cls, listeners: Iterable[ListenerSettings], limits: ServerLimits) -> None:
        cls.listeners = {settings.address: settings for settings in listeners}
        cls.limits = limits

    def init_process(self) -> None:
        self._by_socket: dict[Any, _Listener] = {}
        self._watchdog_stop = threading.Event()
        self._lingering = threading.BoundedSemaphore(max(1, self.cfg.threads // 2))
        self._head_limits = HeadLimits(
            self.cfg.limit_request_line, self.cfg.limit_request_fields, self.cfg.limit_request_field_size
        )
        for listener_socket in self.sockets:
            _defer_accept(listener_socket)
        # gunicorn's access log sees only the requests gunicorn serves: with one configured, every request goes
        # through gunicorn, so that the log misses none.
        self._direct_allowed = not self.cfg.accesslog
        super().init_process()

    def _listener_for(self, listener_socket: Any) -> _Listener:
        """The listener a socket was bound for, told apart by its whole address (host and port): two listeners
        may share a port on different addresses. An address no listener names (bound by a gunicorn config
        file) serves nothing but 404s: never the verbs nor the diagnostics."""
        listener = self._by_socket.get(listener_socket)
        if listener is None:
            host, port = listener_socket.getsockname()[:2]
            settings = next(
                (s for s in self.listeners.values() if (host, port) in resolved_addresses(s.address)),
                None,
            )
            if settings is None:
                log.warning("%s:%s is not one of the extender's listeners: it answers 404 to everything", host, port)
                settings = ListenerSettings(f"{host}:{port}", _not_served, 1)
            listener = self._by_socket[listener_socket] = _Listener(settings)
        return listener

    def run(self) -> None:
        watchdog = threading.Thread(target=self._watch_deadlines, name="request-deadlines", daemon=True)
        watchdog.start()
        try:
            super().run()
        finally:
            self._watchdog_stop.set()

    def _watch_deadlines(self) -> None:
        while not self._watchdog_stop.wait(WATCHDOG_PERIOD_SECONDS):
            for active in DEADLINES.overdue(self.limits, time.monotonic()):
                # The plain socket's shutdown, also under TLS: it wakes the thread blocked in recv or send.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(active.conn.sock, socket.SHUT_RDWR)

    # --- accepting within the listener's bound (main thread) ----------------------------------------------------

    def accept(self, listener_socket: Any) -> None:
        try:
            client_sock, client_addr = listener_socket.accept()
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        listener = self._listener_for(listener_socket)
        if len(listener.connections) >= listener.settings.max_connections and not self._evict_idle(listener):
            client_sock.close()  # every connection of this listener is busy: refuse rather than queue
            return
        self.nr_conns += 1
        conn = BoundedConn(self.cfg, client_sock, client_addr, listener_socket.getsockname(), listener)
        # No thread until the first bytes arrive (gthread would hand it to a pool thread that waits up to 5 s):
        # the connection waits in the poller with those that never sent anything, and is the first to give way.
        conn.timeout = time.monotonic() + self.cfg.keepalive
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn))

    def _evict_idle(self, listener: _Listener) -> bool:
        """Close the oldest connection of this listener that has no request in progress: first those that never
        sent a byte, then kept-alive ones (Go's HTTP client retries a request on a closed idle connection). One
        whose request bytes are already waiting in its socket is not idle (the poller has not reported it yet):
        under a flood of idle connections it would be a real request dropped."""
        for idle in (self.pending_conns, self.keepalived_conns):
            victim = next(
                (
                    conn
                    for conn in idle
                    if getattr(conn, "listener", None) is listener and not _request_waiting(conn.sock)
                ),
                None,
            )
            if victim is None:
                continue
            idle.remove(victim)
            with contextlib.suppress(OSError, KeyError, ValueError):
                self.poller.unregister(victim.sock)
            self.nr_conns -= 1
            victim.close()
            return True
        return False

    def on_pending_socket_readable(self, conn: Any, client: Any) -> None:
        if client.fileno() < 0:  # evicted by accept() earlier in the same batch of poller events: already closed
            return
        super().on_pending_socket_readable(conn, client)

    def on_client_socket_readable(self, conn: Any, client: Any) -> None:
        if client.fileno() < 0:  # as above, for a kept-alive connection
            return
        super().on_client_socket_readable(conn, client)

    # --- one request (pool threads) -----------------------------------------------------------------------------

    def handle(self, conn: BoundedConn) -> Any:
        if not conn.initialized and not conn.data_ready and not conn.wait_for_data(FIRST_BYTES_WAIT_SECONDS):
            return gthread._DEFER  # (not reached from accept(), which defers itself) wait in the poller
        arrival: RunningMark | None = None
        while True:
            DEADLINES.begin(conn)
            begin_request()
            try:
                result = self._handle_direct(conn, arrival)
                if result is None:
                    result = super().handle(conn)
            finally:
                end_request()
                DEADLINES.end()
                if arrival is not None:
                    arrival.end()
            if result is not True or not self.alive:
                return result
            soon, arrival = self._next_request_soon(conn)
            if not soon:
                return result

    def _handle_direct(self, conn: BoundedConn, arrival: RunningMark | None) -> bool | None:
        """Serve one of kube-scheduler's verbs on the direct path (transport/direct_http.py): True to keep the
        connection, False to close it; None when the request is not one for that path (gunicorn then reads it,
        from the bytes given back to its parser). `arrival`, the mark taken at the wake-up for this request, is
        ended once the verb has taken its own."""
        direct = conn.listener.settings.direct
        if direct is None or not self._direct_allowed:
            return None
        try:
            conn.sock.setblocking(True)
            conn.init()
            if conn.parser.unreader.buf.getvalue():
                return None  # bytes read ahead by gunicorn's parser (a pipelined request): its own to read
            first = conn.sock.recv(RECV_BYTES)
            if not first:
                return False  # the client closed its kept-alive connection
            request = read_direct_request(conn.sock, first, direct, self._head_limits)
            if request is None:
                conn.parser.unreader.unread(first)
                return None
            DEADLINES.request_read()
            self.nr += 1
            if self.nr >= self.max_requests and self.alive:  # as gunicorn's handle_request: max_requests reached
                log.info("Autorestarting worker after current request.")
                self.alive = False
            keep_alive = (
                request.keep_alive
                and self.alive
                and bool(self.cfg.keepalive)
                and len(self.keepalived_conns) < self.max_keepalived
            )
            status, headers, answer = direct.respond(request.path, request.body)
            if arrival is not None:
                arrival.end()  # the verb's own mark holds until its answer is written
            try:
                conn.sock.sendall(response_bytes(status, headers, answer, keep_alive))
            finally:
                answer.close()
            if request.rest:
                conn.parser.unreader.unread(request.rest)
            return keep_alive
        except (OSError, EOFError, ssl.SSLError) as error:  # the client went away, or the deadline shut its socket
            log.debug("direct request ended: %s", error)
            return False

    def _next_request_soon(self, conn: BoundedConn) -> tuple[bool, RunningMark | None]:
        """Whether the connection's next request arrives within KEEPALIVE_LINGER_SECONDS (this thread then serves
        it). kube-scheduler sends prioritize right after filter, and the next pod's filter soon after, on one
        kept-alive connection: serving them in the thread that answered the last one saves gthread's two
        hand-offs per request (pool thread -> poller -> pool thread: a future, its callback, the wake-up pipe,
        the poller re-registration), about a third of a request's fixed cost. At most half the pool lingers at
        once, so idle connections cannot take the threads that others' requests need.

        On the scheduling listener the wait is announced to the background threads (transport/foreground.py
        `expect_requests`): once the request's bytes are waiting, they hold off until this thread runs, and it
        marks the verb running as soon as it does (the returned mark, which the caller ends)."""
        direct = conn.listener.settings.direct
        foreground = direct.foreground if direct is not None and self._direct_allowed else None
        if conn.parser.unreader.buf.getvalue() or _tls_pending(conn.sock):
            # bytes of the next request are read already: the socket may never look readable again
            return True, foreground.mark() if foreground is not None else None
        if not self._lingering.acquire(blocking=False):
            return False, None
        try:
            poll = select.poll()
            poll.register(conn.sock, select.POLLIN)
            if foreground is None:
                return bool(poll.poll(KEEPALIVE_LINGER_SECONDS * 1000)), None
            with foreground.expect_requests(conn.sock.fileno()):
                if not poll.poll(KEEPALIVE_LINGER_SECONDS * 1000):
                    return False, None
                return True, foreground.mark()  # taken before the background threads stop probing
        finally:
            self._lingering.release()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        apps: dict[tuple[str, str], WSGIApp] = {}
        for listener_socket in self.sockets:
            host, port = listener_socket.getsockname()[:2]
            apps[(str(host), str(port))] = self._listener_for(listener_socket).settings.app
        self.wsgi = _Dispatch(apps, self.limits.max_body_bytes)


def _defer_accept(listener_socket: Any) -> None:
    """Ask the kernel to queue a TCP connection for accept() only once it has sent bytes (or after
    DEFER_ACCEPT_SECONDS): see the module docstring. Where the option does not exist, connections are accepted at
    once."""
    option = getattr(socket, "TCP_DEFER_ACCEPT", None)
    if option is None or listener_socket.family not in (socket.AF_INET, socket.AF_INET6):
        return
    try:
        listener_socket.setsockopt(socket.IPPROTO_TCP, option, DEFER_ACCEPT_SECONDS)
    except OSError as error:
        log.warning("cannot defer accepting idle connections on %s: %s", listener_socket.getsockname(), error)


def _request_waiting(sock: Any) -> bool:
    """Whether the client has sent bytes not read yet (a peek at the plain socket, also under TLS, without
    blocking). A closed or failed connection has none: it is the first to go."""
    try:
        return bool(socket.socket.recv(sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:  # nothing waiting (BlockingIOError), or the connection failed
        return False


def _tls_pending(sock: Any) -> bool:
    """Whether a TLS socket holds decrypted bytes not yet read (invisible to poll)."""
    return isinstance(sock, ssl.SSLSocket) and sock.pending() > 0


def resolved_addresses(address: str) -> set[tuple[str, int]]:
    """The (host, port) socket names a configured HOST:PORT binds (a name may resolve to several)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, ValueError):
        return set()
    return {(str(info[4][0]), int(info[4][1])) for info in infos}


def is_loopback(address: str) -> bool:
    """Whether a HOST:PORT listens on loopback only (every address it resolves to is 127.0.0.0/8 or ::1)."""
    hosts = {host for host, _ in resolved_addresses(address)}
    return bool(hosts) and all(ipaddress.ip_address(host.split("%")[0]).is_loopback for host in hosts)


def _not_served(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = b'{"error":"this address is not one of the extender\'s listeners"}'
    start_response("404 Not Found", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


class _Dispatch:
    """The WSGI app of the request's listener, told apart by the listening socket's whole address (gunicorn puts
    its host and port in SERVER_NAME and SERVER_PORT), called with the request body already read (bounded, under
    the read deadline), so that the deadline watchdog can tell a slow client from a slow answer."""

    def __init__(self, apps: Mapping[tuple[str, str], WSGIApp], max_body_bytes: int) -> None:
        self.apps = dict(apps)
        self.max_body_bytes = max_body_bytes

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        length_header = environ.get("CONTENT_LENGTH") or ""
        length = int(length_header) if length_header.isdigit() else None
        if length is None or length <= self.max_body_bytes:
            stream = environ["wsgi.input"]
            body = stream.read(length) if length is not None else stream.read(self.max_body_bytes + 1)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        # Larger declared bodies are not read: the app answers 413 from the header alone.
        DEADLINES.request_read()
        given_id = environ.get("HTTP_X_REQUEST_ID")
        if given_id:
            name_request(given_id)
        address = (str(environ.get("SERVER_NAME", "")), str(environ.get("SERVER_PORT", "")))
        return self.apps.get(address, _not_served)(environ, start_response)


class ExtenderServer(BaseApplication):  # type: ignore[misc]  # gunicorn ships no type information
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


# The one source of the server's settings: config/gunicorn.conf.py documents the same values (a test keeps them
# equal) and `--gunicorn-config` overrides them. The bounds against slow and idle clients are the extender
# config's `server` section (service/config.py), applied by ExtenderWorker.
GUNICORN_DEFAULTS: dict[str, Any] = {
    "workers": 1,  # never more: see the module docstring
    "worker_class": "extender.transport.server.ExtenderWorker",
    "threads": 16,
    "timeout": 30,  # kube-scheduler gives up after httpTimeout (5 s by default); a stuck request must not pin a thread
    "graceful_timeout": 10,
    "keepalive": 30,
    "accesslog": None,
    "errorlog": "-",
    "logger_class": "extender.transport.logs.GunicornLogger",  # gunicorn's lines in our format (logs.py)
    "loglevel": "warning",
    "preload_app": True,
    # Bounds on what one request may send before the app sees it (the body limit is the app's).
    "limit_request_line": 8190,
    "limit_request_fields": 100,
    "limit_request_field_size": 16380,
}


def gunicorn_options(listen: str | list[str], overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    options: dict[str, Any] = {"bind": listen, **GUNICORN_DEFAULTS}
    if overrides:
        options.update({k: v for k, v in overrides.items() if v is not None})
    return options


class ListenError(Exception):
    """A listen address that cannot be bound (in use, not an address of this host, a privileged port)."""


def check_listen_addresses(addresses: Iterable[str]) -> None:
    """Bind each HOST:PORT once and release it, as gunicorn will (SO_REUSEADDR, gunicorn/sock.py): an address in
    use is one clear error before the server starts, instead of gunicorn's five retries and their lines."""
    for address in addresses:
        if address.startswith(("unix:", "fd://")):
            continue
        host, _, port = address.rpartition(":")
        host = host.strip("[]") or "0.0.0.0"
        try:
            family, kind, proto, _, sockaddr = socket.getaddrinfo(
                host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(sockaddr)
        except ValueError:
            raise ListenError(f"cannot listen on {address}: not HOST:PORT") from None
        except OSError as error:
            raise ListenError(f"cannot listen on {address}: {error.strerror or error}") from None
