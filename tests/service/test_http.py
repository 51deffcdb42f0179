"""The HTTP surface as kube-scheduler and people meet it: protocol shapes, letter case, bad input, ops."""

from __future__ import annotations

import io

import orjson
import pytest
import yaml

from extender.service import ExtenderConfig
from extender.service.config import DiagnosticsSection, LimitsSection
from extender.transport.app import create_app
from testkit import builders as b
from testkit.scenarios import cluster_queue, flavor, gpu_pod, kueue_config, local_queue, nodes_in_flavor, templates
from tests.support.scenarios import engine_for


@pytest.fixture()
def client():
    objects = [
        b.namespace("team-a"),
        b.device_class(),
        kueue_config(),
        flavor("on-demand"),
        flavor("spot"),
        *nodes_in_flavor("on-demand", 2, 4),
        *nodes_in_flavor("spot", 1, 4),
        cluster_queue("team-a", {"on-demand": {"nominal": 4}, "spot": {"nominal": 4}}, cohort=None),
        local_queue("team-a", "team-a"),
        *templates("team-a"),
    ]
    engine = engine_for(objects, ExtenderConfig(limits=LimitsSection(max_body_bytes=64 * 1024)))
    app = create_app(engine)
    return app.test_client()


NODES = ["on-demand-0", "on-demand-1", "spot-0"]


def post(client, path, body):
    return client.post(path, data=orjson.dumps(body), content_type="application/json")


def test_filter_node_names_form(client):
    response = post(client, "/filter", {"Pod": gpu_pod("p"), "NodeNames": NODES, "Nodes": None})
    assert response.status_code == 200
    body = response.get_json()
    assert set(body) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert body["Nodes"] is None and body["Error"] == ""
    assert body["NodeNames"] == ["on-demand-0", "on-demand-1"]
    assert "assigned flavor on-demand" in body["FailedNodes"]["spot-0"]


def test_filter_nodes_form_returns_node_objects(client):
    items = [b.node(name) for name in NODES]
    response = post(client, "/filter", {"Pod": gpu_pod("p"), "Nodes": {"items": items}, "NodeNames": None})
    body = response.get_json()
    assert body["NodeNames"] is None
    assert [item["metadata"]["name"] for item in body["Nodes"]["items"]] == ["on-demand-0", "on-demand-1"]
    assert body["Nodes"]["items"][0] == items[0]


def test_keys_in_any_letter_case(client):
    response = post(client, "/filter", {"pod": gpu_pod("p"), "nodenames": NODES})
    assert response.get_json()["NodeNames"] == ["on-demand-0", "on-demand-1"]
    response = post(client, "/prioritize", {"POD": gpu_pod("p"), "NODENAMES": NODES})
    # the pod's claims were read: the nodes of its flavor score above spot-0, which it cannot use
    assert {entry["Host"] for entry in response.get_json()} == {"on-demand-0", "on-demand-1"}


def test_prioritize_scores_are_integers_in_range(client):
    post(client, "/filter", {"Pod": gpu_pod("p"), "NodeNames": NODES})
    response = post(client, "/prioritize", {"Pod": gpu_pod("p"), "NodeNames": NODES})
    scores = response.get_json()
    # spot-0 did not pass (0, the lowest score asked): left out, the others less that 0 (wire.relative_scores)
    assert [s["Host"] for s in scores] == ["on-demand-0", "on-demand-1"]
    for entry in scores:
        assert isinstance(entry["Score"], int) and 0 < entry["Score"] <= 10


def test_unknown_nodes_are_rejected_per_node(client):
    response = post(client, "/filter", {"Pod": gpu_pod("p"), "NodeNames": ["on-demand-0", "ghost"]})
    body = response.get_json()
    assert body["NodeNames"] == ["on-demand-0"]
    assert "not known" in body["FailedNodes"]["ghost"]
    fast = post(client, "/filter", {"Pod": b.pod("plain", "default"), "NodeNames": ["on-demand-0", "ghost"]})
    assert fast.get_json()["NodeNames"] == ["on-demand-0"]


def test_pod_without_claims_takes_fast_path(client):
    response = post(client, "/filter", {"Pod": b.pod("plain", "default"), "NodeNames": NODES})
    assert response.get_json()["NodeNames"] == NODES
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'dra_extender_fast_path_total{verb="filter"} 1.0' in metrics


def test_pod_without_claims_gets_an_empty_prioritize_answer(client):
    """Nothing of ours to score: kube-scheduler ranks the pod as without an extender (wire.scores_nothing), on the
    lean path and through Flask alike; a device pod gets an entry per node above the lowest score asked."""
    plain = orjson.dumps({"Pod": b.pod("plain", "default"), "NodeNames": NODES})
    assert client.post("/prioritize", data=plain, content_type="application/json").get_json() == []
    assert _without_length(client, "/prioritize", plain).get_json() == []
    scored = post(client, "/prioritize", {"Pod": gpu_pod("p"), "NodeNames": NODES}).get_json()
    assert [entry["Host"] for entry in scored] == ["on-demand-0", "on-demand-1"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b"{}", "Pod is required"),
        (b'{"Pod": 5, "NodeNames": []}', "Pod must be an object"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "n1"}', "NodeNames must be a list"),
        (b'{"Pod": {"metadata": {"name": "p"}}}', "one of NodeNames or Nodes"),
        (b'{"Pod": {"metadata": {}}, "NodeNames": []}', "metadata.name"),
        (
            b'{"Pod": {"metadata": {"name": "p"}, "spec": {"resourceClaims": [{"name": 3}]}}, "NodeNames": []}',
            "spec.resourceClaims[0].name",
        ),
        (b"", "empty"),
    ],
)
def test_bad_input_is_a_clear_400(client, body, message):
    for verb in ("/filter", "/prioritize"):
        response = client.post(verb, data=body, content_type="application/json")
        assert response.status_code == 400, response.get_data(as_text=True)
        assert message in response.get_json()["error"]


def _without_length(client, path, data):
    """The request as a chunked client sends it: no Content-Length, the body ends with the stream."""
    return client.post(
        path,
        input_stream=io.BytesIO(data),
        content_type="application/json",
        environ_overrides={"wsgi.input_terminated": True, "CONTENT_LENGTH": ""},
    )


def test_verbs_answer_alike_on_the_lean_path_and_through_flask(client):
    """filter and prioritize with a Content-Length are answered by SchedulingVerbs; without one (chunked) they go
    through Flask's routes. The answers, the errors and the request metrics must not tell the two apart."""
    good = {"Pod": gpu_pod("p"), "NodeNames": NODES}
    for path in ("/filter", "/prioritize"):
        lean = client.post(path, data=orjson.dumps(good), content_type="application/json")
        flask = _without_length(client, path, orjson.dumps(good))
        assert lean.status_code == flask.status_code == 200
        assert lean.get_json() == flask.get_json()
        assert lean.headers["Content-Type"] == flask.headers["Content-Type"] == "application/json"
        for data in (b"{not json", b'{"Pod": 5, "NodeNames": []}'):
            lean_error = client.post(path, data=data, content_type="application/json")
            flask_error = _without_length(client, path, data)
            assert lean_error.status_code == flask_error.status_code == 400
            assert lean_error.get_json() == flask_error.get_json()
    assert client.post("/filter", data=orjson.dumps(good), content_type="application/json").get_json()["NodeNames"]
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'dra_extender_requests_total{code="200",verb="filter"} 3.0' in metrics
    assert 'dra_extender_requests_total{code="400",verb="filter"} 4.0' in metrics
    assert 'dra_extender_requests_total{code="200",verb="prioritize"} 2.0' in metrics
    assert 'dra_extender_request_duration_seconds_count{verb="prioritize"} 6.0' in metrics
    assert client.get("/filter").status_code == 405  # other methods still meet Flask's routing


def test_oversized_body_is_413(client):
    huge = {"Pod": gpu_pod("p"), "NodeNames": ["n" * 100] * 2000}
    response = post(client, "/filter", huge)
    assert response.status_code == 413
    assert "limit" in response.get_json()["error"]


def test_bind_disabled_by_default(client):
    response = post(client, "/bind", {"PodName": "p", "PodNamespace": "team-a", "PodUID": "u", "Node": "n"})
    assert response.status_code == 404


def test_diagnostics_pod_decision_after_filter(client):
    post(client, "/filter", {"Pod": gpu_pod("p"), "NodeNames": NODES})
    report = client.get("/diagnostics/pods/team-a/p").get_json()
    assert report["verb"] == "filter"
    assert report["quota"]["clusterQueue"] == "team-a" and report["quota"]["chosenFlavor"] == "on-demand"
    passed = [n for n in report["nodes"] if n["passed"]]
    assert passed[0]["devices"][0]["deviceClass"] == "gpu.example.com"
    assert passed[0]["quota"]["fits"][0]["available"] == 4
    assert client.get("/diagnostics/pods/team-a/unknown").status_code == 404


def test_explain_accepts_yaml_and_reserves_nothing(client):
    response = client.post(
        "/diagnostics/explain", data=yaml.safe_dump(gpu_pod("p", template="four")), content_type="application/yaml"
    )
    report = response.get_json()
    assert response.status_code == 200
    assert [n["node"] for n in report["nodes"] if n["passed"]] == ["on-demand-0", "on-demand-1"]
    queues = client.get("/diagnostics/queues").get_json()
    assert queues["reservations"] == []
    bad = client.post("/diagnostics/explain", data=b"kind: Node\nmetadata: {name: x}", content_type="application/yaml")
    assert bad.status_code == 400


def test_explain_field_validation_as_kube_apiserver(client):
    pod = gpu_pod("p", template="four")
    pod["spec"]["resourceClaim"] = []  # a typo of resourceClaims
    warned = post(client, "/diagnostics/explain", pod)
    assert warned.status_code == 200
    assert warned.headers.getlist("Warning") == ['299 - "unknown field \\"spec.resourceClaim\\""']
    strict = post(client, "/diagnostics/explain?fieldValidation=Strict", pod)
    assert strict.status_code == 400
    assert strict.get_json()["error"] == 'strict decoding error: unknown field "spec.resourceClaim"'
    ignored = post(client, "/diagnostics/explain?fieldValidation=Ignore", pod)
    assert ignored.status_code == 200 and not ignored.headers.getlist("Warning")
    assert post(client, "/diagnostics/explain?fieldValidation=strict", pod).status_code == 400
    clean = post(client, "/diagnostics/explain?fieldValidation=Strict", gpu_pod("p", template="four"))
    assert clean.status_code == 200 and not clean.headers.getlist("Warning")


def test_node_and_queue_diagnostics(client):
    node = client.get("/diagnostics/nodes/on-demand-0").get_json()
    assert node["totalDevices"] == 4 and node["freeDevices"] == 4
    assert client.get("/diagnostics/nodes/ghost").status_code == 404
    post(client, "/filter", {"Pod": gpu_pod("p"), "NodeNames": NODES})
    queues = client.get("/diagnostics/queues").get_json()
    row = next(r for r in queues["clusterQueues"][0]["resources"] if r["flavor"] == "on-demand")
    assert (row["nominal"], row["usage"], row["reserved"], row["available"]) == (4, 0, 2, 2)


def test_health_readiness_metrics_openapi(client):
    assert client.get("/healthz").status_code == 200
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.get_json()["ready"] is True
    post(client, "/filter", {"Pod": gpu_pod("p"), "NodeNames": NODES})
    metrics = client.get("/metrics").get_data(as_text=True)
    assert "dra_extender_request_duration_seconds_bucket" in metrics
    assert (
        'dra_extender_quota_available{cluster_queue="team-a",flavor="on-demand",resource="example.com/gpu"} 2.0'
        in metrics
    )
    assert "dra_extender_reservations_held 1.0" in metrics
    document = yaml.safe_load(client.get("/openapi.yaml").get_data(as_text=True))
    assert {"/filter", "/prioritize", "/bind", "/diagnostics/explain"} <= set(document["paths"])


def test_openapi_document_lists_every_route(client):
    document = yaml.safe_load(client.get("/openapi.yaml").get_data(as_text=True))
    routes = {
        rule.rule.replace("<", "{").replace(">", "}")
        for rule in client.application.url_map.iter_rules()
        if rule.endpoint not in ("static", "web.static")  # the web view's stylesheet is a file, not an operation
    }
    assert routes == set(document["paths"])


def test_decision_history_is_bounded_by_node_verdicts():
    from extender.service import ExtenderConfig

    objects = [b.namespace("team-a"), b.device_class(), *nodes_in_flavor("on-demand", 4, 2), *templates("team-a")]
    engine = engine_for(objects, ExtenderConfig(diagnostics=DiagnosticsSection(history_node_verdicts=10, history=100)))
    names = sorted(engine.snapshot().nodes)
    from extender.state.core import parse_pod

    for index in range(5):
        engine.filter(parse_pod(gpu_pod(f"p{index}", queue=None)), names)
    assert len(engine.history) == 2  # 4 verdicts each, at most 10 in all
    assert engine.last_decision("team-a", "p4") is not None and engine.last_decision("team-a", "p0") is None
