"""How the store's background threads yield to the work kube-scheduler waits for.

The watch threads (state/live/watcher.py) and the service's view keeper call `step_aside` before each unit of
their work. What it waits for belongs to the server (transport/foreground.py ForegroundWork: the verbs running
and the requests waiting to be read); state only declares the call, and a store nobody serves from paces
nothing.
"""

from __future__ import annotations

from typing import Protocol


class BackgroundPacing(Protocol):
    """What a background thread asks before a unit of its work."""

    def step_aside(self) -> None:
        """Return once the thread may go on (at once when nothing it should yield to runs)."""
        ...


class Unpaced:
    """Pacing that never waits: a store no server answers from (the CLI's explain, the kubectl plugin, tests)."""

    __slots__ = ()

    def step_aside(self) -> None:
        return None


UNPACED = Unpaced()
