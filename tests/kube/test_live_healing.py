"""The live view heals itself, against the scripted API server: an API that stops being served or changes
version, a resourceVersion from the future (etcd restored), nodes that come and go, objects a parser cannot
read. Every case ends with the view ready again, without a restart, and equal to what a fresh list gives."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from extender.kube.api import ApiError, status_causes, too_large_resource_version
from extender.state import kinds
from extender.state.live import LiveSource, from_kubeconfig
from extender.state.live.source import KUEUE_RETIRED_MESSAGE
from extender.state.store import ClusterStore
from testkit import builders as b
from tests.support.fake_api import (
    DRA,
    DRA_PLURALS,
    KUEUE,
    KUEUE_PLURALS,
    ExpireMode,
    FakeApiServer,
    assert_converges,
    fresh_store,
    kueue_objects,
    small_cluster,
    state_of,
    too_large_status,
    wait_for,
)

FAST = {
    "backoff_initial_seconds": 0.01,
    "backoff_max_seconds": 0.05,
    "kueue_recheck_seconds": 0.05,
    "request_timeout_seconds": 5.0,
}
HEALED_WITHIN_SECONDS = 5.0


@contextlib.contextmanager
def running(server: FakeApiServer, tmp_path: Path, **options: Any) -> Iterator[tuple[LiveSource, ClusterStore]]:
    source = from_kubeconfig(server.kubeconfig(tmp_path), **{**FAST, **options})
    store = ClusterStore()
    source.start(store)
    try:
        yield source, store
    finally:
        source.stop()


def synced(source: LiveSource) -> None:
    assert source.wait_synced(4.0), source.health().message


def as_v1beta1(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A Kueue object as a v1beta1-only Kueue serves it (the ClusterQueue's cohort under its old name)."""
    old = copy.deepcopy(dict(obj))
    if old["apiVersion"].startswith(KUEUE):
        old["apiVersion"] = f"{KUEUE}/v1beta1"
        if old["kind"] == "ClusterQueue" and "cohortName" in old["spec"]:
            old["spec"]["cohort"] = old["spec"].pop("cohortName")
    return old


# --- APIs that go away or change version ------------------------------------------------------------------------


def test_kueue_served_at_a_new_version_moves_the_watchers_without_a_restart(tmp_path: Path) -> None:
    """Kueue upgraded to a release that no longer serves the version picked at start: the 404s rediscover at once
    (the periodic re-check is an hour away here), the Kueue kinds are relisted at the new version, quota stays on
    and the view is ready again within seconds."""
    server = FakeApiServer(groups={DRA: {"v1": DRA_PLURALS}, KUEUE: {"v1beta1": KUEUE_PLURALS}}).start()
    try:
        server.put_all(*(as_v1beta1(obj) for obj in small_cluster()))
        with running(server, tmp_path, kueue_recheck_seconds=3600.0) as (source, store):
            synced(source)
            assert source.stats()["clusterqueues"].api_version == f"{KUEUE}/v1beta1"
            assert_converges(store, server)

            def upgraded() -> None:  # the server now converts the stored objects to v1beta2
                server.serve_group(KUEUE, "v1beta2", KUEUE_PLURALS)
                for obj in kueue_objects():
                    server.put_silently(obj)

            switched = time.monotonic()
            server.stop_serving(KUEUE, "v1beta1", upgraded)
            wait_for(
                lambda: (
                    source.health().ready
                    and all(
                        s.api_version == f"{KUEUE}/v1beta2" and s.listed
                        for name, s in source.stats().items()
                        if name in KUEUE_PLURALS
                    )
                ),
                timeout=HEALED_WITHIN_SECONDS,
                message="Kueue watchers moved to v1beta2 and ready",
            )
            assert time.monotonic() - switched < HEALED_WITHIN_SECONDS
            assert store.snapshot().kueue_enabled and set(store.snapshot().cluster_queues) == {"team-a"}
            assert_converges(store, server)
            assert source.api_changes() == dict.fromkeys(KUEUE_PLURALS, 1)
            assert source.liveness_problem() == ""
            # the new watchers follow changes at the new version
            server.put(kueue_objects(cq="team-b")[2])
            assert_converges(store, server)
            assert all(len(server.watch_queries(p)) >= 2 for p in KUEUE_PLURALS)
    finally:
        server.close()


def test_kueue_uninstalled_retires_its_kinds_and_quota_then_comes_back(
    fake_api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake_api.put_all(*small_cluster())
    caplog.set_level(logging.INFO, logger="extender.state.live")
    with running(fake_api, tmp_path) as (source, store):
        synced(source)
        assert store.snapshot().kueue_enabled
        fake_api.stop_serving(KUEUE)
        wait_for(lambda: not source.kueue_enabled, timeout=HEALED_WITHIN_SECONDS, message="Kueue retired")
        health = wait_for(lambda: (h := source.health()) and h.ready and h, message="ready again")
        assert "no longer served, objects dropped: clusterqueues.kueue.x-k8s.io/v1beta2" in health.message
        # Quota is switched off before the retired kinds are emptied one by one: wait for the last of them.
        snapshot = wait_for(
            lambda: (s := store.snapshot()) and not (s.cluster_queues or s.workloads or s.local_queues) and s,
            message="Kueue's objects dropped",
        )
        assert not snapshot.kueue_enabled
        assert not snapshot.cluster_queues and not snapshot.workloads and not snapshot.local_queues
        assert not snapshot.queue_status
        assert_converges(store, fake_api)  # fresh_store leaves unserved kinds out too
        assert [r.getMessage() for r in caplog.records].count(KUEUE_RETIRED_MESSAGE) == 1
        assert not any("not watching" in r.getMessage() and "kueue" in r.getMessage() for r in caplog.records)
        stats = source.stats_dicts()
        assert stats["clusterqueues"] == {"resource": "clusterqueues", "api_changes": 1, "served": False}
        assert stats["nodes"]["served"] and stats["nodes"]["api_changes"] == 0
        assert source.ready_for_verdicts(60.0)
        # installed again: found by the periodic re-check, quota on once its lists are in
        fake_api.serve_group(KUEUE, "v1beta2", KUEUE_PLURALS)
        wait_for(lambda: store.snapshot().kueue_enabled, timeout=HEALED_WITHIN_SECONDS, message="Kueue back")
        wait_for(lambda: source.health().ready, message="ready with Kueue")
        assert "no longer served" not in source.health().message
        assert set(store.snapshot().cluster_queues) == {"team-a"}
        assert_converges(store, fake_api)


def test_an_optional_api_switched_off_is_retired_and_the_rest_stays_ready(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    groups = {DRA: {"v1": DRA_PLURALS, "v1alpha3": ("devicetaintrules",)}, KUEUE: {"v1beta2": KUEUE_PLURALS}}
    server = FakeApiServer(groups=groups).start()
    caplog.set_level(logging.INFO, logger="extender.state.live")
    try:
        server.put_all(*small_cluster())
        server.put(
            {
                "apiVersion": f"{DRA}/v1alpha3",
                "kind": "DeviceTaintRule",
                "metadata": {"name": "drain-n1"},
                "spec": {
                    "deviceSelector": {"driver": "gpu.example.com", "pool": "n1"},
                    "taint": {"key": "maintenance", "effect": "NoSchedule"},
                },
            }
        )
        with running(server, tmp_path) as (source, store):
            synced(source)
            assert set(store.snapshot().objects["DeviceTaintRule"]) == {"drain-n1"}
            server.stop_serving(DRA, "v1alpha3")
            wait_for(
                lambda: not store.snapshot().objects["DeviceTaintRule"],
                timeout=HEALED_WITHIN_SECONDS,
                message="rules dropped",
            )
            health = wait_for(lambda: (h := source.health()) and h.ready and h, message="ready")
            assert "devicetaintrules.resource.k8s.io/v1alpha3" in health.message
            assert store.snapshot().kueue_enabled  # nothing else switched off
            assert "devicetaintrules" not in source.stats()

            # The source drops the kind's objects before it logs the retirement: wait for the line, then count.
            def logged() -> list[str]:
                return [r.getMessage() for r in caplog.records if "devicetaintrules" in r.getMessage()]

            wait_for(lambda: any("no longer served" in m for m in logged()), message="the retirement logged")
            retired = logged()
            assert sum("no longer served" in m for m in retired) == 1
            assert not any(m.startswith("not watching DeviceTaintRule") for m in retired)
            assert_converges(store, server)
    finally:
        server.close()


def test_a_404_for_a_kind_still_in_discovery_keeps_retrying_and_heals(fake_api: FakeApiServer, tmp_path: Path) -> None:
    """A 404 the discovery does not confirm (a proxy, a server restarting) changes nothing: the watcher keeps
    retrying, and the kind is back once the server answers again."""
    fake_api.put_all(*small_cluster())
    with running(fake_api, tmp_path) as (source, store):
        synced(source)
        fake_api.fail_watches("nodes", 404)
        fake_api.drop("nodes")
        wait_for(lambda: len(fake_api.watch_queries("nodes")) >= 4, message="retries")
        assert "nodes" in source.stats() and source.api_changes() == {}
        fake_api.fail_watches("nodes", None)
        fake_api.put(b.node("n5"))
        assert_converges(store, fake_api)
        wait_for(lambda: source.health().ready, message="ready")


def test_liveness_fails_only_when_a_thread_of_the_view_died(fake_api: FakeApiServer, tmp_path: Path) -> None:
    fake_api.put_all(*small_cluster())
    with running(fake_api, tmp_path) as (source, _store):
        synced(source)
        assert source.liveness_problem() == ""
        fake_api.fail_watches("pods", 500)
        fake_api.drop("pods")
        wait_for(lambda: source.stats()["pods"].errors >= 2, message="errors")
        assert source.liveness_problem() == ""  # errors heal by themselves: a restart would not help
        watcher = source._watchers["Pod"]
        watcher._stopping.set()  # the thread ends as if it had crashed, though nobody stopped it
        watcher._abort_response()
        watcher.join(5.0)
        watcher._stopping.clear()
        assert source.liveness_problem() == "cluster view threads ended: pods"


# --- a resourceVersion from the future ----------------------------------------------------------------------------


def test_too_large_resource_version_is_recognised_as_client_go_does() -> None:
    status = too_large_status(205, 100)
    assert too_large_resource_version(status["code"], status_causes(status))
    # API servers 1.17.0-1.18.5: the cause message without a type
    old = {"code": 504, "details": {"causes": [{"message": "Too large resource version"}]}}
    assert too_large_resource_version(old["code"], status_causes(old))
    assert not too_large_resource_version(504, status_causes({"code": 504, "details": {}}))
    assert not too_large_resource_version(410, ())
    error = ApiError(504, "Timeout", "Too large resource version", causes=status_causes(status))
    assert error.resource_version_unavailable and not error.gone
    assert ApiError(410, "Expired", "").resource_version_unavailable
    assert not ApiError(504, "Timeout", "etcd is slow").resource_version_unavailable


@pytest.mark.parametrize("mode", list(ExpireMode), ids=lambda m: m.value)
def test_etcd_restored_behind_the_view_relists_and_converges(
    fake_api: FakeApiServer, tmp_path: Path, mode: ExpireMode
) -> None:
    """The cluster's resourceVersion goes back and objects change with no event: every watch is refused with
    ResourceVersionTooLarge and relists; objects gone since stop charging, restored claims hold devices again."""
    fake_api.put_all(*small_cluster())
    with running(fake_api, tmp_path) as (source, store):
        synced(source)
        fake_api.put(b.pod("gone-after-restore", "team-a", queue="training"))
        assert_converges(store, fake_api)
        lists_before = len(fake_api.list_queries("resourceclaims"))

        def backup() -> None:
            fake_api.delete_silently("Pod", "team-a/gone-after-restore")
            fake_api.delete_silently("Pod", "team-a/waiting")
            fake_api.put_silently(
                b.claim(
                    "restored",
                    "team-a",
                    [b.exact_request()],
                    allocated=[("gpu", "n2", "gpu-1")],
                    allocated_node="n2",
                )
            )
            fake_api.put_silently(b.node("n3", {"gpu.example.com/model": "a100"}))

        restored_at = time.monotonic()
        fake_api.restore(backup, mode=mode)
        assert_converges(store, fake_api, timeout=HEALED_WITHIN_SECONDS)
        assert time.monotonic() - restored_at < HEALED_WITHIN_SECONDS
        snapshot = store.snapshot()
        assert "team-a/gone-after-restore" not in snapshot.pods and "n3" in snapshot.nodes
        assert snapshot.allocated.get(("gpu.example.com", "n2", "gpu-1")) == 1
        assert len(fake_api.list_queries("resourceclaims")) == lists_before + 1
        assert source.stats()["resourceclaims"].relists == 1
        wait_for(lambda: source.health().ready, message="ready")
        # watching again from the relist's (lower) resourceVersion
        fake_api.put(b.pod("after-restore", "team-a"))
        assert_converges(store, fake_api)


# --- per-node state pruned ----------------------------------------------------------------------------------------


def _per_node_sizes(store: ClusterStore) -> dict[str, int]:
    snapshot = store.snapshot()
    return {
        "local_versions": len(snapshot.topology.local_versions),
        "local_pools": len(snapshot.topology.local_pools),
        "alloc_versions": len(snapshot.alloc_versions),
        "pools": len(snapshot.topology.pools),
        "node_devices_cache": len(store._node_devices_cache),
        "pool_slices": len(store._pool_slices),
    }


def test_nodes_that_come_and_go_leave_no_per_node_state() -> None:
    """5,000 uniquely named nodes (an autoscaler's), each with a slice and an allocated claim, added and deleted:
    the per-node maps end as small as the two nodes that stay, and versions never go backwards."""
    store = ClusterStore()
    store.replace("Node", [b.node(name) for name in ("keep-1", "keep-2")])
    store.replace("ResourceSlice", [b.gpu_slice(name, 2) for name in ("keep-1", "keep-2")])
    store.replace("DeviceClass", [b.device_class()])
    seen_versions: dict[str, int] = {}
    for index in range(5000):
        name = f"scaled-{index:05d}"
        store.apply("Node", "ADDED", b.node(name))
        store.apply("ResourceSlice", "ADDED", b.gpu_slice(name, 2))
        claim = b.claim(
            f"c-{index}", "ns", [b.exact_request()], allocated=[("gpu", name, "gpu-0")], allocated_node=name
        )
        store.apply("ResourceClaim", "ADDED", claim)
        snapshot = store.snapshot()
        snapshot.node_devices(name)
        seen_versions[name] = snapshot.topology.local_versions[name]
        assert snapshot.alloc_versions[name] > 0
        store.apply("ResourceClaim", "DELETED", claim)
        store.apply("ResourceSlice", "DELETED", b.gpu_slice(name, 2))
        store.apply("Node", "DELETED", b.node(name))
    sizes = _per_node_sizes(store)
    assert sizes == {
        "local_versions": 2,
        "local_pools": 2,
        "alloc_versions": 0,
        "pools": 2,
        "node_devices_cache": 0,
        "pool_slices": 2,
    }
    # a node of a name seen before gets a version no cache has seen: never one it had, never 0
    store.apply("Node", "ADDED", b.node("scaled-00007"))
    store.apply("ResourceSlice", "ADDED", b.gpu_slice("scaled-00007", 2))
    again = store.snapshot().topology.local_versions["scaled-00007"]
    assert again > max(seen_versions.values())
    assert len(store.snapshot().node_devices("scaled-00007").devices) == 2


def test_pruning_follows_the_slices_not_only_the_node() -> None:
    """A node deleted before its slices keeps its entries until the last slice goes; a node without slices
    keeps only its own version."""
    store = ClusterStore()
    store.replace("Node", [b.node("n1"), b.node("bare")])
    store.replace("ResourceSlice", [b.gpu_slice("n1", 2)])
    store.snapshot().node_devices("n1")
    store.apply("Node", "DELETED", b.node("n1"))
    assert "n1" in store.snapshot().topology.local_pools
    store.apply("ResourceSlice", "DELETED", b.gpu_slice("n1", 2))
    snapshot = store.snapshot()
    assert "n1" not in snapshot.topology.local_pools and "n1" not in snapshot.topology.local_versions
    assert set(snapshot.topology.local_versions) == {"bare"}
    assert state_of(store)["objects"]["Node"].keys() == {"bare"}


def test_nodes_through_the_watch_leave_no_per_node_state(fake_api: FakeApiServer, tmp_path: Path) -> None:
    fake_api.put_all(*small_cluster())
    with running(fake_api, tmp_path) as (source, store):
        synced(source)
        baseline = _per_node_sizes(store)
        for index in range(150):
            name = f"auto-{index}"
            fake_api.put(b.node(name))
            fake_api.put(b.gpu_slice(name, 1))
        wait_for(lambda: "auto-149" in store.snapshot().topology.local_pools, message="nodes added")
        for index in range(150):
            name = f"auto-{index}"
            fake_api.delete("ResourceSlice", f"{name}-gpu.example.com")
            fake_api.delete("Node", name)
        assert_converges(store, fake_api)
        assert _per_node_sizes(store) == baseline


# --- one parse-failure rule for list and watch --------------------------------------------------------------------


def test_an_object_the_parser_fails_on_is_skipped_in_lists_and_watches(
    fake_api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A parser bug (any exception, not only a malformed field) skips the one object and counts it, in the list
    and in the watch alike; the kind still syncs and everything else in it is served."""
    info = kinds.KINDS_BY_NAME["DeviceClass"]

    def parse(raw: Mapping[str, Any]) -> Any:
        if raw["metadata"]["name"].startswith("cursed"):
            raise KeyError("a parser bug")
        return info.parse(raw)

    monkeypatch.setitem(kinds.KINDS_BY_NAME, "DeviceClass", dataclasses.replace(info, parse=parse))
    caplog.set_level(logging.WARNING, logger="extender.state.live")
    fake_api.put_all(*small_cluster(), b.device_class("cursed.example.com"), b.device_class("fine.example.com"))
    with running(fake_api, tmp_path) as (source, store):
        synced(source)
        assert set(store.snapshot().device_classes) == {"gpu.example.com", "fine.example.com"}
        assert source.stats()["deviceclasses"].malformed == 1
        assert any("cursed.example.com" in r.getMessage() and "KeyError" in r.getMessage() for r in caplog.records)
        fake_api.put(b.device_class("cursed-too.example.com"))
        fake_api.put(b.device_class("later.example.com"))
        wait_for(lambda: "later.example.com" in store.snapshot().device_classes, message="later event")
        assert "cursed-too.example.com" not in store.snapshot().device_classes
        assert source.stats()["deviceclasses"].malformed == 2
        assert source.stats()["deviceclasses"].errors == 0
        assert source.health().ready
        # a relist agrees with the watch: both leave the cursed ones out
        assert state_of(store) == state_of(fresh_store(fake_api))


def test_replace_skips_an_object_whose_key_cannot_be_read() -> None:
    store = ClusterStore()
    errors = store.replace("Node", [b.node("n1"), {"metadata": ["not", "an", "object"]}, b.node("n2")])
    assert set(store.snapshot().nodes) == {"n1", "n2"}
    assert len(errors) == 1 and "metadata" in errors[0].describe()
