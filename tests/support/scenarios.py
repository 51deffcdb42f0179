"""The quota scenario objects (testkit/scenarios.py) plus the engine the tests run them through."""

from __future__ import annotations

from typing import Any

import yaml

from extender.service import ExtenderConfig, SchedulingService
from extender.state.sources import SnapshotSource
from testkit.scenarios import (
    FLAVOR_LABEL,
    RESOURCE,
    cluster_queue,
    flavor,
    gpu_pod,
    kueue_config,
    local_queue,
    nodes_in_flavor,
    templates,
)

__all__ = [
    "FLAVOR_LABEL",
    "RESOURCE",
    "cluster_queue",
    "engine_for",
    "flavor",
    "gpu_pod",
    "kueue_config",
    "local_queue",
    "nodes_in_flavor",
    "templates",
]


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
