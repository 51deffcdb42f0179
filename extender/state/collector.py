"""The cyclic garbage collector's policy for a process that holds a large, long-lived cluster model.

A 5000-node cluster is millions of small objects. CPython's cyclic collector would rescan all of them in every
full collection, which shows up as 100+ ms pauses in the middle of filter requests. The model holds no reference
cycles worth collecting, so what is loaded is moved to the permanent generation (gc.freeze) and young-generation
collections are made rarer (`tune_for_large_heap`).

Bulk loads run with the collector paused (`bulk_load`).

An initial list at 65,000 nodes is tens of millions of small objects (decoded JSON, then the parsed model), all
alive until the list is parsed. CPython's collector counts them as allocations and runs its collections over
them; the full ones walk every object the process holds, several seconds each at that size, and they come
more often the larger the load. Measured with bench.sync_bench's load at 65,000 nodes / 300,000 pods: 59 s with
the collector running, 47 s paused. Nothing a list makes needs the collector: decoded JSON and the parsed model
hold no reference cycles and are freed by reference counting. So a bulk load runs with the collector paused,
and at the end of a large one what exists is moved to the permanent generation (gc.freeze, O(1)), where later
collections never scan it again (the model outlives every filter call). A small list
(a relist of a few objects) is not frozen: the collector resumes over it, and whatever cyclic garbage the process
made meanwhile stays collectable.

Several watchers list at once, each on its own thread: the collector stays paused until the last of them is done.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def tune_for_large_heap() -> None:
    gc.set_threshold(50_000, 50, 100)


def freeze_loaded_state() -> None:
    """Call after a bulk load made outside `bulk_load` (a benchmark's store built event by event, the start of a
    service): what exists now is not scanned again. Only the young generations are collected first: a bulk load
    leaves almost no cyclic garbage (decoded JSON is freed by reference counting), and a full collection walks
    the whole model (about 4 s at 65,000 nodes) to find it."""
    gc.collect(1)
    gc.freeze()


_lock = threading.Lock()
_loads_running = 0  # bulk loads in progress, across threads (under _lock)
_collector_was_enabled = True  # whether the first of them found the collector enabled (under _lock)
_objects_loaded = 0  # objects the loads in progress parsed (under _lock)
FREEZE_MIN_OBJECTS = 10_000  # loads of fewer objects are not frozen


@contextmanager
def bulk_load() -> Iterator[None]:
    """Pause the cyclic collector for the duration (nested and concurrent uses count); when the last load in
    progress ends, freeze what exists if the loads parsed FREEZE_MIN_OBJECTS or more (`loaded`), and resume the
    collector if it was running."""
    global _loads_running, _collector_was_enabled, _objects_loaded
    with _lock:
        if _loads_running == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _loads_running += 1
    try:
        yield
    finally:
        with _lock:
            _loads_running -= 1
            if _loads_running == 0:
                if _objects_loaded >= FREEZE_MIN_OBJECTS:
                    gc.freeze()
                _objects_loaded = 0
                if _collector_was_enabled:
                    gc.enable()


def loaded(count: int) -> None:
    """A load in progress parsed `count` objects."""
    global _objects_loaded
    with _lock:
        _objects_loaded += count
