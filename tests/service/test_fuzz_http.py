"""The HTTP surface under generated and hostile requests: never a 5xx, always the documented shapes.

Two layers, both against a Flask app around an engine built from a small two-flavor, two-team cohort:

- schemathesis (when installed) drives every operation of our OpenAPI document (extender/transport/openapi.yaml,
  served at /openapi.json) through the WSGI app, positive and negative data, with its checks: no server error,
  status codes, content types and response bodies as documented, Allow on 405. Its positive-data-acceptance
  check is left out: the document types ExtenderArgs.Pod as any object, while a Pod without metadata.name
  is rightly refused with a 400.
- hypothesis, always: valid ExtenderArgs / binding / explain bodies with hostile mutations (deep nesting,
  huge numbers, odd quantities, unicode, wrong types, nulls, keys duplicated in another letter case, raw
  duplicate keys, non-JSON bytes). Filter and prioritize must answer 200, 400 or 413; a 400 carries an
  "error" string; a 200 filter answer has the ExtenderFilterResult shape and names only input nodes; a 200
  prioritize answer scores exactly the input nodes with integers in 0..10.

Run with -s to see how many requests were sent and the statuses they got. FUZZ_EXAMPLES=N runs N random
examples per hypothesis test instead of the derandomized CI set.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.decisions.scheduling import needs_our_decision
from extender.service import ExtenderConfig
from extender.service.config import BindSection, LimitsSection
from extender.state.core import parse_pod
from extender.transport.app import create_app
from testkit import builders as b
from testkit.scenarios import cluster_queue, flavor, gpu_pod, kueue_config, local_queue, nodes_in_flavor, templates
from tests.support.fuzz import ODD_STRINGS, fuzz_settings, hostile_values, mutate
from tests.support.scenarios import engine_for

try:
    import schemathesis
except ImportError:  # an optional test dependency; the hypothesis tests below still run
    schemathesis = None

pytestmark = pytest.mark.slow  # fuzzing: hundreds of generated requests per test

MAX_BODY = 256 * 1024
NODES = ["on-demand-0", "on-demand-1", "spot-0", "spot-1"]
STATUSES: Counter[tuple[str, int]] = Counter()


def objects() -> list[dict[str, Any]]:
    return [
        b.namespace("team-a"),
        b.namespace("team-b"),
        b.device_class(),
        kueue_config(),
        flavor("on-demand"),
        flavor("spot"),
        *nodes_in_flavor("on-demand", 2, 4),
        *nodes_in_flavor("spot", 2, 4),
        cluster_queue("team-a", {"on-demand": {"nominal": 4}, "spot": {"nominal": 2, "borrowingLimit": 2}}),
        cluster_queue("team-b", {"on-demand": {"nominal": 2, "lendingLimit": 1}, "spot": {"nominal": 4}}),
        local_queue("team-a", "team-a"),
        local_queue("team-b", "team-b"),
        *templates("team-a"),
        *templates("team-b"),
        b.claim("shared", "team-a", [b.exact_request("gpu", 1)]),
    ]


class Tally:
    """WSGI middleware counting every response by path and status."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __call__(self, environ: dict, start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")

        def counting_start_response(status: str, headers: list, exc_info: Any = None) -> Any:
            STATUSES[(path, int(status.split()[0]))] += 1
            return start_response(status, headers, exc_info)

        return self.app(environ, counting_start_response)


def build_app():
    engine = engine_for(
        objects(),
        ExtenderConfig(
            limits=LimitsSection(max_body_bytes=MAX_BODY, max_nodes_per_request=64), bind=BindSection(enabled=True)
        ),
    )
    bound: list[tuple[str, str, str, str]] = []

    def binder(namespace: str, name: str, uid: str, node: str) -> None:
        if node not in NODES:
            raise RuntimeError(f"node {node} not found")
        bound.append((namespace, name, uid, node))

    engine.binder = binder
    app = create_app(engine)
    app.wsgi_app = Tally(app.wsgi_app)
    return app


APP = build_app()
CLIENT = APP.test_client()


@pytest.fixture(scope="module", autouse=True)
def report_requests():
    yield
    server_errors = {key: count for key, count in STATUSES.items() if key[1] >= 500}
    by_status = Counter()
    for (_, status), count in STATUSES.items():
        by_status[status] += count
    print("\nHTTP requests:", sum(STATUSES.values()), "by status", dict(sorted(by_status.items())))
    print("5xx:", server_errors or "none")


# --- schemathesis: the OpenAPI contract ---------------------------------------------------------------------------

if schemathesis is not None:
    SCHEMA = schemathesis.openapi.from_wsgi("/openapi.json", APP)

    @SCHEMA.parametrize()
    @settings(
        max_examples=int(os.environ.get("FUZZ_EXAMPLES") or 50),
        derandomize=not os.environ.get("FUZZ_EXAMPLES"),
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    def test_openapi_contract(case):
        response = case.call_and_validate(excluded_checks=[schemathesis.checks.positive_data_acceptance])
        assert response.status_code < 500

else:

    @pytest.mark.skip(reason="schemathesis is not installed (pip install schemathesis)")
    def test_openapi_contract():
        pass


# --- hypothesis: hostile bodies -----------------------------------------------------------------------------------

SEED_PODS = [
    gpu_pod("p", "team-a", template="two"),
    gpu_pod("q", "team-b", template="four-or-two"),
    gpu_pod("everything", "team-a", template="all"),
    gpu_pod("noq", "team-a", queue=None),
    gpu_pod("missing", "team-b", template="no-such-template"),
    b.pod("shared", "team-a", claims={"gpu": "shared"}, queue="q"),
    b.pod("plain", "default"),
]


def utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # lone surrogates: JSON from kube-scheduler cannot carry them
        return False
    return True


node_names = st.lists(
    st.one_of(
        st.sampled_from([*NODES, "ghost"]),
        st.sampled_from([s for s in ODD_STRINGS if utf8(s)]),
        st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=10),
    ),
    max_size=8,
)


@st.composite
def extender_args(draw: st.DrawFn) -> tuple[dict[str, Any], bool]:
    """A valid ExtenderArgs body, in the NodeNames or the Nodes form."""
    pod = draw(st.sampled_from(SEED_PODS))
    names = draw(node_names)
    if draw(st.booleans()):
        return {"Pod": pod, "NodeNames": names, "Nodes": None}, False
    return {"Pod": pod, "Nodes": {"items": [b.node(name) for name in names]}, "NodeNames": None}, True


def raw_json_with_duplicates(data: st.DataObject, body: dict[str, Any]) -> bytes:
    """The body as JSON text with one top-level key repeated verbatim or in another letter case."""
    items = [(key, value) for key, value in body.items()]
    key = data.draw(st.sampled_from([key for key, _ in items] or ["Pod"]), label="duplicated key")
    spelling = data.draw(st.sampled_from([key, key.lower(), key.upper(), key.swapcase()]), label="spelling")
    duplicate = data.draw(st.one_of(hostile_values, st.just(body.get(key))), label="duplicate value")
    position = data.draw(st.integers(0, len(items)), label="position")
    items.insert(position, (spelling, duplicate))
    return b"{" + b",".join(orjson.dumps(k) + b":" + orjson.dumps(v) for k, v in items) + b"}"


def encode(data: st.DataObject, body: Any) -> bytes:
    form = data.draw(st.sampled_from(["json", "json", "json", "duplicates", "garbage", "truncated"]), label="form")
    try:
        if form == "duplicates" and isinstance(body, dict):
            return raw_json_with_duplicates(data, body)
        text = orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):  # integers past 64 bits: send them as text instead
        text = yaml.safe_dump(body).encode("utf-8", "surrogatepass")
    if form == "garbage":
        return data.draw(st.sampled_from([b"\xff\xfe", b"\x00", b"nul", b"{", b"[]", b"1e999", b'"\\ud800"', b""]))
    if form == "truncated":
        return text[: data.draw(st.integers(0, max(0, len(text) - 1)))]
    return text


def check_error_body(response: Any) -> None:
    body = response.get_json()
    assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], body


def check_filter(response: Any, args: Any, nodes_form: bool) -> None:
    assert response.status_code in (200, 400, 413), response.get_data(as_text=True)
    if response.status_code != 200:
        check_error_body(response)
        return
    result = response.get_json()
    assert set(result) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert result["Error"] == ""
    assert isinstance(result["FailedNodes"], dict) and isinstance(result["FailedAndUnresolvableNodes"], dict)
    assert all(isinstance(v, str) and v for v in result["FailedNodes"].values())
    assert all(isinstance(v, str) and v for v in result["FailedAndUnresolvableNodes"].values())
    if args is None:  # the body was mutated: the names asked for are whatever the server parsed
        return
    asked = set(args)
    if nodes_form:
        assert result["NodeNames"] is None
        passed = [item["metadata"]["name"] for item in result["Nodes"]["items"]]
    else:
        assert result["Nodes"] is None
        passed = result["NodeNames"]
    assert set(passed) <= asked
    failed = set(result["FailedNodes"]) | set(result["FailedAndUnresolvableNodes"])
    assert failed <= asked
    assert not set(passed) & failed
    assert set(passed) | failed == asked  # every node asked about gets a verdict


def check_prioritize(response: Any, args: Any, *, scores_nothing: bool = False) -> None:
    """`scores_nothing`: the pod has nothing for the extender to decide, whose answer names no node
    (wire.scores_nothing); every other valid request gets an entry per node above the lowest score asked, in the
    order asked, each with its score less that lowest (wire.relative_scores: 1..10)."""
    assert response.status_code in (200, 400, 413), response.get_data(as_text=True)
    if response.status_code != 200:
        check_error_body(response)
        return
    scores = response.get_json()
    assert isinstance(scores, list)
    for entry in scores:
        assert set(entry) == {"Host", "Score"}
        assert isinstance(entry["Host"], str)
        assert type(entry["Score"]) is int and 0 < entry["Score"] <= 10, entry
    if args is not None:
        named = [entry["Host"] for entry in scores]
        assert named == ([] if scores_nothing else [name for name in args if name in set(named)])


def post(path: str, data: bytes, content_type: str = "application/json") -> Any:
    return CLIENT.post(path, data=data, content_type=content_type)


@fuzz_settings(250)
@given(extender_args())
def test_valid_requests_get_the_protocol_shapes(request_args):
    body, nodes_form = request_args
    names = [item["metadata"]["name"] for item in body["Nodes"]["items"]] if nodes_form else body["NodeNames"]
    data = orjson.dumps(body)
    check_filter(post("/filter", data), names, nodes_form)
    service = APP.extensions["dra_service"]
    nothing = not needs_our_decision(parse_pod(body["Pod"]), service.snapshot())
    check_prioritize(post("/prioritize", data), names, scores_nothing=nothing)


@fuzz_settings(400)
@given(st.data(), extender_args())
def test_hostile_extender_args(data, request_args):
    seed, nodes_form = request_args
    body = mutate(data, seed) if data.draw(st.integers(0, 9), label="mutate?") else data.draw(hostile_values)
    payload = encode(data, body)
    verb = data.draw(st.sampled_from(["/filter", "/prioritize"]), label="verb")
    response = post(verb, payload, data.draw(st.sampled_from(["application/json", "text/plain", ""])))
    if verb == "/filter":
        check_filter(response, None, nodes_form)
    else:
        check_prioritize(response, None)


@fuzz_settings(150)
@given(st.data())
def test_hostile_binding_args(data):
    seed = {"PodName": "p", "PodNamespace": "team-a", "PodUID": "uid-team-a-p", "Node": "on-demand-0"}
    body = mutate(data, seed) if data.draw(st.booleans()) else data.draw(hostile_values)
    response = post("/bind", encode(data, body))
    assert response.status_code in (200, 400, 413), response.get_data(as_text=True)
    if response.status_code == 200:
        assert set(response.get_json()) == {"Error"} and isinstance(response.get_json()["Error"], str)
    else:
        check_error_body(response)


@fuzz_settings(150)
@given(st.data())
def test_hostile_explain(data):
    pod = mutate(data, data.draw(st.sampled_from(SEED_PODS)), yaml_values=True)
    if data.draw(st.booleans(), label="yaml?"):
        try:
            payload = yaml.safe_dump(pod, allow_unicode=True).encode("utf-8", "surrogatepass")
        except (yaml.YAMLError, RecursionError):
            return
        response = post("/diagnostics/explain", payload, "application/yaml")
    else:
        response = post("/diagnostics/explain", encode(data, pod))
    assert response.status_code in (200, 400, 413), response.get_data(as_text=True)
    if response.status_code == 200:
        report = response.get_json()
        assert {"pod", "nodes", "quota"} <= set(report)
    else:
        check_error_body(response)


def test_oversized_and_deep_bodies():
    deep = b'{"Pod": ' + b"[" * 150_000 + b"]" * 150_000 + b', "NodeNames": []}'
    for path in ("/filter", "/prioritize", "/bind", "/diagnostics/explain"):
        response = post(path, deep)
        assert response.status_code == 413
        check_error_body(response)
        nested = b'{"Pod": ' + b"[" * 1_500 + b"]" * 1_500 + b', "NodeNames": []}'
        response = post(path, nested)
        assert response.status_code == 400
        check_error_body(response)
    yaml_bomb = b"a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nd: [*c, *c, *c, *c]\nkind: Pod\n"
    response = post("/diagnostics/explain", yaml_bomb, "application/yaml")
    assert response.status_code == 400
    recursive = b"metadata: &m {name: p, namespace: team-a, labels: *m}\nkind: Pod\n"
    response = post("/diagnostics/explain", recursive, "application/yaml")
    assert response.status_code == 400


def test_unsupported_methods_say_what_is_allowed():
    response = CLIENT.put("/filter", data=b"{}")
    assert response.status_code == 405
    assert response.headers["Allow"].split(", ").count("POST") == 1
    check_error_body(response)


def test_no_server_error_in_any_request_of_this_module():
    """Last in the module, so it sees the tally of every request above (pytest runs tests in file order)."""
    assert sum(STATUSES.values()) > 0
    assert not {key: count for key, count in STATUSES.items() if key[1] >= 500}
