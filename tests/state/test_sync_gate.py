"""Sync-gated verbs: no verdict from an incomplete view.

Before every watched collection has been listed (or while watches are broken past the stale grace) filter
answers with an Error (a failed attempt kube-scheduler retries with backoff), prioritize with 503, bind refuses;
/readyz says the same. The scenario is the over-commit measured on the real control plane: Nodes and slices
listed, ClusterQueues not yet, so quota looked ungoverned and pods were admitted past it.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from extender.service import BindError, ExtenderConfig, NotSyncedError, SchedulingService
from extender.state.core import Pod, parse_pod
from extender.state.sources import SourceHealth, SourceWithoutWatches
from extender.state.store import ClusterStore
from extender.transport.app import create_app
from testkit.scenarios import cluster_queue, gpu_pod
from tests.support.quota import one_queue_objects as quota_objects

NODES = ["on-demand-0", "on-demand-1"]


class ManualSource(SourceWithoutWatches):
    """A source whose lists arrive when the test says so, like a LiveSource's watchers one by one."""

    description = "manual test source"

    def __init__(self) -> None:
        self.ready = False
        self.message = "waiting for the initial list of clusterqueues"
        self.disconnected: tuple[str, float] = ("", 0.0)
        self.store: ClusterStore | None = None

    def start(self, store: ClusterStore) -> None:
        self.store = store
        store.set_synced(False)

    def stop(self) -> None:
        return None

    def health(self) -> SourceHealth:
        return SourceHealth(self.ready, self.message if not self.ready else "all listed", {}, self.disconnected)

    def add(self, objects: list[dict[str, Any]]) -> None:
        assert self.store is not None
        for obj in objects:
            self.store.apply(obj["kind"], "ADDED", obj)

    def finish_lists(self) -> None:
        assert self.store is not None
        self.store.set_synced(True)
        self.ready = True


def half_listed() -> tuple[SchedulingService, ManualSource]:
    """Everything but the ClusterQueue is in the view: an ungated filter would pass 4 GPUs against quota 2."""
    source = ManualSource()
    service = SchedulingService(source, ExtenderConfig(), binder=lambda *args: None)
    service.start()
    source.add([obj for obj in quota_objects(nominal=2) if obj["kind"] != "ClusterQueue"])
    return service, source


def parse(obj: dict[str, Any]) -> Pod:
    return parse_pod(obj)


def post(client: Any, path: str, body: object) -> Any:
    return client.post(path, data=orjson.dumps(body), content_type="application/json")


def test_filter_answers_an_error_until_every_collection_is_listed() -> None:
    service, source = half_listed()
    client = create_app(service).test_client()
    pod = gpu_pod("p", template="two")
    response = post(client, "/filter", {"Pod": pod, "NodeNames": NODES})
    assert response.status_code == 200
    body = response.get_json()
    assert "not synced" in body["Error"] and "clusterqueues" in body["Error"]
    assert body["NodeNames"] is None and body["FailedNodes"] == {}
    assert len(service.reservations) == 0, "nothing reserved on an incomplete view"
    assert post(client, "/prioritize", {"Pod": pod, "NodeNames": NODES}).status_code == 503
    ready = client.get("/readyz")
    assert ready.status_code == 503 and "clusterqueues" in ready.get_json()["message"]

    source.add([obj for obj in quota_objects(nominal=2) if obj["kind"] == "ClusterQueue"])
    source.finish_lists()
    assert client.get("/readyz").status_code == 200
    body = post(client, "/filter", {"Pod": pod, "NodeNames": NODES}).get_json()
    assert body["Error"] == "" and body["NodeNames"] == NODES  # 2 GPUs fit quota 2
    second = post(client, "/filter", {"Pod": gpu_pod("q2", template="two"), "NodeNames": NODES}).get_json()
    assert second["NodeNames"] == [] and "quota exhausted" in second["FailedNodes"][NODES[0]]


def test_quota_is_enforced_from_the_first_verdict() -> None:
    """The first verdict given sees the ClusterQueue: a pod over quota is refused, never admitted."""
    service, source = half_listed()
    source.add([cluster_queue("team-a", {"on-demand": {"nominal": 1}}, cohort=None)])
    try:
        service.filter(parse(gpu_pod("p", template="two")), NODES)
        raise AssertionError("filter gave a verdict on an incomplete view")
    except NotSyncedError:
        pass
    source.finish_lists()
    decision = service.filter(parse(gpu_pod("p", template="two")), NODES)
    assert not decision.passed
    assert {v.category for v in decision.verdicts.values()} == {"quota-exceeds-maximum"}


def test_bind_refuses_and_releases_while_not_synced() -> None:
    service, source = half_listed()
    source.add([obj for obj in quota_objects(nominal=8) if obj["kind"] == "ClusterQueue"])
    source.finish_lists()
    pod = gpu_pod("p", template="two")
    service.filter(parse(pod), NODES)
    assert len(service.reservations) == 1
    source.ready = False
    source.message = "disconnected longer than 60s: resourceclaims for 61s"
    client = create_app(service).test_client()
    assert post(client, "/prioritize", {"Pod": pod, "NodeNames": NODES}).status_code == 503
    with pytest.raises(BindError, match=r"not synced .*resourceclaims"):
        service.bind("team-a", "p", pod["metadata"]["uid"], NODES[0])
    assert len(service.reservations) == 0


def test_a_snapshot_source_is_synced_at_start() -> None:
    from tests.support.scenarios import engine_for

    service = engine_for(quota_objects())
    assert service.sync_problem() == ""


def test_no_verdict_while_a_watch_reconnects_past_the_verdict_grace() -> None:
    """Ready (within staleGraceSeconds), but a collection has been without its watch for 3 s: events may be
    missing (a pod another extender admitted, an allocation), so no verdict until it is back."""
    service, source = half_listed()
    source.add([obj for obj in quota_objects(nominal=8) if obj["kind"] == "ClusterQueue"])
    source.finish_lists()
    pod = parse(gpu_pod("p", template="two"))
    source.disconnected = ("resourceclaims", 1.5)
    assert service.filter(pod, NODES).passed
    source.disconnected = ("resourceclaims", 3.0)
    with pytest.raises(NotSyncedError, match=r"resourceclaims has been reconnecting for 3\.0s"):
        service.filter(pod, NODES)
    source.disconnected = ("", 0.0)
    assert service.filter(pod, NODES).passed
