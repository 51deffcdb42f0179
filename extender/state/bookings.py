"""Bookings: the ClusterQueue and flavors a pod, or an allocated claim, was charged in when quota was given.

Kueue charges an admitted Workload in the flavors its admission names, for as long as it is admitted, whatever
happens to the pod's labels. For a pod the extender alone governs, the flavor walk of the filter that passed it
chose one flavor per resource group (decisions/quota/decision.py: every passing node is in the chosen flavor), and
its reservation holds the charge there. That choice cannot be re-derived from the node once the pod is bound: a
node can be in several flavors (a labelled flavor and a label-less default one share it), and the first flavor
holding the node is not the one the walk took when that flavor was full. Nor is the queue read from the pod's
labels: a bound pod whose labels change keeps the devices it was given under the queue that charged them.

So the booking is remembered: per pod uid, from the reservation that let it through (held at filter, replaced
when bind confirms the node), and per claim uid, the booking under which the claim was first charged (its
charge stays there for the whole allocation, whoever uses it later). The memory is written to the reservation
journal (state/reservation_journal.py) next to the reservations, so a restarted extender keeps it; a pod or a
claim the view shows gone is forgotten (its entry is kept among the last `recent_limit` gone ones a while, for
the window in which the resourceclaim controller has not pruned or deallocated after it yet).

Why the journal and not an annotation on the pod: the booking is known at filter time, before kube-scheduler's
binding cycle; writing it to the API server would add a write per pod on the scheduling path (and a pods/patch
grant), and a write that failed or lagged would leave the same gap. The journal is per listen address, like
kube-scheduler's own memory of what it assumed. What it cannot cover (a replica taking over with an empty
journal, pods bound before the extender ran) falls back to Kueue's admission, then the pod's labels and the
first flavor holding its node; a claim keeps what it was first charged in from then on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import immutables

from extender.state.reservations import QuotaKey
from extender.state.snapshot import Change, ClusterSnapshot


@dataclass(frozen=True, slots=True)
class Booking:
    cluster_queue: str
    flavors: tuple[tuple[str, str], ...]  # (quota resource, flavor), sorted
    key: str = ""  # namespace/name of the pod or claim, for people and for forgetting it
    workload: str = ""  # the admitted Workload whose hold the charge replaces ("" for none)

    def flavor(self, resource: str) -> str | None:
        for name, flavor in self.flavors:
            if name == resource:
                return flavor
        return None


def booking_of_charges(
    cluster_queue: str, charges: Iterable[QuotaKey], key: str = "", workload: str = ""
) -> Booking | None:
    """The booking a reservation's charges make: the flavor of each resource charged (None when it charges
    nothing, or names another ClusterQueue)."""
    flavors = {resource: flavor for queue, flavor, resource in charges if queue == cluster_queue}
    if not flavors:
        return None
    return Booking(cluster_queue, tuple(sorted(flavors.items())), key, workload)


@dataclass(frozen=True, slots=True)
class BookingView:
    """What the attribution reads: the bookings by pod uid and by claim uid, as of one moment."""

    pods: Mapping[str, Booking] = field(default_factory=dict)
    claims: Mapping[str, Booking] = field(default_factory=dict)


NO_BOOKINGS = BookingView()


class BookingSink(Protocol):
    """Where every booking change goes, in order (the reservation journal)."""

    def book(self, kind: str, uid: str, booking: Booking) -> None: ...

    def unbook(self, kind: str, uid: str) -> None: ...


POD = "pod"
CLAIM = "claim"


class BookingMemory:
    """Thread-safe. `view()` is O(1) (persistent maps); `take_changed()` names the pods and claims whose booking
    changed since it was last called, so the usage index re-attributes only those."""

    def __init__(self, sink: BookingSink | None = None, recent_limit: int = 4096) -> None:
        self._lock = threading.Lock()
        self._maps: dict[str, immutables.Map[str, Booking]] = {POD: immutables.Map(), CLAIM: immutables.Map()}
        self._changed: dict[str, set[str]] = {POD: set(), CLAIM: set()}  # keys (namespace/name)
        self._sink = sink
        self.recent_limit = recent_limit
        self._gone: dict[tuple[str, str], None] = {}  # (kind, uid) forgotten by the view, oldest first

    def book(self, kind: str, uid: str, booking: Booking, *, persist: bool = True, notify: bool = True) -> bool:
        """Remember `booking` for the pod or claim `uid`; whether it changed anything. `persist`: write it to the
        sink (not when restoring from it); `notify`: name it in `take_changed` (not when it records what usage
        already charged)."""
        if not uid:
            return False
        with self._lock:
            current = self._maps[kind].get(uid)
            if current == booking:
                return False
            self._maps[kind] = self._maps[kind].set(uid, booking)
            self._gone.pop((kind, uid), None)
            if notify:
                self._changed[kind].add(booking.key)
                if current is not None and current.key != booking.key:
                    self._changed[kind].add(current.key)
            if persist and self._sink is not None:
                self._sink.book(kind, uid, booking)
            return True

    def book_once(self, kind: str, uid: str, booking: Booking, *, notify: bool = True) -> bool:
        """Remember `booking` unless one is remembered already (a claim keeps its first)."""
        with self._lock:
            if uid in self._maps[kind]:
                return False
        return self.book(kind, uid, booking, notify=notify)

    def forget(self, kind: str, uid: str) -> None:
        """Forget at once (a claim deallocated: its next allocation is booked afresh)."""
        with self._lock:
            booking = self._maps[kind].get(uid)
            if booking is None:
                return
            self._maps[kind] = self._maps[kind].delete(uid)
            self._gone.pop((kind, uid), None)
            self._changed[kind].add(booking.key)
            if self._sink is not None:
                self._sink.unbook(kind, uid)

    def gone(self, kind: str, uids: Iterable[str]) -> None:
        """The view shows these pods or claims gone: forget them once `recent_limit` newer ones are gone too."""
        with self._lock:
            for uid in uids:
                if uid in self._maps[kind] and (kind, uid) not in self._gone:
                    self._gone[(kind, uid)] = None
                    if self._sink is not None:
                        self._sink.unbook(kind, uid)
            while len(self._gone) > self.recent_limit:
                old_kind, old_uid = next(iter(self._gone))
                del self._gone[(old_kind, old_uid)]
                booking = self._maps[old_kind].get(old_uid)
                if booking is not None:
                    self._maps[old_kind] = self._maps[old_kind].delete(old_uid)
                    self._changed[old_kind].add(booking.key)

    def get(self, kind: str, uid: str) -> Booking | None:
        return self._maps[kind].get(uid)

    def view(self) -> BookingView:
        return BookingView(self._maps[POD], self._maps[CLAIM])

    def take_changed(self) -> tuple[set[str], set[str]]:
        """(pod keys, claim keys) whose booking changed since the last call; the caller owns the sets."""
        with self._lock:
            pods, claims = self._changed[POD], self._changed[CLAIM]
            self._changed = {POD: set(), CLAIM: set()}
            return pods, claims

    def __len__(self) -> int:
        return len(self._maps[POD]) + len(self._maps[CLAIM])


def gone_from_view(
    before: ClusterSnapshot | None, after: ClusterSnapshot, changes: Sequence[Change] | None
) -> tuple[list[str], list[str]]:
    """(pod uids the view shows deleted or replaced, claim uids deleted, replaced or deallocated) between two
    snapshots, from the changes between them."""
    pods: list[str] = []
    claims: list[str] = []
    if before is None or changes is None:
        return pods, claims
    for change in changes:
        if change.kind == "Pod":
            old_pod = before.pods.get(change.key)
            new_pod = after.pods.get(change.key)
            if old_pod is not None and old_pod.uid and (new_pod is None or new_pod.uid != old_pod.uid):
                pods.append(old_pod.uid)
        elif change.kind == "ResourceClaim":
            old_claim = before.claims.get(change.key)
            new_claim = after.claims.get(change.key)
            if (
                old_claim is not None
                and old_claim.uid
                and old_claim.allocation is not None
                and (new_claim is None or new_claim.uid != old_claim.uid or new_claim.allocation is None)
            ):
                claims.append(old_claim.uid)
    return pods, claims
