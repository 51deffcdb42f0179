"""The collector paused during bulk loads (state/collector.py): paused while any load runs, on whichever thread,
resumed when the last ends, and a large load's objects frozen out of later collections."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from extender.state import collector as bulk
from extender.state.store import ClusterStore
from testkit import builders as b


@pytest.fixture(autouse=True)
def collector_running() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()
    gc.unfreeze()


def test_a_replace_runs_with_the_collector_paused_and_resumes_it() -> None:
    seen: list[bool] = []

    def pods() -> Iterator[dict[str, Any]]:
        for index in range(3):
            seen.append(gc.isenabled())
            yield b.pod(f"p-{index}", "ns")

    store = ClusterStore()
    assert store.replace("Pod", pods()) == []
    assert seen == [False, False, False]
    assert gc.isenabled()
    assert len(store.snapshot().pods) == 3


def test_the_collector_stays_paused_until_the_last_concurrent_load_ends() -> None:
    first_inside, release_first = threading.Event(), threading.Event()

    def slow_load() -> None:
        with bulk.bulk_load():
            first_inside.set()
            release_first.wait(10)

    thread = threading.Thread(target=slow_load)
    thread.start()
    assert first_inside.wait(10)
    with bulk.bulk_load():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other load still runs
    release_first.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    with bulk.bulk_load():
        pass
    assert not gc.isenabled()


def test_only_a_large_load_is_frozen() -> None:
    before = gc.get_freeze_count()
    with bulk.bulk_load():
        bulk.loaded(bulk.FREEZE_MIN_OBJECTS - 1)
    assert gc.get_freeze_count() == before  # a small relist: its objects stay collectable
    with bulk.bulk_load():
        bulk.loaded(bulk.FREEZE_MIN_OBJECTS)
    assert gc.get_freeze_count() > before
