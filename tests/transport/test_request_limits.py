"""Bounds on what one request may cost, liveness of the request path, and redacted 500s."""

from __future__ import annotations

import threading
import time
from typing import Any

import orjson
import pytest
import yaml

from extender.service import ExtenderConfig
from extender.service.config import DiagnosticsSection, ExplainSection
from extender.transport.app import create_app
from extender.transport.liveness import InFlight
from testkit.scenarios import gpu_pod
from tests.support.quota import one_queue_objects as quota_objects
from tests.support.scenarios import engine_for


def service_with(**diagnostics: Any) -> Any:
    return engine_for(quota_objects(), ExtenderConfig(diagnostics=DiagnosticsSection(**diagnostics)))


def test_livez_fails_when_a_scheduling_verb_is_stuck() -> None:
    in_flight = InFlight()
    client = create_app(engine_for(quota_objects()), in_flight=in_flight).test_client()
    assert client.get("/livez").status_code == 200
    token = in_flight.begin()
    in_flight._started[token] = time.monotonic() - 25  # a verb running for 25 s: past stuckRequestSeconds (20)
    response = client.get("/livez")
    assert response.status_code == 503 and "in flight for 25s" in response.get_json()["problems"][0]
    in_flight.end(token)
    assert client.get("/livez").status_code == 200


@pytest.mark.slow
def test_livez_fails_when_the_scheduling_listener_does_not_answer() -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts into the backlog, never answers: a wedged accept loop
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    try:
        client = create_app(engine_for(quota_objects()), serve_scheduling=False, self_probe=(address, False))
        started = time.monotonic()
        response = client.test_client().get("/livez")
        assert response.status_code == 503 and "did not answer /healthz within 2s" in response.get_json()["problems"][0]
        assert time.monotonic() - started < 4
    finally:
        listener.close()


def test_verbs_in_flight_are_tracked_and_released() -> None:
    in_flight = InFlight()
    client = create_app(engine_for(quota_objects()), in_flight=in_flight).test_client()
    body = orjson.dumps({"Pod": gpu_pod("p"), "NodeNames": ["on-demand-0"]})
    assert client.post("/filter", data=body, content_type="application/json").status_code == 200
    assert client.post("/filter", data=b"{", content_type="application/json").status_code == 400
    assert in_flight.oldest_seconds() == 0.0


def test_explain_bounds_nodes_and_asks_to_name_them_on_a_large_cluster() -> None:
    client = create_app(service_with(explain=ExplainSection(max_nodes=1))).test_client()
    pod = orjson.dumps(gpu_pod("p"))
    response = client.post("/diagnostics/explain", data=pod, content_type="application/json")
    assert response.status_code == 400 and "?node=NAME" in response.get_json()["error"]
    response = client.post(
        "/diagnostics/explain?node=on-demand-0&node=on-demand-1", data=pod, content_type="application/json"
    )
    assert response.status_code == 400 and "the limit is 1" in response.get_json()["error"]
    response = client.post("/diagnostics/explain?node=on-demand-0", data=pod, content_type="application/json")
    assert response.status_code == 200


def test_explain_takes_yaml_only_when_small() -> None:
    client = create_app(service_with(yaml_max_bytes=2048)).test_client()
    small = yaml.safe_dump(gpu_pod("p"))
    assert len(small) < 2048
    assert client.post("/diagnostics/explain", data=small, content_type="application/yaml").status_code == 200
    padded = gpu_pod("p")
    padded["metadata"]["annotations"] = {"pad": "x" * 4096}
    response = client.post("/diagnostics/explain", data=yaml.safe_dump(padded), content_type="application/yaml")
    assert response.status_code == 400 and "YAML is accepted only up to 2048 bytes" in response.get_json()["error"]
    as_json = client.post("/diagnostics/explain", data=orjson.dumps(padded), content_type="application/json")
    assert as_json.status_code == 200


def test_explain_body_limit_is_the_diagnostics_one() -> None:
    client = create_app(service_with(max_body_bytes=4096)).test_client()
    padded = gpu_pod("p")
    padded["metadata"]["annotations"] = {"pad": "x" * 8192}
    response = client.post("/diagnostics/explain", data=orjson.dumps(padded), content_type="application/json")
    assert response.status_code == 413 and "4096 bytes" in response.get_json()["error"]
    # the scheduling verbs keep their own (larger) limit on the same app
    body = orjson.dumps({"Pod": padded, "NodeNames": ["on-demand-0"]})
    assert client.post("/filter", data=body, content_type="application/json").status_code == 200


def test_explain_concurrency_is_bounded() -> None:
    gate = threading.BoundedSemaphore(1)
    client = create_app(engine_for(quota_objects()), explain_gate=gate).test_client()
    pod = orjson.dumps(gpu_pod("p"))
    gate.acquire()  # one explain in progress
    try:
        response = client.post("/diagnostics/explain", data=pod, content_type="application/json")
        assert response.status_code == 429
    finally:
        gate.release()
    assert client.post("/diagnostics/explain", data=pod, content_type="application/json").status_code == 200


def test_internal_errors_are_redacted_and_logged_with_a_request_id(caplog: pytest.LogCaptureFixture) -> None:
    service = engine_for(quota_objects())

    def broken(*_args: Any) -> Any:
        raise RuntimeError("token=s3cr3t in /var/run/secrets/kubernetes.io")

    service.filter = broken  # type: ignore[method-assign]
    client = create_app(service).test_client()
    body = orjson.dumps({"Pod": gpu_pod("p"), "NodeNames": ["on-demand-0"]})
    response = client.post("/filter", data=body, content_type="application/json")
    assert response.status_code == 500
    text = response.get_data(as_text=True)
    assert "s3cr3t" not in text and "RuntimeError" not in text
    request_id = response.headers["X-Request-Id"]
    assert request_id in text
    logged = [r for r in caplog.records if request_id in r.getMessage()]
    assert logged and "s3cr3t" in str(logged[0].exc_info[1])


def test_kubernetes_auth_needs_a_live_source_and_a_known_mode() -> None:
    from extender.cli import listener_settings
    from extender.service import ConfigError, parse_config

    with pytest.raises(ConfigError, match=r"diagnostics\.auth\.mode: must be none or kubernetes"):
        parse_config({"diagnostics": {"auth": {"mode": "basic"}}})
    config = parse_config({"diagnostics": {"auth": {"mode": "kubernetes"}}})
    with pytest.raises(ConfigError, match="needs a live cluster"):
        listener_settings(engine_for(quota_objects(), config), config, "127.0.0.1:1", "127.0.0.1:2", "")


def test_diagnostics_answer_only_whom_the_authorizer_allows() -> None:
    from dataclasses import dataclass

    @dataclass
    class Decision:
        allowed: bool
        status: int
        reason: str

    asked: list[tuple[str, str, str]] = []

    class Allow:
        def review(self, token: str, path: str, verb: str = "get") -> Decision:
            asked.append((token, path, verb))
            return Decision(token == "good", 401 if not token else 403, "no" if token else "token required")

    client = create_app(engine_for(quota_objects()), authorizer=Allow()).test_client()
    assert client.get("/diagnostics/queues").status_code == 401
    assert client.get("/diagnostics/queues").headers["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/diagnostics/queues", headers={"Authorization": "Bearer bad"}).status_code == 403
    assert client.get("/diagnostics/queues", headers={"Authorization": "Bearer good"}).status_code == 200
    body = orjson.dumps({"Pod": gpu_pod("p"), "NodeNames": ["on-demand-0"]})
    assert client.post("/filter", data=body, content_type="application/json").status_code == 200
    assert client.get("/metrics").status_code == 200 and client.get("/readyz").status_code == 200
    assert {path for _, path, _ in asked} == {"/diagnostics/queues"}, "only diagnostics are reviewed"
