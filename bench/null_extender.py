"""The floor of the extender protocol: a WSGI extender that decides nothing.

`python -m bench.e2e_bench --floor` runs this beside `dra-extender serve`, for a third kube-scheduler, under
gunicorn's gthread worker (one process, 16 threads, keep-alive: the settings our server uses). It measures
what calling any Python extender costs kube-scheduler at a given node count: kube-scheduler's JSON encoding of
the pod and the node names and decoding of the answers, the HTTP round trips, gunicorn's request handling,
orjson parsing the request and encoding an answer that names every node. filter lets every node asked pass,
prioritize gives each a score of 0 (pkg/scheduler/extender.go HTTPExtender.Filter / Prioritize read exactly
these fields). kube-scheduler's own plugins (DynamicResources among them) still decide where the pods go, so
they get their devices; no quota is enforced.

One difference to the plain scheduler besides the calls: every node an extender scores gets a random
tie-breaker (pkg/scheduler/schedule_one.go prioritizeNodes sets NodePluginScores.Randomizer), so pods with
equal total scores spread over more nodes than without an extender, and where pods land changes what
kube-scheduler's own plugins cost for the next pods. The bench prints the nodes each round used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

JSON_HEADERS = [("Content-Type", "application/json")]
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def _answer(verb: str, names: list[str]) -> bytes:
    if verb == "filter":
        return orjson.dumps(
            {"Nodes": None, "NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
        )
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
    start_response("200 OK", [*JSON_HEADERS, ("Content-Length", str(len(body)))])
    return [body]
