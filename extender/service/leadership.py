"""Whether this extender is beside the leading kube-scheduler, and so may hold quota for what it lets through.

Two scheduler replicas, each with its own extender, elect a leader on a Lease (kube/scheduler_lease.py); only
the leader schedules. Each extender keeps its own reservation ledger. While the leader's extender reserves, a
second one reserving too would count the same ClusterQueue's quota from two ledgers that never see each other:
an old leader's kube-scheduler still running cycles after its Lease passed on (client-go's leaderelection stops
it only once renewDeadline has gone by without a renewal, tools/leaderelection/leaderelection.go renew) would
have its extender hold and admit against a view without the new leader's reservations. So once the Lease
shows another holder, filter refuses pods it would have to reserve for, with the reason in its Error (kube-
scheduler retries them with backoff, pkg/scheduler/schedule_one.go findNodesThatPassExtenders, as for an
unsynced view): the new leader's extender is then the only one counting.

The holder is `<hostname>_<uuid>` (cmd/kube-scheduler/app/options/options.go); a sidecar shares its pod's
hostname, so `leader.identity` defaults to this machine's. When the extender cannot tell (the Lease not read
yet, unreadable for longer than `stale_seconds`, absent because leader election is off, or free), it reserves
as a single scheduler's extender does: refusing then would stop scheduling for want of an answer.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Protocol

from extender.kube.scheduler_lease import LeaseReading


def holder_host(holder: str) -> str:
    """The hostname part of a kube-scheduler's holderIdentity (`<hostname>_<uuid>`; a hostname has no `_`)."""
    return holder.rsplit("_", 1)[0] if "_" in holder else holder


def not_leading(reading: LeaseReading | None, identity: str, lease: str, now: float, stale_seconds: float) -> str:
    """Why this extender must not reserve ("" when it may): another kube-scheduler holds `lease`."""
    if reading is None or not reading.exists or not reading.holder or not identity:
        return ""
    if now - reading.read_at > stale_seconds:
        return ""
    if holder_host(reading.holder) == identity:
        return ""
    return (
        f"the kube-scheduler beside this extender ({identity}) does not lead: {reading.holder} holds the Lease "
        f"{lease}; the leader's extender counts the quota"
    )


class LeaseReader(Protocol):
    """kube/scheduler_lease.py SchedulerLease, as the service needs it."""

    @property
    def lease(self) -> str: ...

    def start(self) -> None: ...

    def read_once(self) -> None: ...

    def reading(self) -> LeaseReading | None: ...


# A refusal reads the Lease again first when the reading is older than this: a new leader's kube-scheduler
# starts scheduling the moment it holds the Lease, before the once-a-second read has seen it.
REREAD_BEFORE_REFUSING_SECONDS = 0.2


class Leadership:
    """`leadership()` is why this extender must not reserve now ("" when it may). Started with the service (in
    the process that serves: gunicorn's worker, after the fork)."""

    def __init__(
        self,
        reader: LeaseReader,
        identity: str = "",
        *,
        stale_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader = reader
        self.identity = identity or socket.gethostname()
        self.stale_seconds = stale_seconds
        self._clock = clock

    def start(self) -> None:
        self.reader.start()

    def __call__(self) -> str:
        reading = self.reader.reading()
        why = not_leading(reading, self.identity, self.reader.lease, self._clock(), self.stale_seconds)
        if why and reading is not None and self._clock() - reading.read_at > REREAD_BEFORE_REFUSING_SECONDS:
            self.reader.read_once()
            why = not_leading(
                self.reader.reading(), self.identity, self.reader.lease, self._clock(), self.stale_seconds
            )
        return why
