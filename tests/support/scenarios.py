"""The engine the tests run their scenario objects through (the objects' builders: testkit/scenarios.py and
testkit/builders.py)."""

from __future__ import annotations

from typing import Any

import yaml

from extender.service import ExtenderConfig, SchedulingService
from extender.state.sources import SnapshotSource


def engine_for(
    objects: list[dict[str, Any]],
    config: ExtenderConfig | None = None,
    clock: Any = None,
    *,
    keep_view_current: bool = False,
) -> SchedulingService:
    text = yaml.safe_dump_all(objects)
    kwargs = {"clock": clock} if clock is not None else {}
    engine = SchedulingService(
        SnapshotSource(text=text), config or ExtenderConfig(), keep_view_current=keep_view_current, **kwargs
    )
    engine.start()
    return engine
