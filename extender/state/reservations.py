"""Quota held for pods that passed the filter but are not yet seen bound.

kube-scheduler's binding cycle is asynchronous: between our filter verdict for pod A and A's binding becoming
visible in the API, pod B is already being filtered. Without remembering A's charge, B would be admitted into
quota A is about to use. A reservation lives until its pod is seen bound (real usage takes over), is seen
deleted or finished, is filtered again (replaced, never added twice), or its TTL runs out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Protocol

import immutables

QuotaKey = tuple[str, str, str]  # (ClusterQueue, flavor, resource)


@dataclass(frozen=True, slots=True)
class Reservation:
    pod_uid: str
    pod_key: str  # namespace/name, for people
    cluster_queue: str
    charges: Mapping[QuotaKey, Fraction]
    created: float
    expires: float
    node: str = ""  # set when bind confirmed the node actually chosen
    seen: bool = False  # the pod has been seen in the cluster view (so its disappearance means deletion)
    workload: str = ""  # the admitted Workload whose quota hold this charge replaces ("" for none)
    # Taken over from a previous process's journal: its pod existed when that process answered, so a complete
    # view without it (or with another pod under its name, or with it bound elsewhere) means it is gone.
    restored: bool = False

    def quota_keys(self) -> Iterable[tuple[QuotaKey, Fraction]]:
        return self.charges.items()

    @property
    def flavors(self) -> tuple[str, ...]:
        return tuple(sorted({flavor for (_, flavor, _) in self.charges}))


class ReservationSink(Protocol):
    """Where every change of the ledger goes, in order, under the ledger's lock (state/reservation_journal.py
    appends it to disk): a reservation held, replaced or changed (`put`), or let go (`delete`)."""

    def put(self, reservation: Reservation, monotonic_now: float) -> None: ...

    def delete(self, pod_uid: str) -> None: ...


class ReservationLedger:
    """Thread-safe. Totals are maintained incrementally so a quota check never sums all reservations, and a
    reconcile looks only at the reservations whose pods the caller says changed, those held since the last one
    and, once the earliest deadline has passed, the expired ones: a burst whose bindings lag behind its filters
    holds hundreds of reservations, and every filter reconciles.

    The reservations by pod, and the pod keys holding them, are persistent maps (immutables.Map, as the store's
    objects in state/store.py): every filter's quota view takes both as they are, in O(1), where copies would cost
    O(reservations) per filter. Pods of a gang wait at Permit holding theirs, so thousands held is a real count.

    With a `sink`, every change is handed to it under the lock (so it sees them in order); `restore` puts back
    what a previous process's sink kept."""

    def __init__(
        self,
        ttl_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        sink: ReservationSink | None = None,
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._by_pod: immutables.Map[str, Reservation] = immutables.Map()
        # pod key -> the uids holding reservations under it
        self._uids_by_key: immutables.Map[str, frozenset[str]] = immutables.Map()
        self._unchecked: set[str] = set()  # held or replaced since the last reconcile
        # Restored reservations not yet found in a view: asked about at every reconcile until their pod's state
        # is known (the first views may be incomplete), not only when their pod changes.
        self._restored_unchecked: set[str] = set()
        self._next_expiry = float("inf")  # no reservation expires before this (it may be an earlier one's)
        self._totals: dict[QuotaKey, Fraction] = {}
        self._by_workload: dict[str, dict[QuotaKey, Fraction]] = {}  # what the pods of each Workload hold
        self.lock = threading.RLock()  # callers hold it across check-then-reserve
        # Restored reservations let go at their TTL: promises of the previous process nobody turned into usage
        # (a pod gone unseen, a binding that never came), for metrics.
        self._sink = sink

    def _put(self, reservation: Reservation) -> None:
        """Caller holds the lock."""
        self._next_expiry = min(self._next_expiry, reservation.expires)
        if self._sink is not None:
            self._sink.put(reservation, self._clock())

    def restore(
        self,
        pod_uid: str,
        pod_key: str,
        cluster_queue: str,
        charges: Mapping[QuotaKey, Fraction],
        remaining_seconds: float,
        *,
        node: str = "",
        seen: bool = False,
        workload: str = "",
    ) -> Reservation:
        """A reservation a previous process held, with the TTL it had left (never more than ours)."""
        with self.lock:
            self._drop(pod_uid, replaced=True)
            now = self._clock()
            reservation = Reservation(
                pod_uid,
                pod_key,
                cluster_queue,
                dict(charges),
                now,
                now + min(remaining_seconds, self.ttl_seconds),
                node=node,
                seen=seen,
                workload=workload,
                restored=True,
            )
            self._hold(reservation)
            self._restored_unchecked.add(pod_uid)
            self._put(reservation)
            return reservation

    def now(self) -> float:
        return self._clock()

    def reserve(
        self,
        pod_uid: str,
        pod_key: str,
        cluster_queue: str,
        charges: Mapping[QuotaKey, Fraction],
        *,
        workload: str = "",
        seen: bool = False,
        ttl_seconds: float | None = None,
    ) -> Reservation:
        """Hold `charges` for the pod, replacing whatever it held before. `seen`: the view the verdict came from
        holds the pod (so its disappearance means deletion). `ttl_seconds`: a shorter life than the ledger's
        (a gang's hold for the rest of its attempt, service/gang_attempts.py)."""
        with self.lock:
            previous = self._by_pod.get(pod_uid)
            self._drop(pod_uid, replaced=True)
            now = self._clock()
            reservation = Reservation(
                pod_uid,
                pod_key,
                cluster_queue,
                dict(charges),
                now,
                now + min(self.ttl_seconds, ttl_seconds if ttl_seconds is not None else self.ttl_seconds),
                seen=seen or (previous.seen if previous is not None else False),
                workload=workload,
            )
            self._hold(reservation)
            self._put(reservation)
            return reservation

    def _hold(self, reservation: Reservation) -> None:
        """Caller holds the lock and dropped the pod's previous reservation."""
        self._by_pod = self._by_pod.set(reservation.pod_uid, reservation)
        uids = self._uids_by_key.get(reservation.pod_key, frozenset())
        self._uids_by_key = self._uids_by_key.set(reservation.pod_key, uids | {reservation.pod_uid})
        self._unchecked.add(reservation.pod_uid)
        add_signed(self._totals, reservation.charges.items(), 1)
        if reservation.workload:
            add_signed(self._by_workload.setdefault(reservation.workload, {}), reservation.charges.items(), 1)

    def confirm(self, pod_uid: str, node: str) -> Reservation | None:
        """Bind chose a node: keep the reservation (fresh TTL) until the binding is seen."""
        with self.lock:
            reservation = self._by_pod.get(pod_uid)
            if reservation is None:
                return None
            now = self._clock()
            confirmed = replace(reservation, node=node, expires=now + self.ttl_seconds)
            self._by_pod = self._by_pod.set(pod_uid, confirmed)
            self._put(confirmed)
            return confirmed

    def release(self, pod_uid: str) -> Reservation | None:
        with self.lock:
            return self._drop(pod_uid)

    def _drop(self, pod_uid: str, *, replaced: bool = False) -> Reservation | None:
        """`replaced`: a put of the same pod follows at once (the sink needs no delete)."""
        reservation = self._by_pod.get(pod_uid)
        if reservation is not None:
            self._by_pod = self._by_pod.delete(pod_uid)
            uids = self._uids_by_key.get(reservation.pod_key)
            if uids is not None:
                remaining = uids - {pod_uid}
                key = reservation.pod_key
                self._uids_by_key = (
                    self._uids_by_key.set(key, remaining) if remaining else self._uids_by_key.delete(key)
                )
            self._unchecked.discard(pod_uid)
            self._restored_unchecked.discard(pod_uid)
            if self._sink is not None and not replaced:
                self._sink.delete(pod_uid)
            add_signed(self._totals, reservation.charges.items(), -1)
            if reservation.workload:
                held = self._by_workload[reservation.workload]
                add_signed(held, reservation.charges.items(), -1)
                if not held:
                    del self._by_workload[reservation.workload]
        return reservation

    def expire(self) -> list[Reservation]:
        """Release the reservations whose TTL ran out: a look at every one only once the earliest has."""
        with self.lock:
            now = self._clock()
            if now < self._next_expiry:
                return []
            expired = [r for r in self._by_pod.values() if r.expires <= now]
            for reservation in expired:
                self._drop(reservation.pod_uid)
            self._next_expiry = min((r.expires for r in self._by_pod.values()), default=float("inf"))
            return expired

    def reconcile(
        self,
        pod_states: Callable[[Reservation], str],
        *,
        pod_keys: Collection[str] | None = None,
        pod_uids: Collection[str] = (),
    ) -> list[tuple[Reservation, str]]:
        """Release reservations whose pod the cluster view shows bound, finished or deleted.

        `pod_states` answers, per reservation: "pending" (keep), "seen" (keep, mark seen), or a release reason
        ("bound", "finished", "deleted"). It is asked about every reservation when `pod_keys` is None; else
        about those of the pods named (by key or uid: what changed in the view since the last reconcile, whose
        answers may have changed) and those held since the last reconcile. Expired ones are released too.
        """
        released: list[tuple[Reservation, str]] = []
        with self.lock:
            for reservation in self.expire():
                released.append((reservation, "expired"))
            if pod_keys is None:
                due = list(self._by_pod.values())
            else:
                uids = set(self._unchecked)
                uids.update(self._restored_unchecked)
                uids.update(pod_uids)
                for key in pod_keys:
                    uids.update(self._uids_by_key.get(key, ()))
                due = [found for uid in uids if (found := self._by_pod.get(uid)) is not None]
            self._unchecked.clear()
            for reservation in due:
                state = pod_states(reservation)
                if state != "pending":
                    self._restored_unchecked.discard(reservation.pod_uid)
                if state == "seen" and not reservation.seen:
                    marked = replace(reservation, seen=True)
                    self._by_pod = self._by_pod.set(reservation.pod_uid, marked)
                    self._put(marked)
                elif state not in ("pending", "seen"):
                    self._drop(reservation.pod_uid)
                    released.append((reservation, state))
        return released

    def restored_held(self) -> int:
        """Reservations taken over from the previous process still held (O(reservations): for metrics)."""
        return sum(1 for reservation in self._by_pod.values() if reservation.restored)

    def get(self, pod_uid: str) -> Reservation | None:
        return self._by_pod.get(pod_uid)

    def totals(self) -> dict[QuotaKey, Fraction]:
        with self.lock:
            return dict(self._totals)

    def all(self) -> list[Reservation]:
        with self.lock:
            return list(self._by_pod.values())

    def by_pod(self) -> Mapping[str, Reservation]:
        """Pod uid -> its reservation, as held now (an immutable map: later changes do not show in it)."""
        return self._by_pod

    def pod_keys(self) -> Collection[str]:
        """The keys (namespace/name) of the pods holding reservations now (immutable, as `by_pod`)."""
        return self._uids_by_key

    def workload_totals(self) -> dict[str, dict[QuotaKey, Fraction]]:
        """What the reservations of each admitted Workload's pods hold together, by Workload key (a copy)."""
        with self.lock:
            return {workload: dict(held) for workload, held in self._by_workload.items()}

    def __len__(self) -> int:
        return len(self._by_pod)


def add_signed(totals: dict[QuotaKey, Fraction], amounts: Iterable[tuple[QuotaKey, Fraction]], sign: int) -> None:
    """totals += sign * amounts, dropping keys that reach zero (the one rule of every running total of quota:
    the ledger's, the usage index's, the admission holds')."""
    for quota_key, amount in amounts:
        value = totals.get(quota_key, Fraction(0)) + sign * amount
        if value:
            totals[quota_key] = value
        else:
            totals.pop(quota_key, None)
