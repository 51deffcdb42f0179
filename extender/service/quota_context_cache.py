"""The quota context (decisions/quota/context.py: ClusterQueues, cohorts, flavors, LocalQueues, the device class
mappings) of the newest snapshot, rebuilt only when what it is built from changed.

A snapshot shares a kind's dict with the one before unless an object of that kind changed (state/snapshot.py), so
the very dicts the context was built from mean the same objects: they are held, not their id()s, which a freed
dict would lend to a new one. Read by every verb and every page, from any thread: its own lock, never the
reservation lock (the web view's pages take a context without waiting for a verb)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from operator import is_

from extender.decisions.quota.context import QUOTA_KINDS, QuotaContext, build_quota_context
from extender.service.config import ExtenderConfig
from extender.state.snapshot import ClusterSnapshot

_QUOTA_KINDS_IN_ORDER = tuple(sorted(QUOTA_KINDS))


class QuotaContextCache:
    def __init__(self, config: ExtenderConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        # Under _lock, written by get(): the context, the quota kinds' dicts of the snapshot it was built from,
        # and whether Kueue was on then.
        self._context: QuotaContext | None = None
        self._sources: list[Mapping[str, object]] = []
        self._kueue_enabled = False

    def get(self, snapshot: ClusterSnapshot) -> QuotaContext:
        sources = [snapshot.objects[kind] for kind in _QUOTA_KINDS_IN_ORDER]
        with self._lock:
            if (
                self._context is None
                or snapshot.kueue_enabled != self._kueue_enabled
                or not all(map(is_, sources, self._sources))
            ):
                self._context = build_quota_context(
                    snapshot, self._config.quota.device_class_mappings, self._config.kueue_config
                )
                self._sources = sources
                self._kueue_enabled = snapshot.kueue_enabled
            return self._context
