"""Background threads step aside while kube-scheduler waits for a verb.

Why: filter and prioritize run inside kube-scheduler's serial scheduling cycle (pkg/scheduler/schedule_one.go
findNodesThatPassExtenders and prioritizeNodes wait for the extender's answer), and the extender's own watch
threads and view keeper share one interpreter lock with them. During a burst each pod's binding brings about a
dozen watch events (its claim allocated and reserved, the pod bound, their status writes), and they arrive
while the next pod's filter runs: a watch thread woken by its socket takes the interpreter whenever the verb's
thread makes a system call (reading the request, writing the headers, then the body) and keeps it for a whole
event.

What it does: a verb marks itself running (`begin` / `end`, around the work kube-scheduler waits for); the
background threads call `step_aside` before each unit of their work (a watch event, a catch-up of the quota
view; state/pacing.py declares the call, `foreground_for` installs this pacing on the store) and wait, without
the interpreter lock, until no verb runs. Never for long: once verbs have been running without a gap for
`max_hold_seconds` (concurrent callers that overlap, or one very slow verb), background work proceeds anyway,
so the cluster view cannot fall behind without bound. The events wait in the socket meanwhile; nothing is lost
or reordered, only applied a few milliseconds later (the API server stays the source of truth, the verbs bring
the view up to date themselves under the reservation lock).

A request waiting to be read counts too. The interpreter lock is handed over on request only: a thread woken by
its socket waits up to the switch interval (5 ms) unless the holder blocks, so a verb's request that arrives
while a watch thread works through buffered events waits for them before a line of ours runs, and the verb's
mark above comes too late to help. So the server tells which sockets a verb's next request may arrive on
(`expect_requests`: the kept-alive connection a pool thread lingers on, transport/server.py), and `step_aside`
also waits, without the interpreter lock, when one of them has bytes waiting (one epoll_wait of no timeout),
until the thread that will serve it has marked the verb running (`begin`, first thing after it wakes), or
ARRIVAL_WAIT_SECONDS at most.
"""

from __future__ import annotations

import contextlib
import select
import threading
import time
from collections.abc import Iterator

from extender.state.store import ClusterStore

# Longer than one verb takes even on a large cluster: past it, watch events are not held.
MAX_HOLD_SECONDS = 0.05
# How long a background thread waits for the thread that will serve a waiting request to mark itself running:
# the switch interval, the longest the request would otherwise wait for the interpreter.
ARRIVAL_WAIT_SECONDS = 0.005


class ForegroundWork:
    """Counts the verbs running; background threads wait for a gap between them (bounded)."""

    __slots__ = (
        "_begun",
        "_expected",
        "_idle",
        "_probe",
        "_running",
        "_since",
        "max_hold_seconds",
        "stepped_aside",
        "stepped_aside_for_arrivals",
        "waited_seconds",
    )

    def __init__(self, max_hold_seconds: float = MAX_HOLD_SECONDS) -> None:
        self.max_hold_seconds = max_hold_seconds
        self._idle = threading.Condition(threading.Lock())
        self._running = 0
        self._since = 0.0  # when the running verbs last went from none to some
        self._begun = 0  # verbs begun so far
        self._expected = 0  # sockets registered in _probe
        self._probe: select.epoll | None = None  # made on first use: in the worker after the fork (Linux only)
        self.stepped_aside = 0  # times a background thread waited (metrics)
        self.stepped_aside_for_arrivals = 0  # times one waited for a request waiting to be read (metrics)
        self.waited_seconds = 0.0

    def begin(self) -> None:
        with self._idle:
            if not self._running:
                self._since = time.monotonic()
            self._running += 1
            self._begun += 1
            self._idle.notify_all()  # a background thread waiting for an arrival's verb to begin

    def mark(self) -> RunningMark:
        """`begin` now, `end` through the returned mark, once however often it is ended."""
        return RunningMark(self)

    @contextlib.contextmanager
    def expect_requests(self, fd: int) -> Iterator[None]:
        """Meanwhile a verb's request may arrive on the socket `fd`: background threads hold off once it has
        bytes waiting. The caller, woken by them, calls `begin` before anything else. Without epoll, nothing."""
        probe = self._probe
        if probe is None:
            if not hasattr(select, "epoll"):
                yield
                return
            with self._idle:
                if self._probe is None:
                    self._probe = select.epoll()
                probe = self._probe
        try:
            probe.register(fd, select.EPOLLIN)
        except OSError:  # not a socket epoll can watch: the request is served without the announcement
            yield
            return
        with self._idle:
            self._expected += 1
        try:
            yield
        finally:
            with self._idle:
                self._expected -= 1
            with contextlib.suppress(OSError):  # closed meanwhile (shut by the deadline watchdog)
                probe.unregister(fd)

    def _request_waiting(self) -> bool:
        probe = self._probe
        if not self._expected or probe is None:
            return False
        try:
            return bool(probe.poll(0))
        except OSError:
            return False

    def end(self) -> None:
        with self._idle:
            self._running -= 1
            if not self._running:
                self._idle.notify_all()

    @property
    def running(self) -> int:
        return self._running

    def step_aside(self) -> None:
        """Wait until no verb runs, or until verbs have run without a gap for max_hold_seconds; first, while a
        verb's request waits to be read, until its verb runs (ARRIVAL_WAIT_SECONDS at most). The common case (no
        verb running, no socket expected) reads two integers and takes no lock."""
        if not self._running:
            begun = self._begun  # (read first: the probe's system call lets the verb's thread run)
            if not self._request_waiting():
                return
            with self._idle:
                started = time.monotonic()
                if not self._idle.wait_for(lambda: self._begun != begun, ARRIVAL_WAIT_SECONDS):
                    return
                self.stepped_aside_for_arrivals += 1
                self.waited_seconds += time.monotonic() - started
        with self._idle:
            left = self._since + self.max_hold_seconds - time.monotonic()
            if not self._running or left <= 0:
                return
            started = time.monotonic()
            self._idle.wait_for(lambda: not self._running, left)
            self.stepped_aside += 1
            self.waited_seconds += time.monotonic() - started


class RunningMark:
    """One verb marked running (`ForegroundWork.mark`) until `end`, which ends it once however often it is called:
    the server's wake-up mark (transport/server.py) and a verb's written answer (transport/verb_fast_path.py)
    each end theirs from more than one path (answered, failed, closed)."""

    __slots__ = ("_work",)

    def __init__(self, work: ForegroundWork) -> None:
        work.begin()
        self._work: ForegroundWork | None = work

    def end(self) -> None:
        work, self._work = self._work, None
        if work is not None:
            work.end()


def foreground_for(store: ClusterStore) -> ForegroundWork:
    """The ForegroundWork the store's background threads step aside for: the one installed already (every app
    built around one service shares it, as do the server's direct path and the metrics), else a new one,
    installed as the store's pacing (state/pacing.py)."""
    pacing = store.pacing
    if isinstance(pacing, ForegroundWork):
        return pacing
    work = ForegroundWork()
    store.pacing = work
    return work
