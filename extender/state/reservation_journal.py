"""The reservation ledger on disk, so a restarted extender keeps the quota its previous process promised.

kube-scheduler keeps what our filter let through in its own memory: the pod is assumed, its claims' allocation
sits in the DynamicResources plugin's assume cache, and only the binding cycle writes them to the API server
(status.nominatedNodeName, then PreBind's claim status with allocation and reservedFor, then the binding;
pkg/scheduler/schedule_one.go bindingCycle, plugins/dynamicresources bindClaim). Those writes go through the
scheduler's rate-limited client and can lag the verdict by seconds. An extender killed in that window and
restarted next to the same kube-scheduler (the sidecar restarting in its pod) would rebuild its view from the
API server, find none of it, and give the same quota again. The journal closes that window: every change of
the ledger is written (whole, to a temporary file renamed over the old one, so a reader never sees half of
it), and a process starting on the same listen address loads what is still within its TTL. A SIGKILL cannot
lose a completed write (the page cache outlives the process); a machine crash can, but takes kube-scheduler's
memory with it. Expiry instants are stored as wall-clock time: the ledger's monotonic clock does not survive
a restart.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import orjson

from extender.state.reservations import QuotaKey, Reservation

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


def default_journal_path(listen: str) -> Path:
    """Where `reservations.journal: auto` keeps the journal: the temporary directory (the deployment mounts an
    emptyDir there, which outlives a container restart), one file per listen address, because the process
    kube-scheduler reaches at that address is the one whose promises it holds."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", listen) or "default"
    return Path(tempfile.gettempdir()) / f"dra-extender-reservations-{safe}.json"


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
    def __init__(self, path: Path | str, *, wall_clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._wall_clock = wall_clock
        self._failing = False
        self.writes = 0

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
        try:
            document = orjson.loads(data)
            if document.get("version") != FORMAT_VERSION:
                raise ValueError(f"unknown format version {document.get('version')!r}")
            now = self._wall_clock()
            loaded = []
            for item in document["reservations"]:
                remaining = float(item["expiresAt"]) - now
                if remaining <= 0:
                    continue
                charges = {
                    (str(cq), str(flavor), str(resource)): Fraction(str(amount))
                    for cq, flavor, resource, amount in item["charges"]
                }
                loaded.append(
                    JournaledReservation(
                        str(item["podUID"]),
                        str(item["pod"]),
                        str(item["clusterQueue"]),
                        charges,
                        remaining,
                        str(item.get("node", "")),
                        bool(item.get("seen", False)),
                        str(item.get("workload", "")),
                    )
                )
            return loaded
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            log.warning("ignoring the reservation journal %s: %s", self.path, error)
            return []

    def save(self, reservations: Iterable[Reservation], monotonic_now: float) -> None:
        """Write the whole ledger (`monotonic_now`: the ledger's clock, to turn expiries into wall time)."""
        offset = self._wall_clock() - monotonic_now
        document: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "reservations": [
                {
                    "podUID": r.pod_uid,
                    "pod": r.pod_key,
                    "clusterQueue": r.cluster_queue,
                    "charges": [
                        [cq, flavor, resource, str(amount)] for (cq, flavor, resource), amount in r.charges.items()
                    ],
                    "expiresAt": r.expires + offset,
                    "node": r.node,
                    "seen": r.seen,
                    "workload": r.workload,
                }
                for r in reservations
            ],
        }
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            temporary.write_bytes(orjson.dumps(document))
            os.replace(temporary, self.path)
        except OSError as error:
            if not self._failing:  # one line per outage, not one per filter
                log.warning("cannot write the reservation journal %s: %s (a restart may forget them)", self.path, error)
            self._failing = True
            return
        if self._failing:
            log.info("reservation journal %s written again", self.path)
        self._failing = False
        self.writes += 1
