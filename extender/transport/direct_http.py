"""kube-scheduler's filter and prioritize read off the connection and answered with one write, without gunicorn's
request parser, its WSGI environ and its response object.

kube-scheduler waits for these two answers inside its serial scheduling cycle, for every pod
(pkg/scheduler/framework/extender.go HTTPExtender.send: one POST per verb, the answer decoded before the cycle
goes on). gunicorn's handling of a request costs more CPU than the verbs' own work on a small cluster: its
pure-Python parser, the WSGI environ, and the response written with two system calls.

The path is deliberately narrow. It serves a request only when everything about it is ordinary: the whole head
in the first bytes read, a head llhttp (httptools, the parser of Node.js and uvicorn) accepts, POST to one of the
verbs' paths with no query, HTTP/1.1, a Content-Length within the body limit, no Transfer-Encoding, Expect or
Upgrade, and the head within gunicorn's own limits. Anything else goes to gunicorn with the bytes read so far
given back to its parser (`unread`), so chunked bodies, `Expect: 100-continue`, oversized or malformed heads, TLS
oddities and every other route keep the answers gunicorn and Flask give them. What the answer holds is the
same either way: both paths call `DirectVerbs.respond` (transport/verb_fast_path.py SchedulingVerbs). gunicorn's request
hooks (pre_request, post_request) do not run for these requests, and with gunicorn's access log configured the
worker sends every request through gunicorn (transport/server.py), so that the log misses none.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Protocol

import httptools

from extender.transport.foreground import ForegroundWork

HEAD_END = b"\r\n\r\n"
# One recv for the head (kube-scheduler's is about 200 bytes, sent with the start of the body), and per body read.
RECV_BYTES = 256 * 1024
_REFUSED_FIELDS = frozenset((b"transfer-encoding", b"expect", b"upgrade"))


class WrittenBody(Protocol):
    """The answer's body chunks; `close` is called once the answer is written, or failed to be."""

    def __iter__(self) -> Any: ...

    def close(self) -> None: ...


class DirectVerbs(Protocol):
    """What a listener answers on the direct path (transport/verb_fast_path.py SchedulingVerbs)."""

    paths: frozenset[str]
    max_body_bytes: int  # a larger body goes to gunicorn and Flask, which answer 413
    foreground: ForegroundWork  # marked at the wake-up for a request, before it is read (transport/foreground.py)

    def respond(self, path: str, body: bytes) -> tuple[int, list[tuple[str, str]], WrittenBody]:
        """Status, headers (with Content-Length) and body of the answer to a verb's request body."""
        ...


@dataclass(frozen=True, slots=True)
class HeadLimits:
    """gunicorn's bounds on a request head (limit_request_line, _fields, _field_size): a head past them goes to
    gunicorn, which answers it as it always has."""

    request_line: int
    fields: int
    field_size: int


@dataclass(frozen=True, slots=True)
class DirectRequest:
    path: str
    body: bytes
    keep_alive: bool
    rest: bytes  # bytes read past the body (a pipelined request): gunicorn's parser gets them


class _Head:
    """httptools' callbacks for a request head."""

    __slots__ = ("complete", "fields", "url")

    def __init__(self) -> None:
        self.url = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.complete = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.complete = True


def parse_direct_head(first: bytes, verbs: DirectVerbs, limits: HeadLimits) -> tuple[str, int, bool, int] | None:
    """(path, Content-Length, keep-alive, where the body starts) for a request the direct path serves; None for
    any other (the caller hands `first` to gunicorn)."""
    end = first.find(HEAD_END)
    if end < 0:
        return None
    line_end = first.find(b"\r\n")
    if line_end > limits.request_line:
        return None
    head = _Head()
    parser = httptools.HttpRequestParser(head)
    try:
        parser.feed_data(first[: end + 4])
    except (httptools.HttpParserError, httptools.HttpParserUpgrade):  # the latter: a request to switch protocols
        return None
    if not head.complete or parser.get_method() != b"POST" or parser.get_http_version() != "1.1":
        return None
    path = head.url.decode("latin-1")
    if path not in verbs.paths or len(head.fields) > limits.fields:
        return None
    length = None
    for name, value in head.fields:
        if name in _REFUSED_FIELDS or len(name) + len(value) + 2 > limits.field_size:
            return None
        if name == b"content-length":
            if length is not None or not value.isdigit():
                return None
            length = int(value)
    if length is None or length > verbs.max_body_bytes:
        return None
    return path, length, parser.should_keep_alive(), end + 4


def read_direct_request(sock: Any, first: bytes, verbs: DirectVerbs, limits: HeadLimits) -> DirectRequest | None:
    """The request whose first bytes are `first`, its body read whole from `sock` (blocking; the server's read
    deadline shuts the socket of a client too slow). None: not one for the direct path, nothing more was read.
    EOFError: the client closed the connection before its body was complete."""
    head = parse_direct_head(first, verbs, limits)
    if head is None:
        return None
    path, length, keep_alive, body_start = head
    received = bytearray(first[body_start:])
    while len(received) < length:
        chunk = sock.recv(max(RECV_BYTES, length - len(received)))
        if not chunk:
            raise EOFError(f"the connection closed {len(received)} bytes into a body of {length}")
        received += chunk
    return DirectRequest(path, bytes(received[:length]), keep_alive, bytes(received[length:]))


class _HttpDate:
    """The Date header's value (RFC 9110 section 6.6.1: an origin server with a clock sends it), formatted once a
    second."""

    def __init__(self) -> None:
        self.second = 0
        self.value = b""

    def now(self) -> bytes:
        second = int(time.time())
        if second != self.second:
            self.value = formatdate(second, usegmt=True).encode("ascii")
            self.second = second
        return self.value


_DATE = _HttpDate()
_STATUS_LINES = {status.value: f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode() for status in HTTPStatus}


def response_bytes(status: int, headers: Iterable[tuple[str, str]], body: Iterable[bytes], keep_alive: bool) -> bytes:
    """Status line, headers and body as one buffer, written with one sendall: two writes would let a thread that
    woke meanwhile (a watch event) hold kube-scheduler's answer back between them."""
    parts = [
        _STATUS_LINES[status],
        b"Server: dra-extender\r\nDate: ",
        _DATE.now(),
        b"\r\nConnection: keep-alive\r\n" if keep_alive else b"\r\nConnection: close\r\n",
    ]
    parts.extend(f"{name}: {value}\r\n".encode("latin-1") for name, value in headers)
    parts.append(b"\r\n")
    parts.extend(body)
    return b"".join(parts)
