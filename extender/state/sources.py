"""Where the cluster model comes from: a snapshot file, or a live API server.

Every source fills a ClusterStore and reports its health the same way, so the rest of the extender does not
know or care which one it runs on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from extender.state.snapshot_file import load_snapshot_file, load_snapshot_text
from extender.state.store import ClusterStore


@dataclass(frozen=True, slots=True)
class SourceHealth:
    ready: bool  # every resource listed at least once and not stale beyond the grace period
    message: str
    # resource (e.g. "resourceslices") -> seconds since the last list, event or bookmark
    freshness_seconds: Mapping[str, float] = field(default_factory=dict)
    # the longest any listed collection has been without a watch (reconnecting, relisting): events may be missing
    disconnected: tuple[str, float] = ("", 0.0)


class ClusterSource(Protocol):
    description: str

    def start(self, store: ClusterStore) -> None: ...

    def stop(self) -> None: ...

    def health(self) -> SourceHealth: ...


class SnapshotSource:
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
