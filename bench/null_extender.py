"""The floor of the extender protocol: a WSGI extender that decides nothing.

`python -m bench.e2e_bench --floor` runs this beside `dra-extender serve`, for a third kube-scheduler, under our
own server (`python -m bench.null_extender HOST:PORT`: transport/server.py's ExtenderServer and ExtenderWorker
with their defaults, as `dra-extender serve` runs them). It measures what calling an extender served that way
costs kube-scheduler at a given node count: kube-scheduler's JSON encoding of the pod and the node names and
decoding of the answers, the HTTP round trips, our server's request handling, orjson parsing the request and
encoding an answer that names every node. filter lets every node asked pass, prioritize gives each a score of 0
(pkg/scheduler/extender.go HTTPExtender.Filter / Prioritize read exactly these fields). kube-scheduler's own
plugins (DynamicResources among them) still decide where the pods go, so they get their devices; no quota is
enforced. (Under gunicorn's stock gthread worker the same app cost 1000-node bursts +11.4 ms per pod in
kube-scheduler's cycle, where the same answers from a minimal Go server cost about nothing: the pool hand-offs
per request that our worker avoids by lingering on a kept-alive connection, transport/server.py.)

One difference to the plain scheduler besides the calls: every node an extender scores gets a random
tie-breaker (pkg/scheduler/schedule_one.go prioritizeNodes sets NodePluginScores.Randomizer), so pods with
equal total scores spread over more nodes than without an extender, and where pods land changes what
kube-scheduler's own plugins cost for the next pods. The bench prints the nodes each round used.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

from extender.service import ExtenderConfig
from extender.transport.foreground import ForegroundWork
from extender.transport.server import ExtenderServer, ExtenderWorker, ListenerSettings, ServerLimits, gunicorn_options
from extender.transport.wire import filter_error
from testkit.builds.go import build_env, locate_go

GO_NULL_SOURCE = Path(__file__).resolve().parent / "null_extender_go"
GO_NULL_BINARY = Path(__file__).resolve().parent / ".build" / "null_extender_go"

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def _answer(verb: str, names: list[str]) -> bytes:
    if verb == "filter":
        return orjson.dumps({**filter_error(""), "NodeNames": names})  # the result's shape, every node passing
    return orjson.dumps([{"Host": name, "Score": 0} for name in names])


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    verb = environ.get("PATH_INFO", "").strip("/")
    if environ.get("REQUEST_METHOD") != "POST" or verb not in ("filter", "prioritize"):
        body = b"ok"
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    args = orjson.loads(environ["wsgi.input"].read(length))
    body = _answer(verb, args.get("NodeNames") or [])
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


class _Answer(list[bytes]):
    def close(self) -> None:
        """Nothing to release once written (the extender's verbs end their foreground mark here)."""


class NullVerbs:
    """The same answers on the server's direct path (transport/direct_http.py), which `dra-extender serve` takes
    for its verbs: the floor pays for the request handling the extender pays for."""

    paths = frozenset(("/filter", "/prioritize"))
    max_body_bytes = ExtenderConfig().limits.max_body_bytes
    # No background threads here to hold off; the server announces its waits on it as for the extender.
    foreground = ForegroundWork()

    def respond(self, path: str, body: bytes) -> tuple[int, list[tuple[str, str]], _Answer]:
        encoded = _answer(path.strip("/"), orjson.loads(body).get("NodeNames") or [])
        return 200, [("Content-Type", "application/json"), ("Content-Length", str(len(encoded)))], _Answer([encoded])


def build_go_null_extender() -> Path:
    """bench/null_extender_go built into bench/.build (gitignored; the standard library only, nothing fetched),
    the same answers from a Go server: the floor with no Python in it, for `bench.e2e_bench --floor` and
    `bench.scheduler_perf_bench --go-floor`. Rebuilt when its source is newer than the binary."""
    sources = list(GO_NULL_SOURCE.iterdir())
    if GO_NULL_BINARY.exists() and all(p.stat().st_mtime <= GO_NULL_BINARY.stat().st_mtime for p in sources):
        return GO_NULL_BINARY
    go = locate_go()
    if go is None:
        raise SystemExit("the Go floor needs the Go toolchain (`go`) to build bench/null_extender_go")
    GO_NULL_BINARY.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([go, "build", "-o", str(GO_NULL_BINARY), "."], cwd=GO_NULL_SOURCE, env=build_env(), check=True)
    return GO_NULL_BINARY


def main() -> None:
    # `python -m bench.null_extender HOST:PORT`, or the arguments `dra-extender serve` takes
    # (bench/scheduler_perf_bench.py --floor starts it in place of the extender): only --listen is read.
    args = sys.argv[1:]
    address = args[args.index("--listen") + 1] if "--listen" in args else args[0]
    defaults = ExtenderConfig().server  # the scheduling listener's bounds as `dra-extender serve` applies them
    listener = ListenerSettings(address, app, defaults.max_connections, direct=NullVerbs())
    ExtenderWorker.configure([listener], ServerLimits())
    ExtenderServer(app, gunicorn_options([address])).run()  # type: ignore[arg-type]  # serves any WSGI callable


if __name__ == "__main__":
    main()
