"""Discovery, paginated lists, credentials and backoff of the live source, against the scripted API server."""

from __future__ import annotations

from pathlib import Path

import pytest
import urllib3

from extender.kube.api import ApiConfigError, ApiError, KubeApi, iter_lines, load_kubeconfig
from extender.state.live import Backoff, discover, list_objects
from testkit import builders as b
from tests.support.fake_api import DRA, DRA_PLURALS, KUEUE, KUEUE_PLURALS, FakeApiServer


def api_for(server: FakeApiServer, tmp_path: Path, token: str | None = None) -> KubeApi:
    kubeconfig = server.kubeconfig(tmp_path, token) if token else server.kubeconfig(tmp_path)
    return KubeApi(load_kubeconfig(kubeconfig))


@pytest.mark.parametrize(
    ("dra_versions", "kueue_versions", "expected_dra", "expected_kueue"),
    [
        (("v1", "v1beta2", "v1beta1"), ("v1beta2", "v1beta1"), "v1", "v1beta2"),
        (("v1beta1", "v1beta2"), ("v1beta1",), "v1beta2", "v1beta1"),
        (("v1beta1",), ("v1beta1", "v1alpha1"), "v1beta1", "v1beta1"),
    ],
)
def test_discovery_prefers_the_newest_version_we_understand(
    tmp_path: Path,
    dra_versions: tuple[str, ...],
    kueue_versions: tuple[str, ...],
    expected_dra: str,
    expected_kueue: str,
) -> None:
    groups = {DRA: dict.fromkeys(dra_versions, DRA_PLURALS), KUEUE: dict.fromkeys(kueue_versions, KUEUE_PLURALS)}
    server = FakeApiServer(groups=groups).start()
    try:
        discovery = discover(api_for(server, tmp_path), kueue_configmap=("kq", "cfg"))
    finally:
        server.close()
    assert discovery.kueue_available and discovery.dra_available
    # optional, feature-gated APIs the fake does not serve
    assert set(discovery.missing) <= {"DeviceTaintRule", "PodGroup", "CompositePodGroup", "SchedulingWorkload"}
    assert {r.version for r in discovery.resources.values() if r.info.group == DRA} == {expected_dra}
    assert {r.version for r in discovery.resources.values() if r.info.group == KUEUE} == {expected_kueue}
    configmap = discovery.resources["ConfigMap"]
    assert configmap.path == "/api/v1/namespaces/kq/configmaps"
    assert configmap.query() == {"fieldSelector": "metadata.name=cfg"}
    assert discovery.resources["ResourceClaim"].path == f"/apis/{DRA}/{expected_dra}/resourceclaims"


def test_discovery_reports_what_is_missing(tmp_path: Path) -> None:
    server = FakeApiServer(groups={KUEUE: {"v1beta2": ("clusterqueues", "workloads")}}).start()
    try:
        discovery = discover(api_for(server, tmp_path))
    finally:
        server.close()
    assert not discovery.dra_available
    assert discovery.kueue_available
    assert "API group resource.k8s.io is not served" in discovery.missing["ResourceSlice"]
    assert "cohorts.kueue.x-k8s.io is not served" in discovery.missing["Cohort"]
    assert set(discovery.resources) == {"Node", "Namespace", "Pod", "ConfigMap", "ClusterQueue", "Workload"}


def test_a_kind_at_no_version_we_understand_names_the_versions_its_own_group_serves(tmp_path: Path) -> None:
    """The message lists the versions of the kind's API group, not those of whichever group was read last."""
    groups = {KUEUE: {"v1beta2": ("clusterqueues",), "v9": KUEUE_PLURALS}, DRA: {"v1": DRA_PLURALS}}  # DRA read last
    server = FakeApiServer(groups=groups).start()
    try:
        discovery = discover(api_for(server, tmp_path))
    finally:
        server.close()
    assert discovery.missing["Workload"].endswith("the server serves v1beta2, v9"), discovery.missing["Workload"]


def test_paginated_list_and_expired_continue_token(fake_api: FakeApiServer, tmp_path: Path) -> None:
    fake_api.put_all(*(b.node(f"n{i}") for i in range(7)))
    api = api_for(fake_api, tmp_path)
    resource = discover(api).resources["Node"]
    items, rv = list_objects(api, resource, page_size=3)
    assert [i["metadata"]["name"] for i in items] == [f"n{i}" for i in range(7)]
    assert all(i["apiVersion"] == "v1" and i["kind"] == "Node" for i in items)
    assert rv == str(fake_api.rv)
    assert [q.get("continue") for q in fake_api.list_queries("nodes")] == [None, "3", "6"]
    fake_api.continue_expired = True
    items, _ = list_objects(api, resource, page_size=3)
    assert len(items) == 7
    assert "limit" not in fake_api.list_queries("nodes")[-1]


def test_api_errors_carry_the_servers_message(fake_api: FakeApiServer, tmp_path: Path) -> None:
    api = api_for(fake_api, tmp_path, token="wrong")
    with pytest.raises(ApiError) as error:
        discover(api)
    assert error.value.status == 401
    assert "HTTP 401 Unauthorized" in str(error.value)
    with pytest.raises(ApiError, match="could not find the requested resource"):
        api_for(fake_api, tmp_path).get_json("/apis/nothing.example.com/v1/things")


def test_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ApiConfigError, match="cannot use kubeconfig"):
        load_kubeconfig(tmp_path / "absent")


def test_backoff_grows_with_jitter_up_to_the_cap_and_resets() -> None:
    high = Backoff(0.5, 30.0, rng=lambda: 1.0)
    assert [high.next() for _ in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    low = Backoff(0.5, 30.0, rng=lambda: 0.0)
    assert [low.next() for _ in range(3)] == [0.25, 0.5, 1.0]
    high.reset()
    assert high.next() == 0.5
    jittered = Backoff(0.5, 30.0)
    assert all(0.25 <= jittered.next() <= 30.0 for _ in range(40))


class _Chunks:
    """A response whose read1 yields fixed chunks, to check frame reassembly without a socket."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = iter([*chunks, b""])

    def read1(self, amount: int) -> bytes:
        return next(self._chunks)


@pytest.mark.parametrize("cut", range(1, 12))
def test_frames_split_anywhere_are_reassembled(cut: int) -> None:
    stream = b'{"a":1}\n\n{"b":2}\n{"c":3}'
    chunks = [stream[i : i + cut] for i in range(0, len(stream), cut)]
    lines = list(iter_lines(_Chunks(chunks)))  # type: ignore[arg-type]
    assert lines == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


def test_requests_go_through_the_clients_pool_with_its_credentials(fake_api: FakeApiServer, tmp_path: Path) -> None:
    api = api_for(fake_api, tmp_path)
    response = api.request("GET", "/apis")
    assert isinstance(response, urllib3.BaseHTTPResponse)
    assert response.data  # read before release, or the pooled connection still holds this body
    response.release_conn()
    assert api.get_json("/apis")["kind"] == "APIGroupList"  # the fake answers 401 without the kubeconfig's token
    assert len(fake_api.requests) == 2


def test_connections_use_tcp_keepalive_unless_configured_otherwise(fake_api: FakeApiServer, tmp_path: Path) -> None:
    """Dead peers of quiet watches are found by the transport, within about the stale grace."""
    import socket

    config = load_kubeconfig(fake_api.kubeconfig(tmp_path))
    KubeApi(config)
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in config.socket_options
    assert (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1) in config.socket_options
    custom = load_kubeconfig(fake_api.kubeconfig(tmp_path))
    custom.socket_options = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    KubeApi(custom)
    assert custom.socket_options == [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
