"""The server's direct path for kube-scheduler's verbs (transport/direct_http.py): which requests it
takes, and that every request gets the same answer whichever path serves it."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from extender.transport.direct_http import HeadLimits, parse_direct_head, response_bytes
from testkit.scenarios import gpu_pod
from tests.support.serve import Served, serving

LIMITS = HeadLimits(request_line=8190, fields=100, field_size=16380)
NODES = ["on-demand-0", "on-demand-1", "on-demand-2"]


class Verbs:
    paths = frozenset(("/filter", "/prioritize"))
    max_body_bytes = 1000


def head(*lines: str, body: bytes = b"{}") -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


ORDINARY = ("POST /filter HTTP/1.1", "Host: x", "Content-Type: application/json", "Content-Length: 2")


def test_an_ordinary_verb_request_is_taken_with_its_body_start() -> None:
    data = head(*ORDINARY)
    assert parse_direct_head(data, Verbs(), LIMITS) == ("/filter", 2, True, len(data) - 2)
    closing = head(*ORDINARY, "Connection: close")
    assert parse_direct_head(closing, Verbs(), LIMITS) == ("/filter", 2, False, len(closing) - 2)
    # The start of the head is enough; the body may follow in later reads.
    assert parse_direct_head(head(*ORDINARY, body=b""), Verbs(), LIMITS) is not None


@pytest.mark.parametrize(
    ("why", "data"),
    [
        ("another path", head("POST /bind HTTP/1.1", "Host: x", "Content-Length: 2")),
        ("a query", head("POST /filter?x=1 HTTP/1.1", "Host: x", "Content-Length: 2")),
        ("another method", head("PUT /filter HTTP/1.1", "Host: x", "Content-Length: 2")),
        ("HTTP/1.0", head("POST /filter HTTP/1.0", "Host: x", "Content-Length: 2")),
        (
            "chunked",
            head("POST /filter HTTP/1.1", "Host: x", "Transfer-Encoding: chunked", body=b"2\r\n{}\r\n0\r\n\r\n"),
        ),
        ("expect", head(*ORDINARY, "Expect: 100-continue")),
        ("upgrade", head(*ORDINARY, "Connection: Upgrade", "Upgrade: h2c")),
        ("no length", head("POST /filter HTTP/1.1", "Host: x")),
        ("a length not a number", head("POST /filter HTTP/1.1", "Host: x", "Content-Length: 0x2")),
        ("two lengths", head(*ORDINARY, "Content-Length: 2")),
        ("a body over the limit", head("POST /filter HTTP/1.1", "Host: x", "Content-Length: 1001")),
        ("the head not whole", head(*ORDINARY)[:30]),
        ("bare LF", b"POST /filter HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}"),
        ("a malformed field", head("POST /filter HTTP/1.1", "Host x", "Content-Length: 2")),
        ("space before the colon", head("POST /filter HTTP/1.1", "Host: x", "Content-Length : 2")),
        ("too many fields", head(*ORDINARY, *(f"X-{i}: y" for i in range(100)))),
        ("a field too large", head(*ORDINARY, "X-Big: " + "y" * 16380)),
        ("a request line too long", head("POST /filter" + "/" * 8190 + " HTTP/1.1", "Host: x", "Content-Length: 2")),
        ("not HTTP", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"),
    ],
)
def test_anything_unusual_is_left_to_gunicorn(why: str, data: bytes) -> None:
    assert parse_direct_head(data, Verbs(), LIMITS) is None, why


def test_the_answer_is_one_buffer_with_the_connection_said() -> None:
    kept = response_bytes(200, [("Content-Type", "application/json"), ("Content-Length", "2")], [b"{}"], True)
    status, _, rest = kept.partition(b"\r\n")
    assert status == b"HTTP/1.1 200 OK"
    fields, _, body = rest.partition(b"\r\n\r\n")
    names = [line.split(b":", 1)[0] for line in fields.split(b"\r\n")]
    assert names == [b"Server", b"Date", b"Connection", b"Content-Type", b"Content-Length"] and body == b"{}"
    assert b"Connection: keep-alive" in fields
    closed = response_bytes(503, [("Content-Length", "0")], [], False)
    assert closed.startswith(b"HTTP/1.1 503 Service Unavailable\r\n") and b"Connection: close\r\n" in closed


# --- a real `dra-extender serve` ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(tmp_path_factory.mktemp("direct"), len(NODES), {"logging": {"level": "WARNING"}}) as running:
        yield running


@pytest.fixture(scope="module")
def port(served: Served) -> int:
    return served.port


def read_response(reader: Any) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response from a file over the socket (Content-Length bodies, as both paths send)."""
    while True:
        status_line = reader.readline()
        assert status_line.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")), status_line
        fields: dict[str, str] = {}
        while (line := reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            fields[name.strip().lower()] = value.strip()
        if status_line.split()[1] != b"100":  # an interim answer to Expect: 100-continue comes first
            return int(status_line.split()[1]), fields, reader.read(int(fields["content-length"]))


def exchange(
    port: int, *sends: bytes, answers: int, pause: float = 0.0
) -> tuple[list[tuple[int, dict[str, str], bytes]], bool]:
    """Send the pieces (with `pause` between them) on one connection, read `answers` responses; and whether the
    server closed the connection after them."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for piece in sends:
            sock.sendall(piece)
            time.sleep(pause)
        reader = sock.makefile("rb")
        responses = [read_response(reader) for _ in range(answers)]
        sock.settimeout(1.0)
        try:
            closed = reader.read(1) == b""
        except TimeoutError:
            closed = False
        return responses, closed


def verb_request(
    path: str, pod: str, *extra: str, chunked: bool = False, version: str = "1.1", names: list[str] = NODES
) -> bytes:
    body = json.dumps({"Pod": gpu_pod(pod, template="one"), "NodeNames": names}).encode()
    lines = [f"POST {path} HTTP/{version}", "Host: x", "Content-Type: application/json", *extra]
    if chunked:
        return head(*lines, "Transfer-Encoding: chunked", body=f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
    return head(*lines, f"Content-Length: {len(body)}", body=body)


@pytest.mark.slow
def test_both_paths_give_the_same_answers(port: int) -> None:
    """The same filter and prioritize through the direct path (Content-Length) and through gunicorn (chunked,
    Expect: 100-continue, HTTP/1.0): the same bodies and statuses."""
    answers = {}
    for label, extra in {
        "direct": {},
        "chunked": {"chunked": True},
        "expect": {"extra": ("Expect: 100-continue",)},
        "http/1.0": {"version": "1.0"},
    }.items():
        kwargs: dict[str, Any] = {k: v for k, v in extra.items() if k != "extra"}
        # prioritize asked about a node no one knows too: it scores 0, the lowest, and the answer names the three
        # others with their scores (wire.relative_scores; the three alone, all empty, would score alike: `[]`)
        requests = [
            verb_request(v, f"same-{label}", *extra.get("extra", ()), names=names, **kwargs)
            for v, names in (("/filter", NODES), ("/prioritize", [*NODES, "ghost"]))
        ]
        got = []
        for data in requests:
            (response,), _ = exchange(port, data, answers=1)
            assert (response[1]["server"] == "dra-extender") == (label == "direct"), (label, response[1])
            got.append((response[0], json.loads(response[2])))
        answers[label] = got
    assert answers["direct"][0][0] == 200 and answers["direct"][0][1]["NodeNames"] == NODES
    assert [s["Host"] for s in answers["direct"][1][1]] == NODES
    for label in ("chunked", "expect", "http/1.0"):
        assert answers[label] == answers["direct"], label


@pytest.mark.slow
def test_keep_alive_close_and_pipelining_on_the_direct_path(port: int) -> None:
    first, second = verb_request("/filter", "kept-1"), verb_request("/prioritize", "kept-1")
    responses, closed = exchange(port, first, second, answers=2, pause=0.05)
    assert [r[0] for r in responses] == [200, 200] and not closed
    assert all(r[1]["connection"] == "keep-alive" and r[1]["server"] == "dra-extender" for r in responses)
    # Two requests in one write (pipelined): both answered, in order.
    responses, closed = exchange(port, first + second, answers=2)
    assert [r[0] for r in responses] == [200, 200] and not closed
    assert "NodeNames" in json.loads(responses[0][2]) and isinstance(json.loads(responses[1][2]), list)
    # Connection: close is honoured.
    responses, closed = exchange(port, verb_request("/filter", "kept-2", "Connection: close"), answers=1)
    assert responses[0][0] == 200 and responses[0][1]["connection"] == "close" and closed


@pytest.mark.slow
def test_a_body_in_slow_pieces_and_bad_bodies(port: int) -> None:
    data = verb_request("/filter", "slow-1")
    cut = data.index(b"\r\n\r\n") + 4
    pieces = [data[:cut], data[cut : cut + 10], data[cut + 10 :]]
    (response,), _ = exchange(port, *pieces, answers=1, pause=0.2)
    assert response[0] == 200 and json.loads(response[2])["NodeNames"] == NODES
    # Malformed JSON and a wrong shape get their 400 on the direct path, as through Flask.
    for body in (b"{not json", b"[]", b'{"Pod": 3, "NodeNames": []}'):
        raw = head("POST /filter HTTP/1.1", "Host: x", f"Content-Length: {len(body)}", body=body)
        (response,), closed = exchange(port, raw, answers=1)
        assert response[0] == 400 and "error" in json.loads(response[2]) and not closed
    # A body over the limit goes to Flask, which answers 413 from the header alone.
    raw = head("POST /filter HTTP/1.1", "Host: x", f"Content-Length: {64 * 1024 * 1024}", body=b"")
    (response,), _ = exchange(port, raw, answers=1)
    assert response[0] == 413


@pytest.mark.slow
def test_the_direct_path_is_timed_and_counted(served: Served) -> None:
    port = served.port

    def filters_counted() -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{served.diagnostics_port}/metrics", timeout=5) as response:
            text = response.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("dra_extender_requests_total{") and 'verb="filter"' in line and 'code="200"' in line
        )

    before = filters_counted()
    exchange(port, verb_request("/filter", "counted"), answers=1)
    assert filters_counted() == before + 1


@pytest.mark.slow
def test_with_an_access_log_every_request_goes_through_gunicorn(tmp_path: Path) -> None:
    access_log = tmp_path / "access.log"
    config = tmp_path / "gunicorn.conf.py"
    config.write_text(f"accesslog = {str(access_log)!r}\n")
    with serving(tmp_path, len(NODES), {}, "--gunicorn-config", str(config)) as running:
        (response,), _ = exchange(running.port, verb_request("/filter", "logged"), answers=1)
    assert response[0] == 200 and response[1]["server"] != "dra-extender"
    assert '"POST /filter HTTP/1.1" 200' in access_log.read_text()
