"""What an attacker inside the cluster may try against the extender, and what it gets: one auth rule for everything
people read (the web view and the what-if form included), no YAML bombs, no cross-site posts or rebound Host
names, bounded diagnostics that never take the verbs' threads, verbs only kube-scheduler can call (listeners on
loopback or pinned client certificates, told apart by address), a /bind only after the extender's own filter,
and the reviewer's audiences and caches."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.kube import strict_objects
from extender.service import ConfigError, ExtenderConfig, parse_config
from extender.service.config import DiagnosticsSection, ExplainSection
from extender.state.core import parse_pod
from extender.transport import access_review
from extender.transport.app import create_app
from extender.transport.diagnostics_auth import TOKEN_COOKIE, host_refusal
from extender.transport.server import is_loopback
from testkit.control_plane import free_port
from testkit.scenarios import gpu_pod
from tests.support.fake_api import TOKEN, FakeApiServer
from tests.support.paths import ROOT
from tests.support.quota import one_queue_objects as quota_objects
from tests.support.scenarios import engine_for

NODES = ["on-demand-0", "on-demand-1"]
GOOD = "reader-token"


@dataclass
class Decision:
    allowed: bool
    status: int
    reason: str


class FakeAuthorizer:
    """Allows GOOD for every path and verb; no token is 401, any other 403."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []

    def review(self, token: str, path: str, verb: str = "get") -> Decision:
        self.asked.append((token, path, verb))
        if not token:
            return Decision(False, 401, "a bearer token is required")
        return Decision(token == GOOD, 403, "no RBAC rule allows it")


def pod_json(name: str = "whatif") -> bytes:
    return orjson.dumps(gpu_pod(name, template="two"))


def client_with(config: ExtenderConfig | None = None, authorizer: Any = None) -> Any:
    service = engine_for(quota_objects(), config)
    return create_app(service, authorizer=authorizer).test_client()


BEARER = {"Authorization": f"Bearer {GOOD}"}
PEOPLE_REQUESTS = [
    ("GET", "/ui/"),
    ("GET", "/ui/pods"),
    ("GET", "/ui/pods/team-a/x"),
    ("GET", "/ui/nodes"),
    ("GET", "/ui/nodes/on-demand-0"),
    ("GET", "/ui/queues"),
    ("GET", "/ui/explain"),
    ("GET", "/ui/static/style.css"),
    ("GET", "/ui/podgroups/team-a/x"),
    ("GET", "/diagnostics/queues"),
    ("GET", "/diagnostics/nodes/on-demand-0"),
    ("GET", "/diagnostics/podgroups/team-a/x"),
    ("GET", "/not-a-route"),
    ("OPTIONS", "/diagnostics/queues"),
    ("POST", "/healthz"),  # a probe's path with another method is no probe
]


# --- one auth rule ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), PEOPLE_REQUESTS)
def test_everything_people_read_needs_a_token(method: str, path: str) -> None:
    authorizer = FakeAuthorizer()
    client = client_with(authorizer=authorizer)
    assert client.open(path, method=method).status_code == 401
    assert client.open(path, method=method, headers={"Authorization": "Bearer nope"}).status_code == 403
    assert client.open(path, method=method, headers={"Authorization": "Basic dXNlcjpwYXNz"}).status_code == 401
    allowed = client.open(path, method=method, headers=BEARER)
    assert allowed.status_code not in (401, 403), (method, path, allowed.status_code)
    assert allowed.headers["X-Content-Type-Options"] == "nosniff" and allowed.headers["Cache-Control"] == "no-store"
    assert (GOOD, path, method.lower()) in authorizer.asked


def test_the_what_if_form_and_explain_need_a_token_and_post_rights() -> None:
    authorizer = FakeAuthorizer()
    client = client_with(authorizer=authorizer)
    form = {"pod": pod_json().decode(), "nodes": ""}
    assert client.post("/ui/explain", data=form).status_code == 401
    assert client.post("/diagnostics/explain", data=pod_json(), content_type="application/json").status_code == 401
    answer = client.post("/ui/explain", data=form, headers=BEARER)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert (GOOD, "/ui/explain", "post") in authorizer.asked


def test_only_probes_metrics_the_api_document_and_the_verbs_are_open() -> None:
    authorizer = FakeAuthorizer()
    client = client_with(authorizer=authorizer)
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.yaml", "/openapi.json"):
        assert client.get(path).status_code == 200, path
    body = orjson.dumps({"Pod": gpu_pod("p"), "NodeNames": NODES})
    assert client.post("/filter", data=body, content_type="application/json").status_code == 200
    assert authorizer.asked == [], "nothing open is reviewed"


@pytest.mark.parametrize(
    "path",
    [
        "/ui/../diagnostics/queues",
        "/metrics/../ui/pods",
        "/healthz/../diagnostics/queues",
        "//diagnostics/queues",
        "/diagnostics//queues",
        "/%2e%2e/diagnostics/queues",
        "/metrics/",
        "/ui",
        "/DIAGNOSTICS/queues",
    ],
)
def test_path_tricks_do_not_reach_people_data_without_a_token(path: str) -> None:
    client = client_with(authorizer=FakeAuthorizer())
    answer = client.get("/", environ_overrides={"PATH_INFO": path, "RAW_URI": path, "REQUEST_URI": path})
    assert answer.status_code == 401, (path, answer.status_code)


def test_a_browser_signs_in_with_a_token_kept_in_a_strict_cookie() -> None:
    client = client_with(authorizer=FakeAuthorizer())
    page = client.get("/ui/queues", headers={"Accept": "text/html"})
    assert page.status_code == 401 and page.mimetype == "text/html"
    text = page.get_data(as_text=True)
    assert 'action="/ui/login"' in text and 'name="token"' in text and 'value="/ui/queues"' in text
    assert "script-src" not in page.headers["Content-Security-Policy"]
    signed = client.post("/ui/login", data={"token": GOOD, "next": "/ui/queues"})
    assert signed.status_code == 303 and signed.headers["Location"].endswith("/ui/queues")
    cookie = signed.headers["Set-Cookie"]
    assert cookie.startswith(f"{TOKEN_COOKIE}={GOOD};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert client.get("/ui/queues").status_code == 200  # the cookie is sent back
    assert client.get("/diagnostics/queues").status_code == 200
    assert client.get("/ui/queues", headers={"Authorization": "Basic eDp5"}).status_code == 401, "no fallback"
    # no open redirect: only pages of the web view
    for target in ("https://evil.example/", "//evil.example/ui", "/diagnostics/queues"):
        away = client.post("/ui/login", data={"token": GOOD, "next": target})
        assert away.headers["Location"].endswith("/ui/pods"), target
    out = client.post("/ui/logout")
    assert out.status_code == 303 and f"{TOKEN_COOKIE}=;" in out.headers["Set-Cookie"]
    assert client.get("/ui/queues").status_code == 401


# --- cross-site posts and Host ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://localhost:9999"},  # another port is another origin
        {"Referer": "https://evil.example/page"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": "http://localhost"},
    ],
)
@pytest.mark.parametrize("auth", [False, True])
def test_cross_site_posts_are_refused(headers: dict[str, str], auth: bool) -> None:
    client = client_with(authorizer=FakeAuthorizer() if auth else None)
    sent = {**headers, **(BEARER if auth else {})}
    form = {"pod": pod_json().decode(), "nodes": ""}
    assert client.post("/ui/explain", data=form, headers=sent).status_code == 403
    # a form post of text/plain that would parse as YAML
    plain = client.post("/diagnostics/explain", data=pod_json(), content_type="text/plain", headers=sent)
    assert plain.status_code == 403
    assert client.post("/ui/login", data={"token": "attacker's"}, headers=sent).status_code == 403


def test_same_origin_and_non_browser_posts_are_served() -> None:
    client = client_with()
    form = {"pod": pod_json().decode(), "nodes": ""}
    same = {"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin", "Referer": "http://localhost/ui/explain"}
    assert client.post("/ui/explain", data=form, headers=same).status_code == 200
    assert client.post("/ui/explain", data=form).status_code == 200  # curl, the kubectl plugin: no Origin
    port_forward = {"Origin": "http://127.0.0.1:9091"}
    served = client.post("/ui/explain", data=form, headers=port_forward, base_url="http://127.0.0.1:9091")
    assert served.status_code == 200


def test_a_host_name_not_listed_is_refused_on_diagnostics_only() -> None:
    client = client_with(ExtenderConfig(diagnostics=DiagnosticsSection(allowed_hosts=("dra.example.com", ".corp"))))
    for host in ("evil.example", "rebind.attacker.test:9091", "localhost.evil.example"):
        assert client.get("/ui/pods", headers={"Host": host}).status_code == 400, host
        assert client.get("/diagnostics/queues", headers={"Host": host}).status_code == 400, host
        assert client.get("/metrics", headers={"Host": host}).status_code == 200, "scrapes are not people's"
        assert client.get("/readyz", headers={"Host": host}).status_code == 200
    for host in ("localhost:9091", "127.0.0.1:9091", "[::1]:9091", "10.1.2.3", "dra.example.com", "x.corp:80"):
        assert client.get("/ui/pods", headers={"Host": host}).status_code == 200, host
    assert host_refusal("", ()) is not None
    # the metrics listener (the pod IP, reached by name through the API server's service proxy) serves nothing to
    # rebind to: the kubectl plugin still learns there that diagnostics are elsewhere
    metrics = create_app(
        engine_for(quota_objects()), serve_scheduling=False, serve_diagnostics=False, serve_metrics=True
    ).test_client()
    elsewhere = metrics.get("/diagnostics/queues", headers={"Host": "dra-quota-scheduler-metrics.kube-system.svc"})
    assert elsewhere.status_code == 404 and elsewhere.get_json()["reason"]


# --- bounded work -----------------------------------------------------------------------------------------------


def alias_bomb(width: int = 600) -> str:
    """A 5 KB Pod whose containers are `width` aliases of one container whose env is `width` aliases of one
    variable: 360,000 env entries once expanded, which the strict field walk alone took 9.4 s to visit."""
    return (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bomb, namespace: team-a}\n"
        "x-env: &e {name: A, valueFrom: {configMapKeyRef: {name: c, key: k}}}\n"
        f"x-list: &l [{', '.join(['*e'] * width)}]\n"
        "x-c: &c {name: c, image: i, env: *l}\n"
        f"spec:\n  containers: [{', '.join(['*c'] * width)}]\n"
    )


def test_an_alias_bomb_is_refused_within_a_wall_clock_budget() -> None:
    bomb = alias_bomb()
    assert len(bomb) < 5100
    client = client_with()
    started = time.perf_counter()
    api = client.post("/diagnostics/explain", data=bomb, content_type="application/yaml")
    form = client.post("/ui/explain", data={"pod": bomb, "nodes": ""})
    sniffed = client.post("/diagnostics/explain", data=bomb, content_type="text/plain")  # not labelled YAML
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5, f"three alias bombs took {elapsed:.2f} s"
    assert api.status_code == 400 and "alias *e refused" in api.get_json()["error"]
    assert sniffed.status_code == 400 and "alias" in sniffed.get_json()["error"]
    assert form.status_code == 400 and "alias *e refused" in form.get_data(as_text=True)
    with pytest.raises(strict_objects.ManifestError, match="alias"):
        strict_objects.first_pod(bomb)
    # anchors without aliases are plain YAML
    assert strict_objects.load_data("a: &x 1\nb: 2\n") == {"a": 1, "b": 2}


def test_alias_bombs_do_not_hold_filter_back() -> None:
    """Posted at once with filters (the 3-thread case that made /filter time out), bombs cost milliseconds."""
    service = engine_for(quota_objects())
    app = create_app(service)
    bomb = alias_bomb()
    body = orjson.dumps({"Pod": gpu_pod("p"), "NodeNames": NODES})
    slowest: list[float] = []

    def post_bomb() -> None:
        app.test_client().post("/diagnostics/explain", data=bomb, content_type="application/yaml")

    bombers = [threading.Thread(target=post_bomb) for _ in range(3)]
    for thread in bombers:
        thread.start()
    for _ in range(5):
        started = time.perf_counter()
        assert app.test_client().post("/filter", data=body, content_type="application/json").status_code == 200
        slowest.append(time.perf_counter() - started)
    for thread in bombers:
        thread.join(5)
        assert not thread.is_alive()
    assert max(slowest) < 1.0, slowest


def test_the_what_if_form_has_the_limits_of_post_diagnostics_explain() -> None:
    config = ExtenderConfig(
        diagnostics=DiagnosticsSection(yaml_max_bytes=2048, explain=ExplainSection(max_nodes=1, concurrency=1))
    )
    service = engine_for(quota_objects(), config)
    app = create_app(service)
    client = app.test_client()
    pod = gpu_pod("w", template="two")
    # more nodes than maxNodes in the cluster, none named: refused, not an explain of every node
    every = client.post("/ui/explain", data={"pod": orjson.dumps(pod).decode(), "nodes": ""})
    assert every.status_code == 400 and "diagnostics.explain.maxNodes" in every.get_data(as_text=True)
    named = client.post("/ui/explain", data={"pod": orjson.dumps(pod).decode(), "nodes": "on-demand-0 on-demand-1"})
    assert named.status_code == 400 and "the limit is 1" in named.get_data(as_text=True)
    one = client.post("/ui/explain", data={"pod": orjson.dumps(pod).decode(), "nodes": "on-demand-0"})
    assert one.status_code == 200
    # YAML only up to yamlMaxBytes; JSON beyond
    padded = {**pod, "metadata": {**pod["metadata"], "annotations": {"pad": "x" * 3000}}}
    as_yaml = "\n".join(f"{key}: {json.dumps(value)}" for key, value in padded.items())
    big_yaml = client.post("/ui/explain", data={"pod": as_yaml, "nodes": "on-demand-0"})
    assert big_yaml.status_code == 400 and "YAML is accepted only up to 2048 bytes" in big_yaml.get_data(as_text=True)
    big_json = client.post("/ui/explain", data={"pod": orjson.dumps(padded).decode(), "nodes": "on-demand-0"})
    assert big_json.status_code == 200
    # the explain gate: taken by another explain, the form answers 429
    gate = app.extensions["dra_explain_gate"]
    assert gate.acquire(blocking=False)
    try:
        busy = client.post("/ui/explain", data={"pod": orjson.dumps(pod).decode(), "nodes": "on-demand-0"})
        assert busy.status_code == 429 and "Too many what-ifs" in busy.get_data(as_text=True)
    finally:
        gate.release()


def test_diagnostics_can_never_take_the_verbs_threads() -> None:
    config = ExtenderConfig(diagnostics=DiagnosticsSection(concurrency=2))
    app = create_app(engine_for(quota_objects(), config))
    client = app.test_client()
    gate = app.extensions["dra_people_gate"]
    held = [gate.acquire(blocking=False), gate.acquire(blocking=False)]
    assert held == [True, True] and not gate.acquire(blocking=False)
    try:
        for path in ("/ui/pods", "/diagnostics/queues", "/ui/queues"):
            busy = client.get(path)
            assert busy.status_code == 429 and busy.headers["Retry-After"] == "1", path
        body = orjson.dumps({"Pod": gpu_pod("p"), "NodeNames": NODES})
        assert client.post("/filter", data=body, content_type="application/json").status_code == 200
        assert client.get("/metrics").status_code == 200 and client.get("/readyz").status_code == 200
    finally:
        gate.release()
        gate.release()
    assert client.get("/ui/pods").status_code == 200
    assert gate.acquire(blocking=False) and gate.acquire(blocking=False), "every request gave its slot back"


# --- /bind ------------------------------------------------------------------------------------------------------


def bind_args(pod: dict[str, Any], node: str, uid: str | None = None) -> bytes:
    metadata = pod["metadata"]
    return orjson.dumps(
        {
            "PodName": metadata["name"],
            "PodNamespace": metadata["namespace"],
            "PodUID": uid or metadata["uid"],
            "Node": node,
        }
    )


def ours(name: str, scheduler: str = "dra-quota-scheduler") -> dict[str, Any]:
    pod = gpu_pod(name, template="two")
    pod["spec"]["schedulerName"] = scheduler
    return pod


def test_a_forged_bind_is_refused() -> None:
    real = ours("real")
    other = ours("other", scheduler="default-scheduler")
    service = engine_for([*quota_objects(), real, other], parse_config({"bind": {"enabled": True}}))
    bound: list[tuple[str, ...]] = []
    service.binder = lambda *args: bound.append(args)
    client = create_app(service).test_client()

    def bind(pod: dict[str, Any], node: str, uid: str | None = None) -> str:
        answer = client.post("/bind", data=bind_args(pod, node, uid), content_type="application/json")
        assert answer.status_code == 200
        return str(answer.get_json()["Error"])

    # a pod the extender never filtered: made up, or real
    made_up = ours("made-up")
    assert "has not filtered pod team-a/made-up" in bind(made_up, "on-demand-0")
    assert "has not filtered pod team-a/real" in bind(real, "on-demand-0")
    # filtered on one node only: bind elsewhere is refused, and the filter's reservation stays
    filtered = client.post(
        "/filter", data=orjson.dumps({"Pod": real, "NodeNames": ["on-demand-0"]}), content_type="application/json"
    )
    assert filtered.get_json()["NodeNames"] == ["on-demand-0"]
    uid = real["metadata"]["uid"]
    assert "did not pass pod team-a/real on node on-demand-1" in bind(real, "on-demand-1")
    assert "has not filtered" in bind(real, "on-demand-0", uid="forged-uid")
    assert service.reservations.get(uid) is not None, "a refused bind lets nothing go"
    assert bound == []
    # a pod of a scheduler the extender does not bind for, even once filtered
    client.post("/filter", data=orjson.dumps({"Pod": other, "NodeNames": NODES}), content_type="application/json")
    assert "names scheduler 'default-scheduler'" in bind(other, "on-demand-0")
    # the real thing
    assert bind(real, "on-demand-0") == ""
    assert bound == [("team-a", "real", uid, "on-demand-0")]
    assert service.reservations.get(uid).node == "on-demand-0"


def test_bind_proofs_expire_and_stay_bounded() -> None:
    from extender.service.bind_proofs import BindProofs

    now = [0.0]
    proofs = BindProofs(max_pods=2, max_verdicts=10, max_age_seconds=60, clock=lambda: now[0])
    service = engine_for(quota_objects())
    decision = service.filter(parse_pod(ours("a")), NODES)
    names = ("dra-quota-scheduler",)
    proofs.remember("a", "team-a/a", "dra-quota-scheduler", decision)
    assert proofs.refusal("a", "team-a/a", "on-demand-0", names) == ""
    assert "not team-a/b" in proofs.refusal("a", "team-a/b", "on-demand-0", names)
    now[0] = 61
    assert "has not filtered" in proofs.refusal("a", "team-a/a", "on-demand-0", names)
    for name in "bcd":
        proofs.remember(name, f"team-a/{name}", "dra-quota-scheduler", decision)
    assert len(proofs) == 2  # the oldest went first


# --- verbs only kube-scheduler can call ---------------------------------------------------------------------------


def test_loopback_is_told_by_every_address_a_name_resolves_to() -> None:
    assert is_loopback("127.0.0.1:8888") and is_loopback("127.0.0.2:1") and is_loopback("[::1]:8888")
    assert is_loopback("localhost:8888")
    assert not is_loopback("0.0.0.0:8888") and not is_loopback(":8888") and not is_loopback("10.0.0.1:8888")
    assert not is_loopback("[::]:8888")


def test_serve_refuses_verbs_or_diagnostics_others_can_reach(tmp_path: Path) -> None:
    from extender.cli import check_exposure

    for name in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / name).write_text("-")
    tls = {"certFile": str(tmp_path / "tls.crt"), "keyFile": str(tmp_path / "tls.key")}
    with pytest.raises(ConfigError, match=r"--listen 0\.0\.0\.0:8888 is not a loopback address"):
        check_exposure(ExtenderConfig(), "0.0.0.0:8888", "127.0.0.1:9091")
    unpinned = parse_config({"tls": {**tls, "clientCAFile": str(tmp_path / "ca.crt")}})
    with pytest.raises(ConfigError, match="pinned to kube-scheduler"):
        check_exposure(unpinned, "0.0.0.0:8888", "127.0.0.1:9091")
    with pytest.raises(ConfigError, match=r"tls\.clientNames needs tls\.clientCAFile"):
        parse_config({"tls": {**tls, "clientNames": ["system:kube-scheduler"]}})
    pinned = parse_config(
        {"tls": {**tls, "clientCAFile": str(tmp_path / "ca.crt"), "clientNames": ["system:kube-scheduler"]}}
    )
    check_exposure(pinned, "0.0.0.0:8888", "127.0.0.1:9091")
    with pytest.raises(ConfigError, match=r"diagnostics on 0\.0\.0\.0:9091 are not on loopback"):
        check_exposure(ExtenderConfig(), "127.0.0.1:8888", "0.0.0.0:9091")
    with pytest.raises(ConfigError, match=r"diagnostics on 0\.0\.0\.0:8888"):  # one listener serving everything
        check_exposure(pinned, "0.0.0.0:8888", "")
    check_exposure(parse_config({"diagnostics": {"auth": {"mode": "kubernetes"}}}), "127.0.0.1:8888", "0.0.0.0:9091")
    check_exposure(ExtenderConfig(), "127.0.0.1:8888", "")


def test_the_images_default_command_keeps_verbs_and_diagnostics_on_loopback() -> None:
    from extender.cli import check_exposure

    (line,) = [line for line in (ROOT / "Containerfile").read_text().splitlines() if line.startswith("CMD ")]
    args = json.loads(line[4:])
    flags = dict(zip(args[::2], args[1::2], strict=True))
    assert is_loopback(flags["--listen"]) and is_loopback(flags["--diagnostics-listen"])
    assert flags["--metrics-listen"] == "0.0.0.0:9090"
    check_exposure(ExtenderConfig(), flags["--listen"], flags["--diagnostics-listen"])
    assert re.search(r"^EXPOSE 9090$", (ROOT / "Containerfile").read_text(), re.MULTILINE)


# --- the reviewer -------------------------------------------------------------------------------------------------


def reviewer_for(fake_api: FakeApiServer, tmp_path: Path, **kwargs: Any) -> access_review.AccessReviewer:
    from extender.kube.api import load_kubeconfig

    return access_review.AccessReviewer(load_kubeconfig(str(fake_api.kubeconfig(tmp_path, TOKEN))), **kwargs)


def test_token_reviews_ask_for_the_configured_audiences(fake_api: FakeApiServer, tmp_path: Path) -> None:
    fake_api.review_tokens = {
        "for-us": ("system:serviceaccount:ops:reader", ("dra-extender",)),
        "for-the-api": ("system:serviceaccount:ops:reader", ("https://kubernetes.default.svc",)),
    }
    fake_api.review_grants = {("system:serviceaccount:ops:reader", "get", "/ui/*")}
    reviewer = reviewer_for(fake_api, tmp_path, audiences=("dra-extender",))
    assert reviewer.review("for-us", "/ui/pods").allowed
    assert fake_api.reviews[0]["spec"]["audiences"] == ["dra-extender"]
    refused = reviewer.review("for-the-api", "/ui/pods")
    assert not refused.allowed and refused.status == 401
    anyone = reviewer_for(fake_api, tmp_path)  # no audiences: the API server's own
    assert anyone.review("for-the-api", "/ui/pods").allowed
    assert "audiences" not in fake_api.reviews[-2]["spec"]


def test_made_up_tokens_do_not_evict_the_allowed_ones(
    fake_api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(access_review, "MAX_CACHED", 8)
    fake_api.review_tokens = {GOOD: ("alice", ("https://kubernetes.default.svc",))}
    fake_api.review_grants = {("alice", "get", "/diagnostics/*")}
    reviewer = reviewer_for(fake_api, tmp_path)
    assert reviewer.review(GOOD, "/diagnostics/queues").allowed
    before = reviewer.reviews
    for index in range(50):
        assert not reviewer.review(f"made-up-{index}", "/diagnostics/queues").allowed
    assert reviewer.reviews == before + 50
    assert reviewer.review(GOOD, "/diagnostics/queues").allowed
    assert reviewer.reviews == before + 50, "the allowed answer stayed cached through the flood"


# --- a served extender with auth on (a real `dra-extender serve` against a fake API server) ---------------------


BIN = Path(sys.executable).parent / "dra-extender"


def http(
    url: str, *, method: str = "GET", body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read(), dict(error.headers)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Verbs on 127.0.0.1:PORT, diagnostics with auth on 127.0.0.2:PORT (the same port on another address)."""
    from tests.support.fake_api import small_cluster

    workdir = tmp_path_factory.mktemp("served")
    api = FakeApiServer().start()
    api.put_all(*small_cluster())
    api.review_tokens = {GOOD: ("system:serviceaccount:ops:reader", ("https://kubernetes.default.svc",))}
    api.review_grants = {
        ("system:serviceaccount:ops:reader", verb, path)
        for verb in ("get", "post")
        for path in ("/ui", "/ui/*", "/diagnostics/*")
    }
    config = workdir / "extender.yaml"
    config.write_text(orjson.dumps({"diagnostics": {"auth": {"mode": "kubernetes"}}}).decode())
    port = free_port()
    log = workdir / "serve.log"
    process = subprocess.Popen(
        [
            str(BIN),
            "serve",
            "--kubeconfig",
            str(api.kubeconfig(workdir)),
            "--config",
            str(config),
            "--listen",
            f"127.0.0.1:{port}",
            "--diagnostics-listen",
            f"127.0.0.2:{port}",
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(workdir)},
    )
    urls = {"verbs": f"http://127.0.0.1:{port}", "people": f"http://127.0.0.2:{port}", "api": api}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if http(f"{urls['people']}/readyz")[0] == 200:
                    break
            except OSError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield urls
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
        api.close()


@pytest.mark.slow
def test_served_web_view_and_what_if_answer_only_a_reviewed_token(served: dict[str, Any]) -> None:
    people = served["people"]
    form = urllib.parse.urlencode({"pod": pod_json().decode(), "nodes": ""}).encode()
    form_type = {"Content-Type": "application/x-www-form-urlencoded"}
    for path in ("/ui/queues", "/ui/pods", "/ui/nodes", "/diagnostics/queues", "/ui/static/style.css", "/nope"):
        assert http(people + path)[0] == 401, path
        assert http(people + path, headers={"Authorization": "Bearer forged"})[0] == 401, path
    assert http(people + "/ui/explain", method="POST", body=form, headers=form_type)[0] == 401
    for path in ("/metrics", "/healthz", "/readyz"):
        assert http(people + path)[0] == 200, path
    bearer = {"Authorization": f"Bearer {GOOD}"}
    for path in ("/ui/queues", "/ui/pods", "/ui/nodes", "/diagnostics/queues"):
        assert http(people + path, headers=bearer)[0] == 200, path
    status, page, _ = http(people + "/ui/explain", method="POST", body=form, headers={**form_type, **bearer})
    assert status == 200, page
    evil = {**form_type, **bearer, "Origin": "https://evil.example"}
    assert http(people + "/ui/explain", method="POST", body=form, headers=evil)[0] == 403
    assert http(people + "/ui/pods", headers={**bearer, "Host": "evil.example"})[0] == 400
    reviews = served["api"].reviews
    assert any(r["kind"] == "SubjectAccessReview" and r["spec"]["nonResourceAttributes"]["path"] == "/ui/explain"
               and r["spec"]["nonResourceAttributes"]["verb"] == "post" for r in reviews)  # fmt: skip
    # a browser: the login form, then the cookie
    status, page, _ = http(people + "/ui/pods", headers={"Accept": "text/html"})
    assert status == 401 and b'name="token"' in page
    login = urllib.parse.urlencode({"token": GOOD, "next": "/ui/nodes"}).encode()
    status, _, headers = http(people + "/ui/login", method="POST", body=login, headers=form_type)
    assert status == 303 and headers["Location"].endswith("/ui/nodes")
    cookie = headers["Set-Cookie"].split(";")[0]
    assert http(people + "/ui/nodes", headers={"Cookie": cookie})[0] == 200


@pytest.mark.slow
def test_served_listeners_are_told_apart_by_address_not_port(served: dict[str, Any]) -> None:
    body = orjson.dumps({"Pod": gpu_pod("p"), "NodeNames": ["n1"]})
    json_type = {"Content-Type": "application/json"}
    assert http(served["verbs"] + "/filter", method="POST", body=body, headers=json_type)[0] == 200
    bearer = {"Authorization": f"Bearer {GOOD}"}
    # the verbs never ask for a token: on the other address /filter is a path people ask for, denied by default
    assert http(served["people"] + "/filter", method="POST", body=body, headers=json_type)[0] == 401
    assert http(served["people"] + "/filter", method="POST", body=body, headers={**json_type, **bearer})[0] == 403
    assert http(served["verbs"] + "/diagnostics/queues", headers={"Authorization": f"Bearer {GOOD}"})[0] == 404
    assert http(served["verbs"] + "/ui/pods")[0] == 404


@pytest.mark.slow
def test_serve_will_not_put_the_verbs_on_every_address(tmp_path: Path) -> None:
    port = free_port()
    done = subprocess.run(
        [str(BIN), "serve", "--listen", f"0.0.0.0:{port}"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0
    assert f"--listen 0.0.0.0:{port} is not a loopback address" in done.stderr
