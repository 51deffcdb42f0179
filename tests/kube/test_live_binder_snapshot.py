"""The bind verb's Binding POST and `dra-extender snapshot`'s writer, against the scripted API server."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
import yaml

from extender.kube.api import load_kubeconfig
from extender.kube.binder import Binder, BindingError
from extender.state.live import LiveSource, write_snapshot, write_snapshot_from_kubeconfig
from extender.state.snapshot_file import load_snapshot_text
from testkit import builders as b
from tests.support.fake_api import DRA, DRA_PLURALS, FakeApiServer, fresh_store, small_cluster, state_of


def test_binding_is_posted_with_the_pods_uid(fake_api: FakeApiServer, tmp_path: Path) -> None:
    binder = Binder(load_kubeconfig(fake_api.kubeconfig(tmp_path)))
    binder.create_binding("team-a", "runner", "uid-1", "n1")
    assert fake_api.bindings == [
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "runner", "namespace": "team-a", "uid": "uid-1"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
        }
    ]
    assert fake_api.requests[-1][:2] == ("POST", "/api/v1/namespaces/team-a/pods/runner/binding")


def test_refused_binding_raises_with_the_api_message(fake_api: FakeApiServer, tmp_path: Path) -> None:
    fake_api.binding_failures[("team-a", "runner")] = (409, "Conflict", 'pod runner is already assigned to node "n2"')
    binder = Binder(load_kubeconfig(fake_api.kubeconfig(tmp_path)))
    with pytest.raises(BindingError) as error:
        binder.create_binding("team-a", "runner", "uid-1", "n1")
    assert error.value.status == 409
    assert str(error.value) == (
        'binding pod team-a/runner to node n1 failed: HTTP 409 Conflict: pod runner is already assigned to node "n2"'
    )


def test_unreachable_api_server_binding_error(tmp_path: Path) -> None:
    server = FakeApiServer().start()
    config = load_kubeconfig(server.kubeconfig(tmp_path))
    server.close()
    with pytest.raises(BindingError, match="cannot reach the API server") as error:
        Binder(config, timeout_seconds=1.0).create_binding("ns", "p", "", "n1")
    assert error.value.status == 0


def test_snapshot_loads_back_into_the_same_state(
    fake_api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    objects = small_cluster()
    objects[1]["metadata"]["managedFields"] = [{"manager": "kubelet", "operation": "Update"}]
    bad = b.gpu_slice("n7", 1)
    bad["spec"]["devices"][0]["capacity"]["memory"]["value"] = "lots"
    fake_api.put_all(*objects, bad)
    out = io.StringIO()
    caplog.set_level(logging.WARNING, logger="extender.state.live")
    written = write_snapshot(load_kubeconfig(fake_api.kubeconfig(tmp_path)), out)
    text = out.getvalue()
    documents = [d for d in yaml.safe_load_all(text) if d is not None]
    assert written == len(documents) == len(objects) - 1  # the malformed slice and the other ConfigMap are left out
    assert all(d["apiVersion"] and d["kind"] for d in documents)
    assert all("managedFields" not in d["metadata"] for d in documents)
    assert text.startswith("# cluster snapshot of http://127.0.0.1:")
    assert any("leaving malformed object out" in r.getMessage() for r in caplog.records)
    loaded = load_snapshot_text(text)
    expected = fresh_store(fake_api)
    assert state_of(loaded) == state_of(expected)
    assert loaded.snapshot().allocated and loaded.snapshot().synced


def test_snapshot_without_kueue_and_from_a_live_source(tmp_path: Path) -> None:
    server = FakeApiServer(groups={DRA: {"v1beta1": DRA_PLURALS}}).start()
    try:
        server.put_all(b.node("n1"), b.device_class())
        source = LiveSource(load_kubeconfig(server.kubeconfig(tmp_path)), kueue_configmap=("elsewhere", "cfg"))
        out = io.StringIO()
        assert write_snapshot(source, out) == 2
        documents = list(yaml.safe_load_all(out.getvalue()))
        assert [d["apiVersion"] for d in documents] == ["v1", "resource.k8s.io/v1beta1"]
        configmap_lists = server.list_queries("configmaps")
        assert configmap_lists[0]["fieldSelector"] == "metadata.name=cfg"
        assert not load_snapshot_text(out.getvalue()).snapshot().cluster_queues
    finally:
        server.close()


def test_live_source_hands_out_a_callable_binder(fake_api: FakeApiServer, tmp_path: Path) -> None:
    source = LiveSource(load_kubeconfig(fake_api.kubeconfig(tmp_path)))
    bind = source.binder()
    bind("team-a", "runner", "uid-1", "n2")
    assert fake_api.bindings[0]["target"]["name"] == "n2"


def test_snapshot_command_writes_a_loadable_file(
    fake_api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from extender.cli import main

    fake_api.put_all(*small_cluster())
    assert main(["snapshot", "--kubeconfig", str(fake_api.kubeconfig(tmp_path))]) == 0
    loaded = load_snapshot_text(capsys.readouterr().out)
    assert state_of(loaded) == state_of(fresh_store(fake_api))


def test_write_snapshot_from_kubeconfig(fake_api: FakeApiServer, tmp_path: Path) -> None:
    fake_api.put_all(b.node("n1"))
    out = io.StringIO()
    assert write_snapshot_from_kubeconfig(fake_api.kubeconfig(tmp_path), out) == 1
