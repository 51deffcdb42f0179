"""The engine the tests run their scenario objects through (the objects' builders: testkit/scenarios.py and
testkit/builders.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from extender.service import ExtenderConfig, SchedulingService
from extender.state.reservation_journal import ReservationJournal
from extender.state.sources import SnapshotSource


def engine_for(
    objects: list[dict[str, Any]],
    config: ExtenderConfig | None = None,
    clock: Any = None,
    *,
    keep_view_current: bool = False,
    journal: Path | None = None,
) -> SchedulingService:
    """A started service over `objects`. `journal`: the reservation journal's file (state/reservation_journal.py),
    as `serve` keeps it across restarts: a second engine on the same file is the first one restarted."""
    text = yaml.safe_dump_all(objects)
    kwargs = {"clock": clock} if clock is not None else {}
    engine = SchedulingService(
        SnapshotSource(text=text),
        config or ExtenderConfig(),
        keep_view_current=keep_view_current,
        journal=ReservationJournal(journal) if journal is not None else None,
        **kwargs,
    )
    engine.start()
    return engine
