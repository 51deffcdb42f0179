"""The reservation ledger on disk, so a restarted extender keeps the quota its previous process promised.

kube-scheduler keeps what our filter let through in its own memory: the pod is assumed, its claims' allocation
sits in the DynamicResources plugin's assume cache, and only the binding cycle writes them to the API server
(status.nominatedNodeName, then PreBind's claim status with allocation and reservedFor, then the binding;
pkg/scheduler/schedule_one.go bindingCycle, plugins/dynamicresources bindClaim). Those writes go through the
scheduler's rate-limited client and can lag the verdict by seconds. An extender killed in that window and
restarted next to the same kube-scheduler (the sidecar restarting in its pod) would rebuild its view from the
API server, find none of it, and give the same quota again. The journal closes that window: every change of
the ledger is appended as one JSON line (a reservation held or replaced, or let go) with one write() on an
O_APPEND descriptor before the verb answers, and a process starting on the same listen address replays it and
takes over what is still within its TTL. The file's first line names whose promises they are (JournalIdentity:
the cluster, by its kube-system Namespace's UID, which survives an API server's address being reused and is
new in a re-created cluster; the kube-scheduler served, by its leader-election Lease; the extender's config
hash): a journal of another cluster or scheduler is ignored, with a log line. Appending keeps a change O(1)
whatever the ledger holds, where rewriting the whole ledger would cost O(reservations) per filter; the file is
compacted (the live reservations written to a temporary file renamed over it) at start and whenever it holds
more than twice the live records plus COMPACT_SLACK lines. A SIGKILL cannot lose a completed write (the page
cache outlives the process); a torn last line is skipped on replay. A machine crash can lose writes, but takes
kube-scheduler's memory with it. Expiry instants are stored as wall-clock time: the ledger's monotonic clock
does not survive a restart.

The same file keeps the bookings (state/bookings.py: the queue and flavors each pod and each allocated claim was
charged in), as "book" and "unbook" lines: they outlive their reservations (a bound pod's charge stays in the
flavor it was booked in) and are replayed by `load` into `loaded_bookings`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import orjson

from extender.state.bookings import Booking
from extender.state.reservations import QuotaKey, Reservation

log = logging.getLogger(__name__)

FORMAT_VERSION = 3  # 3: the header names the cluster, the scheduler and the config (JournalIdentity)
COMPACT_SLACK = 512  # appended lines beyond twice the live records before the file is rewritten


def default_journal_path(listen: str, cluster: str = "") -> Path:
    """Where `reservations.journal: auto` keeps the journal: the temporary directory (the deployment mounts an
    emptyDir there, which outlives a container restart), one file per listen address, because the process
    kube-scheduler reaches at that address is the one whose promises it holds, and per cluster (the API
    server's address): an extender of another cluster that reuses the port on the same machine (test clusters
    side by side) must not take over promises made about pods it has never seen."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", listen) or "default"
    if cluster:
        safe += "-" + (re.sub(r"[^A-Za-z0-9_.-]", "_", cluster.removeprefix("https://").removeprefix("http://")))
    return Path(tempfile.gettempdir()) / f"dra-extender-reservations-{safe}.json"


@dataclass(frozen=True, slots=True)
class JournalIdentity:
    """Whose promises a journal holds. `cluster`: the kube-system Namespace's UID (the API server's identity:
    the name a `kubectl get ns kube-system` shows is the same everywhere, the UID is not); `scheduler`: the
    kube-scheduler's leader-election Lease (namespace/name), which names the scheduler deployment whose pods the
    reservations were promised to; `config`: a hash of the extender's configuration, recorded so a log line says
    when the promises were made under another one (they are restored all the same: they are what kube-scheduler
    may still be binding). Empty fields are unknown and match anything."""

    cluster: str = ""
    scheduler: str = ""
    config: str = ""

    def header(self) -> dict[str, Any]:
        return {"version": FORMAT_VERSION, "cluster": self.cluster, "scheduler": self.scheduler, "config": self.config}

    def foreign(self, header: dict[str, Any]) -> str:
        """Why a journal with `header` is not ours ("" when it is)."""
        for field_name, ours in (("cluster", self.cluster), ("scheduler", self.scheduler)):
            theirs = str(header.get(field_name, ""))
            if ours and theirs != ours:
                return f"it belongs to {field_name} {theirs or '(unrecorded)'}, this extender serves {ours}"
        return ""


@dataclass(frozen=True, slots=True)
class JournaledReservation:
    """A reservation as loaded: its TTL left, in seconds (the new process puts it on its own clock)."""

    pod_uid: str
    pod_key: str
    cluster_queue: str
    charges: dict[QuotaKey, Fraction]
    remaining_seconds: float
    node: str
    seen: bool
    workload: str = ""


class ReservationJournal:
    """Implements state/reservations.py's ReservationSink. Writes happen under the ledger's lock (in order)."""

    def __init__(
        self,
        path: Path | str,
        *,
        wall_clock: Callable[[], float] = time.time,
        identity: JournalIdentity | None = None,
    ) -> None:
        self.path = Path(path)
        self.identity = identity if identity is not None else JournalIdentity()
        self._wall_clock = wall_clock
        self._failing = False
        self._fd: int | None = None
        self._live: dict[str, dict[str, Any]] = {}  # pod uid -> its last record, for compaction
        self._lines = 0
        self.writes = 0
        self.loaded_bookings: list[tuple[str, str, Booking]] = []  # (kind, uid, booking) replayed by `load`

    # --- the previous process's records -------------------------------------------------------------------

    def load(self) -> list[JournaledReservation]:
        """What the previous process held and has not expired; nothing (with a log line) for an absent,
        unreadable or foreign file: the journal is a safety net, never a reason not to start."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as error:
            log.warning("cannot read the reservation journal %s: %s", self.path, error)
            return []
        lines = data.split(b"\n")
        try:
            header = orjson.loads(lines[0])
            if not isinstance(header, dict) or header.get("version") != FORMAT_VERSION:
                raise ValueError(f"unknown format {lines[0][:80]!r}")
        except ValueError as error:
            log.warning("ignoring the reservation journal %s: %s", self.path, error)
            return []
        foreign = self.identity.foreign(header)
        if foreign:
            log.warning("ignoring the reservation journal %s: %s", self.path, foreign)
            return []
        if self.identity.config and header.get("config") != self.identity.config:
            log.info("the reservation journal %s was written under another extender configuration", self.path)
        return self._replay(lines[1:])

    def _replay(self, lines: list[bytes]) -> list[JournaledReservation]:
        """The records still held at the end of the file, and not expired."""
        records: dict[str, dict[str, Any]] = {}
        bookings: dict[tuple[str, str], dict[str, Any]] = {}
        skipped = 0
        for line in lines:
            if not line:
                continue
            try:
                record = orjson.loads(line)
                if record["op"] == "book":
                    bookings[(str(record["kind"]), str(record["uid"]))] = record
                elif record["op"] == "unbook":
                    bookings.pop((str(record["kind"]), str(record["uid"])), None)
                elif record["op"] == "put":
                    records[str(record["podUID"])] = record
                else:
                    records.pop(str(record["podUID"]), None)
            except (ValueError, KeyError, TypeError):
                skipped += 1  # a torn last line (killed mid-write) or a foreign one
        if skipped:
            log.warning("skipped %d unreadable lines of the reservation journal %s", skipped, self.path)
        self.loaded_bookings = []
        for (kind, uid), record in bookings.items():
            try:
                booking = Booking(
                    str(record["clusterQueue"]),
                    tuple((str(resource), str(flavor)) for resource, flavor in record["flavors"]),
                    str(record.get("key", "")),
                    str(record.get("workload", "")),
                )
            except (ValueError, KeyError, TypeError):
                log.warning("skipped an unreadable booking in the journal %s", self.path)
                continue
            self.loaded_bookings.append((kind, uid, booking))
            self._live[f"{kind}:{uid}"] = record  # kept through the compaction at the first write
        now = self._wall_clock()
        loaded = []
        for record in records.values():
            try:
                remaining = float(record["expiresAt"]) - now
                if remaining <= 0:
                    continue
                charges = {
                    (str(cq), str(flavor), str(resource)): Fraction(str(amount))
                    for cq, flavor, resource, amount in record["charges"]
                }
                loaded.append(
                    JournaledReservation(
                        str(record["podUID"]),
                        str(record["pod"]),
                        str(record["clusterQueue"]),
                        charges,
                        remaining,
                        str(record.get("node", "")),
                        bool(record.get("seen", False)),
                        str(record.get("workload", "")),
                    )
                )
            except (ValueError, KeyError, TypeError, ZeroDivisionError):
                log.warning("skipped an unreadable reservation in the journal %s", self.path)
        return loaded

    # --- ReservationSink ----------------------------------------------------------------------------------

    def put(self, reservation: Reservation, monotonic_now: float) -> None:
        record = {
            "op": "put",
            "podUID": reservation.pod_uid,
            "pod": reservation.pod_key,
            "clusterQueue": reservation.cluster_queue,
            "charges": [
                [cq, flavor, resource, str(amount)] for (cq, flavor, resource), amount in reservation.charges.items()
            ],
            "expiresAt": reservation.expires + self._wall_clock() - monotonic_now,
            "node": reservation.node,
            "seen": reservation.seen,
            "workload": reservation.workload,
        }
        self._live[reservation.pod_uid] = record
        self._append(record)

    def delete(self, pod_uid: str) -> None:
        if self._live.pop(pod_uid, None) is not None:
            self._append({"op": "delete", "podUID": pod_uid})

    # --- BookingSink ------------------------------------------------------------------------------------------

    def book(self, kind: str, uid: str, booking: Booking) -> None:
        record = {
            "op": "book",
            "kind": kind,
            "uid": uid,
            "key": booking.key,
            "clusterQueue": booking.cluster_queue,
            "flavors": [list(pair) for pair in booking.flavors],
            "workload": booking.workload,
        }
        self._live[f"{kind}:{uid}"] = record
        self._append(record)

    def unbook(self, kind: str, uid: str) -> None:
        if self._live.pop(f"{kind}:{uid}", None) is not None:
            self._append({"op": "unbook", "kind": kind, "uid": uid})

    # --- the file -----------------------------------------------------------------------------------------

    def _append(self, record: dict[str, Any]) -> None:
        if self._fd is None or self._lines > 2 * len(self._live) + COMPACT_SLACK:
            self.compact()
            return
        self._write(orjson.dumps(record) + b"\n")
        self._lines += 1

    def compact(self) -> None:
        """Rewrite the file as the live records only (temporary file renamed over it), and append from there."""
        body = b"".join(orjson.dumps(record) + b"\n" for record in self._live.values())
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            temporary.write_bytes(orjson.dumps(self.identity.header()) + b"\n" + body)
            os.replace(temporary, self.path)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except OSError as error:
            self._failed(error)
            return
        if self._fd is not None:
            os.close(self._fd)
        self._fd = fd
        self._lines = len(self._live)
        self._succeeded()

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        try:
            os.write(self._fd, data)
        except OSError as error:
            self._failed(error)
            return
        self._succeeded()

    def _failed(self, error: OSError) -> None:
        if not self._failing:  # one line per outage, not one per filter
            log.warning("cannot write the reservation journal %s: %s (a restart may forget them)", self.path, error)
        self._failing = True
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None  # the next change compacts: the file is whole again once writing works

    def _succeeded(self) -> None:
        if self._failing:
            log.info("reservation journal %s written again", self.path)
        self._failing = False
        self.writes += 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
