"""Background threads step aside while a verb runs (transport/foreground.py), and never for longer than the bound."""

from __future__ import annotations

import io
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from extender.service import ExtenderConfig
from extender.state.live import from_kubeconfig
from extender.state.store import ClusterStore
from extender.transport import foreground
from extender.transport.app import create_app
from extender.transport.foreground import ForegroundWork, foreground_for
from extender.transport.server import ExtenderWorker
from testkit import builders as b
from testkit.scenarios import gpu_pod
from tests.support.fake_api import FakeApiServer, small_cluster, wait_for
from tests.support.scenarios import engine_for

FAST = {"backoff_initial_seconds": 0.01, "backoff_max_seconds": 0.05, "request_timeout_seconds": 5.0}


def test_no_verb_running_costs_no_wait() -> None:
    work = ForegroundWork()
    started = time.monotonic()
    for _ in range(1000):
        work.step_aside()
    assert time.monotonic() - started < 0.5
    assert work.stepped_aside == 0 and work.waited_seconds == 0.0


def test_background_waits_until_the_verb_ends() -> None:
    work = ForegroundWork(max_hold_seconds=10.0)
    work.begin()
    passed = threading.Event()
    thread = threading.Thread(target=lambda: (work.step_aside(), passed.set()))
    thread.start()
    assert not passed.wait(0.2)  # held while the verb runs
    work.end()
    assert passed.wait(2.0)
    thread.join()
    assert work.stepped_aside == 1
    assert work.waited_seconds >= 0.15
    assert work.running == 0


def test_verbs_without_a_gap_hold_background_work_at_most_max_hold() -> None:
    work = ForegroundWork(max_hold_seconds=0.2)
    work.begin()
    work.begin()  # overlapping callers
    started = time.monotonic()
    work.step_aside()
    waited = time.monotonic() - started
    assert 0.1 <= waited < 1.0
    time.sleep(0.05)
    again = time.monotonic()
    work.step_aside()  # the bound runs from when verbs started, not per call
    assert time.monotonic() - again < 0.05
    work.end()
    work.end()
    assert work.running == 0


def test_verbs_mark_themselves_running_and_always_unmark() -> None:
    """A verb runs with the store's ForegroundWork marked until the server closes its answer (PEP 3333: after
    writing it), also when it fails (400, 500)."""
    engine = engine_for([b.namespace("team-a"), b.device_class(), b.node("n1"), b.gpu_slice("n1", 2)], ExtenderConfig())
    seen: list[int] = []
    real_filter = engine.filter

    def recording_filter(pod, node_names):  # type: ignore[no-untyped-def]
        seen.append(work.running)
        if list(node_names) == ["boom"]:
            raise RuntimeError("boom")
        return real_filter(pod, node_names)

    engine.filter = recording_filter  # type: ignore[method-assign]
    work = foreground_for(engine.store)  # the one the app's verbs mark
    client = create_app(engine).test_client()
    body = {"Pod": gpu_pod("p", namespace="team-a"), "NodeNames": ["n1"]}
    answer = client.post("/filter", data=orjson.dumps(body), content_type="application/json")
    assert answer.status_code == 200 and seen == [1]
    assert work.running == 1  # until the server has written the answer and closes it
    answer.close()
    assert work.running == 0
    failing = {**body, "NodeNames": ["boom"]}
    for data, status in ((b"{not json", 400), (orjson.dumps(failing), 500)):
        with client.post("/filter", data=data, content_type="application/json") as response:
            assert response.status_code == status
        assert work.running == 0
    assert seen == [1, 1]
    metrics = client.get("/metrics").get_data(as_text=True)
    assert "dra_extender_background_stepped_aside_total 0.0" in metrics
    assert "dra_extender_background_stepped_aside_for_requests_total 0.0" in metrics


@pytest.mark.slow
def test_watch_events_wait_for_the_running_verb(fake_api: FakeApiServer, tmp_path: Path) -> None:
    """A watch event arriving while a verb runs is applied once it ends; with verbs running past the bound it is
    applied anyway."""
    fake_api.put_all(*small_cluster())
    source = from_kubeconfig(fake_api.kubeconfig(tmp_path), **FAST)
    store = ClusterStore()
    source.start(store)
    try:
        assert source.wait_synced(4.0), source.health().message
        work = foreground_for(store)  # as the app factory installs it
        work.max_hold_seconds = 10.0
        work.begin()
        fake_api.put(b.namespace("team-b"))
        time.sleep(0.5)
        assert "team-b" not in store.snapshot().namespaces
        work.end()
        wait_for(lambda: "team-b" in store.snapshot().namespaces, message="the held event applied")
        assert work.stepped_aside >= 1 and work.waited_seconds >= 0.3

        work.max_hold_seconds = 0.3
        work.begin()  # and never ends in time
        fake_api.put(b.namespace("team-c"))
        wait_for(lambda: "team-c" in store.snapshot().namespaces, timeout=3.0, message="applied past the bound")
        work.end()
    finally:
        source.stop()


def test_a_request_waiting_on_an_expected_socket_holds_background_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes waiting on a socket the server expects a verb's request on hold background work off until the thread
    that serves it has marked its verb running, then until the verb ends."""
    monkeypatch.setattr(foreground, "ARRIVAL_WAIT_SECONDS", 10.0)
    work = ForegroundWork(max_hold_seconds=10.0)
    served, client = socket.socketpair()
    with served, client, work.expect_requests(served.fileno()):
        for _ in range(100):
            work.step_aside()  # nothing waiting yet: no wait
        assert work.stepped_aside_for_arrivals == 0
        client.sendall(b"POST /filter")
        passed = threading.Event()
        thread = threading.Thread(target=lambda: (work.step_aside(), passed.set()))
        thread.start()
        assert not passed.wait(0.2)  # the request waits: background work holds off
        work.begin()  # the serving thread woke and marked its verb
        assert not passed.wait(0.2)  # still held, now by the running verb
        work.end()
        assert passed.wait(2.0)
        thread.join()
    assert work.stepped_aside_for_arrivals == 1 and work.stepped_aside == 1
    assert work.waited_seconds >= 0.3


def test_a_waiting_request_holds_background_work_only_briefly_and_only_while_expected() -> None:
    work = ForegroundWork(max_hold_seconds=10.0)
    served, client = socket.socketpair()
    with served, client:
        client.sendall(b"POST /filter")
        with work.expect_requests(served.fileno()):
            started = time.monotonic()
            work.step_aside()  # no thread marks a verb for it: held ARRIVAL_WAIT_SECONDS at most
            assert time.monotonic() - started < 0.5
            assert work.stepped_aside_for_arrivals == 0 and work.running == 0
        started = time.monotonic()
        for _ in range(1000):
            work.step_aside()  # the socket is no longer expected: its bytes hold nothing off
        assert time.monotonic() - started < 0.5


def test_the_lingering_server_thread_marks_the_verb_running_when_its_request_arrives() -> None:
    """transport/server.py: the pool thread waiting on a kept-alive connection of the scheduling listener
    announces the wait and marks the verb running as soon as the next request's bytes wake it, before reading
    them; a connection that stays quiet leaves nothing marked and nothing expected."""
    work = ForegroundWork(max_hold_seconds=10.0)
    worker = ExtenderWorker.__new__(ExtenderWorker)  # only what _next_request_soon reads
    worker._lingering = threading.BoundedSemaphore(1)
    worker._direct_allowed = True
    served, client = socket.socketpair()
    with served, client:
        conn = SimpleNamespace(
            sock=served,
            parser=SimpleNamespace(unreader=SimpleNamespace(buf=io.BytesIO())),
            listener=SimpleNamespace(settings=SimpleNamespace(direct=SimpleNamespace(foreground=work))),
        )
        soon, mark = worker._next_request_soon(conn)  # type: ignore[arg-type]
        assert (soon, mark, work.running) == (False, None, 0)  # nothing came within the linger

        result: list[tuple[bool, object]] = []
        thread = threading.Thread(target=lambda: result.append(worker._next_request_soon(conn)))  # type: ignore[arg-type]
        thread.start()
        wait_for(lambda: work._expected == 1, message="the wait announced")
        client.sendall(b"POST /filter")
        thread.join(2.0)
        soon, mark = result[0]
        assert soon and mark is not None and work.running == 1 and work._expected == 0
        mark.end()  # type: ignore[attr-defined]
        mark.end()  # type: ignore[attr-defined]  # once only
        assert work.running == 0
