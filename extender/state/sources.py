"""Where the cluster model comes from: a snapshot file, or a live API server.

Every source fills a ClusterStore and reports its health the same way, so the rest of the extender does not
know or care which one it runs on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from extender.state.snapshot_file import load_snapshot_file, load_snapshot_text
from extender.state.store import ClusterStore

if TYPE_CHECKING:
    from kubernetes.client import Configuration


@dataclass(frozen=True, slots=True)
class SourceHealth:
    ready: bool  # every resource listed at least once and not stale beyond the grace period
    message: str
    # resource (e.g. "resourceslices") -> seconds since the last list, event or bookmark
    freshness_seconds: Mapping[str, float] = field(default_factory=dict)
    # the longest any listed collection has been without a watch (reconnecting, relisting): events may be missing
    disconnected: tuple[str, float] = ("", 0.0)


class ClusterSource(Protocol):
    """What the service and transport ask of a source, each by name (so mypy checks every use):

    - description: names the cluster in messages ("live cluster at https://...", "snapshot FILE");
    - follows_changes: the store changes under the verbs (a claim a pod names may arrive after the pod:
      service/service.py await_named_claims waits for it);
    - api_config: the API client configuration of a live source (the diagnostics' TokenReviews and the CLI's
      journal identity use its API server), None otherwise;
    - start/stop/health: fill the store and say how current it is (readiness, freshness, broken watches);
    - ready_for_verdicts: a cheap True when health() would say ready, checked on every verb call; False only
      means "ask health()";
    - liveness_problem: why only a restart would bring the view back ("" when nothing would), for /livez;
    - stats_dicts: per watched collection, the watch's counters, for /metrics.
    """

    description: str
    follows_changes: bool

    @property
    def api_config(self) -> Configuration | None: ...

    def start(self, store: ClusterStore) -> None: ...

    def stop(self) -> None: ...

    def health(self) -> SourceHealth: ...

    def ready_for_verdicts(self, grace_seconds: float) -> bool: ...

    def liveness_problem(self) -> str: ...

    def stats_dicts(self) -> dict[str, dict[str, Any]]: ...


class SourceWithoutWatches:
    """The capabilities of a source that runs no watches (a snapshot file; a store a test or a benchmark fills
    itself): no API server, no per-collection counters, nothing that can die, and readiness said by health()."""

    description = ""
    follows_changes = False
    api_config: Configuration | None = None

    def ready_for_verdicts(self, grace_seconds: float) -> bool:
        return False

    def liveness_problem(self) -> str:
        return ""

    def stats_dicts(self) -> dict[str, dict[str, Any]]:
        return {}


class SnapshotSource(SourceWithoutWatches):
    """A file (or text) loaded once. Always ready; nothing changes unless the extender itself reserves."""

    def __init__(self, path: str | Path | None = None, *, text: str | None = None, description: str = "") -> None:
        self._path = path
        self._text = text
        self.description = description or (f"snapshot {path}" if path else "inline snapshot")
        self._loaded_at = 0.0

    def start(self, store: ClusterStore) -> None:
        if self._text is not None:
            load_snapshot_text(self._text, store)
        else:
            assert self._path is not None
            load_snapshot_file(self._path, store)
        self._loaded_at = time.monotonic()

    def stop(self) -> None:
        return None

    def health(self) -> SourceHealth:
        if not self._loaded_at:
            return SourceHealth(False, "snapshot not loaded yet")
        return SourceHealth(True, f"{self.description} loaded")
