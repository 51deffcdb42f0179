"""The live source against a scripted API server: after every stream the store equals a fresh list."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from extender.state.live import KUEUE_ABSENT_MESSAGE, LiveSource, from_kubeconfig
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
    kueue_objects,
    small_cluster,
    state_of,
    wait_for,
)

FAST = {
    "backoff_initial_seconds": 0.01,
    "backoff_max_seconds": 0.05,
    "kueue_recheck_seconds": 0.05,
    "request_timeout_seconds": 5.0,
}


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


def test_initial_lists_build_the_same_state_as_a_fresh_list(fake_api: FakeApiServer, tmp_path: Path) -> None:
    fake_api.put_all(*small_cluster())
    with running(fake_api, tmp_path) as (source, store):
        synced(source)
        assert_converges(store, fake_api)
        snapshot = store.snapshot()
        assert snapshot.synced and snapshot.kueue_enabled
        held = {("gpu.example.com", "n1", "gpu-0"): 1, ("gpu.example.com", "n1", "gpu-1"): 1}
        assert dict(snapshot.allocated) == held
        assert set(snapshot.config_maps) == {"kueue-system/kueue-manager-config"}
        assert set(snapshot.cluster_queues) == {"team-a"}
        health = source.health()
        assert health.ready, health.message
        assert set(health.freshness_seconds) == {
            "nodes",
            "namespaces",
            "pods",
            "configmaps",
            *DRA_PLURALS,
            *KUEUE_PLURALS,
        }
        stats = source.stats()
        assert all(s.listed and s.relists == 0 for s in stats.values())
        assert stats["resourceslices"].api_version == "resource.k8s.io/v1"
        assert stats["clusterqueues"].api_version == "kueue.x-k8s.io/v1beta2"
    watch = fake_api.watch_queries("pods")[0]
    assert watch["allowWatchBookmarks"] == "true"
    assert int(watch["timeoutSeconds"]) >= 300
    assert watch["resourceVersion"] == fake_api.list_queries("pods")[0].get("resourceVersion", watch["resourceVersion"])


def test_events_are_applied_incrementally(fake_api: FakeApiServer, tmp_path: Path) -> None:
    fake_api.put_all(*small_cluster())
    with running(fake_api, tmp_path) as (source, store):
        synced(source)
        # allocate a second claim, move a node's labels, delete a pod, add a namespace and a slice
        fake_api.put(
            b.claim("more", "team-a", [b.exact_request()], allocated=[("gpu", "n2", "gpu-3")], allocated_node="n2")
        )
        fake_api.put(b.node("n2", {"gpu.example.com/model": "h100"}))
        fake_api.delete("Pod", "team-a/waiting")
        fake_api.put(b.namespace("team-b"))
        fake_api.put(b.gpu_slice("n3", 2))
        fake_api.delete("ResourceClaim", "team-a/held")
        assert_converges(store, fake_api)
        assert dict(store.snapshot().allocated) == {("gpu.example.com", "n2", "gpu-3"): 1}
        stats = source.stats()
        assert stats["resourceclaims"].events_applied == 2
        assert stats["resourceclaims"].resource_version == str(fake_api.rv)
        assert sum(s.relists for s in stats.values()) == 0
        assert all(len(fake_api.list_queries(p)) == 1 for p in ("nodes", "pods", "resourceclaims"))


def test_bookmarks_advance_the_resource_version_a_reconnect_resumes_from(
    fake_api: FakeApiServer, tmp_path: Path
) -> None:
    fake_api.put_all(*small_cluster())
    with running(fake_api, tmp_path) as (source, store):
        synced(source)
        bookmark = fake_api.bookmark("nodes")
        wait_for(lambda: source.stats()["nodes"].resource_version == str(bookmark), message="bookmark applied")
        assert source.stats()["nodes"].bookmarks == 1
        fake_api.drop("nodes")
        wait_for(lambda: len(fake_api.watch_queries("nodes")) == 2, message="reconnect")
        assert fake_api.watch_queries("nodes")[1]["resourceVersion"] == str(bookmark)
        fake_api.put(b.node("n9"))
        assert_converges(store, fake_api)
        assert source.stats()["nodes"].relists == 0


@pytest.mark.parametrize("mid_frame", [False, True], ids=["between-frames", "mid-frame"])
def test_dropped_connection_resumes_from_the_last_resource_version(
    fake_api: FakeApiServer, tmp_path: Path, mid_frame: bool
) -> None:
    fake_api.put_all(*small_cluster())
    with running(fake_api, tmp_path) as (source, store):
        synced(source)
        last = fake_api.put(b.claim("c1", "team-a", [b.exact_request()]))
        wait_for(lambda: source.stats()["resourceclaims"].resource_version == str(last), message="event seen")
        # the connection drops and stays refused for a while; meanwhile the cluster changes
        fake_api.fail_watches("resourceclaims", 503)
        fake_api.drop("resourceclaims", mid_frame=mid_frame)
        wait_for(lambda: len(fake_api.watch_queries("resourceclaims")) >= 3, message="retries")
        fake_api.put(b.claim("c2", "team-a", [b.exact_request()], allocated=[("gpu", "n2", "gpu-0")]))
        fake_api.delete("ResourceClaim", "team-a/held")
        fake_api.fail_watches("resourceclaims", None)
        assert_converges(store, fake_api)
        queries = fake_api.watch_queries("resourceclaims")
        assert {q["resourceVersion"] for q in queries[1:]} == {str(last)}
        stats = source.stats()["resourceclaims"]
        assert stats.relists == 0 and len(fake_api.list_queries("resourceclaims")) == 1
        assert stats.reconnects >= 2 and stats.errors >= 2
        assert dict(store.snapshot().allocated) == {("gpu.example.com", "n2", "gpu-0"): 1}


@pytest.mark.parametrize("mode", list(ExpireMode), ids=lambda m: m.value)
def test_gone_relists_and_replaces(fake_api: FakeApiServer, tmp_path: Path, mode: ExpireMode) -> None:
    fake_api.put_all(*small_cluster())
    with running(fake_api, tmp_path) as (source, store):
        synced(source)
        before = len(fake_api.list_queries("pods"))

        def while_disconnected() -> None:  # nobody watching saw these: only a relist can
            fake_api.delete_silently("Pod", "team-a/waiting")
            fake_api.put_silently(b.pod("late", "team-a", templates={"gpu": "one-gpu"}))

        fake_api.expire("pods", while_disconnected, mode=mode)
        wait_for(lambda: "team-a/late" in store.snapshot().pods, message="relist")
        assert "team-a/waiting" not in store.snapshot().pods
        assert_converges(store, fake_api)
        assert source.stats()["pods"].relists == 1
        assert len(fake_api.list_queries("pods")) == before + 1
        # the watch after the relist starts from the relist's resourceVersion, and keeps working
        wait_for(
            lambda: (
                int(fake_api.watch_queries("pods")[-1]["resourceVersion"]) >= fake_api.collections["pods"].compacted
            ),
            message="watch from the new list",
        )
        fake_api.put(b.pod("later", "team-a"))
        assert_converges(store, fake_api)


def test_malformed_objects_are_skipped_and_the_watch_goes_on(
    fake_api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = b.gpu_slice("n7", 1)
    bad["spec"]["devices"][0]["capacity"]["memory"]["value"] = "lots"
    fake_api.put_all(*small_cluster(), bad)
    caplog.set_level(logging.WARNING, logger="extender.state.live")
    with running(fake_api, tmp_path) as (source, store):
        synced(source)
        assert "n7-gpu.example.com" not in store.snapshot().slices
        assert any("spec.devices[0].capacity.memory.value" in r.getMessage() for r in caplog.records)
        # a good object turning bad disappears, as a relist would make it; garbage frames are survived
        broken = b.gpu_slice("n1", 4)
        broken["spec"]["pool"] = "not-an-object"
        fake_api.put(broken)
        fake_api.raw_event("resourceslices", "ADDED", {"metadata": ["not", "a", "map"]})
        fake_api.raw_event("resourceslices", "SURPRISE", {"metadata": {"name": "x"}})
        fake_api.put(b.gpu_slice("n8", 2))
        wait_for(lambda: "n8-gpu.example.com" in store.snapshot().slices, message="later events applied")
        assert "n1-gpu.example.com" not in store.snapshot().slices
        assert_converges(store, fake_api)
        stats = source.stats()["resourceslices"]
        assert stats.malformed == 3
        assert stats.errors == 0 and stats.relists == 0
        assert source.health().ready


def test_ready_and_synced_only_after_every_initial_list(fake_api: FakeApiServer, tmp_path: Path) -> None:
    fake_api.put_all(*small_cluster())
    fake_api.hold_lists("pods")
    with running(fake_api, tmp_path) as (source, store):
        wait_for(lambda: sum(s.listed for s in source.stats().values()) == 12, message="other lists")
        health = source.health()
        assert not health.ready
        assert not source.ready_for_verdicts(60.0)  # the verbs' quick check agrees
        assert "waiting for the initial list of pods" in health.message
        assert "pods" not in health.freshness_seconds and "nodes" in health.freshness_seconds
        assert not store.snapshot().synced
        assert not source.wait_synced(0.05)
        fake_api.release_lists("pods")
        synced(source)
        assert store.snapshot().synced
        assert source.health().ready
        assert source.ready_for_verdicts(60.0)


def test_not_ready_while_disconnected_longer_than_the_grace(fake_api: FakeApiServer, tmp_path: Path) -> None:
    fake_api.put_all(*small_cluster())
    with running(fake_api, tmp_path, stale_grace_seconds=0.2) as (source, store):
        synced(source)
        fake_api.fail_watches("nodes", 500)
        fake_api.drop("nodes")
        wait_for(lambda: not source.ready_for_verdicts(0.01), message="past a verdict grace of 10 ms")
        health = wait_for(lambda: (h := source.health()) and not h.ready and h, message="stale")
        assert "disconnected longer than 0.2s: nodes" in health.message
        assert "500" in health.message
        assert not source.ready_for_verdicts(60.0)  # past the stale grace, whatever the verdict grace
        fake_api.fail_watches("nodes", None)
        wait_for(lambda: source.health().ready, message="ready again")
        wait_for(lambda: source.ready_for_verdicts(60.0), message="verdicts again")
        fake_api.put(b.node("n5"))
        assert_converges(store, fake_api)


def test_kueue_absent_then_installed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = FakeApiServer(groups={DRA: {"v1": DRA_PLURALS}}).start()
    caplog.set_level(logging.INFO, logger="extender.state.live")
    try:
        server.put_all(*small_cluster(kueue=False))
        with running(server, tmp_path) as (source, store):
            synced(source)
            assert not store.snapshot().kueue_enabled
            assert not source.kueue_enabled
            assert [r.getMessage() for r in caplog.records].count(KUEUE_ABSENT_MESSAGE) == 1
            health = source.health()
            assert health.ready and KUEUE_ABSENT_MESSAGE in health.message
            assert_converges(store, server)
            # Kueue gets installed while the extender runs; until its lists are in, the view is not ready (the
            # verbs answer an Error), never ready with quota off (that would let pods past the quota).
            server.put_all(*kueue_objects())
            server.hold_lists("clusterqueues")
            server.serve_group(KUEUE, "v1beta2", KUEUE_PLURALS)
            health = wait_for(
                lambda: (h := source.health()) and "clusterqueues" in h.message and h, message="kueue discovered"
            )
            assert not health.ready and not store.snapshot().kueue_enabled
            server.release_lists("clusterqueues")
            deadline = time.monotonic() + 10
            while not store.snapshot().kueue_enabled and time.monotonic() < deadline:
                assert not source.health().ready or store.snapshot().kueue_enabled, "ready with quota still off"
            wait_for(lambda: store.snapshot().kueue_enabled, message="kueue enabled")
            assert set(store.snapshot().cluster_queues) == {"team-a"}
            assert_converges(store, server)
            assert source.health().ready
            server.put(kueue_objects(cq="team-b")[2])
            assert_converges(store, server)
            assert [r.getMessage() for r in caplog.records].count(KUEUE_ABSENT_MESSAGE) == 1
    finally:
        server.close()


def test_old_kueue_without_cohorts_runs_quota_without_them(tmp_path: Path) -> None:
    old_kueue = tuple(p for p in KUEUE_PLURALS if p != "cohorts")
    server = FakeApiServer(groups={DRA: {"v1": DRA_PLURALS}, KUEUE: {"v1beta1": old_kueue}}).start()
    try:
        objects = [o for o in small_cluster() if o["kind"] != "Cohort"]
        for obj in objects:
            if obj["apiVersion"].startswith(KUEUE):
                obj["apiVersion"] = f"{KUEUE}/v1beta1"
                if obj["kind"] == "ClusterQueue":
                    obj["spec"]["cohort"] = obj["spec"].pop("cohortName")
        server.put_all(*objects)
        with running(server, tmp_path) as (source, store):
            synced(source)
            assert store.snapshot().kueue_enabled
            assert "cohorts" not in source.stats()
            assert source.stats()["clusterqueues"].api_version == "kueue.x-k8s.io/v1beta1"
            assert_converges(store, server)
    finally:
        server.close()


@pytest.mark.slow
def test_resync_relists_periodically(fake_api: FakeApiServer, tmp_path: Path) -> None:
    fake_api.put_all(*small_cluster())
    with running(fake_api, tmp_path, resync_seconds=1.0) as (source, store):
        synced(source)
        wait_for(lambda: fake_api.watch_queries("nodes"), message="watch")
        assert fake_api.watch_queries("nodes")[0]["timeoutSeconds"] == "1"
        wait_for(lambda: source.stats()["nodes"].relists >= 1, timeout=3.0, message="resync")
        assert_converges(store, fake_api)


def test_stop_ends_every_thread_promptly(fake_api: FakeApiServer, tmp_path: Path) -> None:
    fake_api.put_all(*small_cluster())
    source = from_kubeconfig(fake_api.kubeconfig(tmp_path), **FAST)
    source.start(ClusterStore())
    synced(source)
    wait_for(lambda: fake_api.live_watches("nodes") == 1, message="watch open")
    before = {t for t in threading.enumerate() if t.name.startswith(("watch-", "live-source"))}
    assert len(before) == 14
    source.stop()
    assert not any(t.is_alive() for t in before)


def test_unreachable_api_server_is_reported_not_ready(tmp_path: Path) -> None:
    server = FakeApiServer().start()
    kubeconfig = server.kubeconfig(tmp_path)
    server.close()  # nothing listens on that port any more
    source = from_kubeconfig(kubeconfig, **FAST)
    source.start(ClusterStore())
    try:
        health = wait_for(
            lambda: (
                (h := source.health())
                and "discovering" in h.message
                and "failed" not in h.message
                and "in progress" not in h.message
                and h
            ),
            message="discovery error",
        )
        assert not health.ready
    finally:
        source.stop()


def test_state_equality_helper_sees_differences(fake_api: FakeApiServer) -> None:
    """Guards the guard: the comparison all these tests rely on must notice a missing allocation."""
    fake_api.put_all(*small_cluster())
    from tests.support.fake_api import fresh_store

    store = fresh_store(fake_api)
    assert state_of(store) == state_of(fresh_store(fake_api))
    store.apply("ResourceClaim", "DELETED", {"metadata": {"name": "held", "namespace": "team-a"}})
    assert state_of(store) != state_of(fresh_store(fake_api))
