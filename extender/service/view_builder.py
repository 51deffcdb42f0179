"""How the one quota view (service/quota_view.py) is built: the usage indexes and the reservations brought to a
snapshot, then Kueue's ledger over usage, reservations, what placed pods are about to hold and what admitted
Workloads hold beyond their pods.

The indexes apply each snapshot's changes since they last looked (never a rebuild per call); the reservation
ledger lets go of what the snapshot shows bound, finished or deleted, or what expired. Every method runs under
the reservation lock, which the caller (SchedulingService) holds: the view, the reconcile and the verb's own
reservation are one critical section.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import partial

from extender.decisions.devices.selection import DeviceMatcher
from extender.decisions.quota.attribution import claim_usage, pending_charges, pod_usage, provisional_usage
from extender.decisions.quota.context import QuotaContext
from extender.decisions.quota.ledger import QuotaLedger
from extender.decisions.quota.preemption_oracle import Holder
from extender.decisions.quota.workload_holds import (
    admitted_quota_by_pod_set,
    governed_resources,
    holds_with_reservations,
    pod_set_hold,
)
from extender.decisions.scheduling import DecisionOptions
from extender.service.gang_attempts import GangAttempts
from extender.service.quota_context_cache import QuotaContextCache
from extender.service.quota_view import QuotaView, add_amounts
from extender.service.reconciliation import GonePods, pods_to_reconcile, reservation_state
from extender.state.bookings import CLAIM, POD, BookingMemory, booking_of_charges, gone_from_view
from extender.state.core import Pod
from extender.state.indexes.admission_holds import AdmissionHoldIndex
from extender.state.indexes.usage import UsageIndex
from extender.state.kueue.workload import Workload
from extender.state.reservations import QuotaKey, Reservation, ReservationLedger
from extender.state.snapshot import ClusterSnapshot


def book_pod(
    bookings: BookingMemory, uid: str, pod_key: str, cluster_queue: str, charges: Iterable[QuotaKey], workload: str
) -> None:
    """Remember the queue and flavors a pod was given quota in (state/bookings.py): its usage stays there once
    it is bound, whatever its labels say then and whichever other flavors its node is in."""
    booking = booking_of_charges(cluster_queue, charges, pod_key, workload)
    if booking is not None and uid:
        bookings.book(POD, uid, booking)


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """The quota context and usage at a snapshot, and the reservations let go to get there (with why)."""

    context: QuotaContext
    usage: Mapping[QuotaKey, Fraction]
    released: list[tuple[Reservation, str]]

    @property
    def expired(self) -> bool:
        return any(why == "expired" for _, why in self.released)


class QuotaViewBuilder:
    def __init__(
        self,
        contexts: QuotaContextCache,
        matcher: DeviceMatcher,
        options: DecisionOptions,
        reservations: ReservationLedger,
        bookings: BookingMemory,
        gangs: GangAttempts,
    ) -> None:
        self.contexts = contexts
        self.matcher = matcher
        self.options = options
        self.reservations = reservations
        self.bookings = bookings
        self.gangs = gangs
        # Written by caught_up, from each snapshot's change list (state/indexes/usage.py): bound pods' and
        # allocated claims' usage per queue; placed pods' charges usage does not show yet
        # (decisions/quota/attribution.py provisional_usage); admitted Workloads' holds, fed by the usage index
        # (state/indexes/admission_holds.py).
        self.usage_index = UsageIndex()
        self.provisional_index = UsageIndex()
        self.admission_holds = AdmissionHoldIndex()
        # Written by the preemption oracle through the views (QuotaView.holder_memo): the holders of bound pods'
        # usage, per usage-index answer.
        self.holder_memo: dict[tuple[QuotaKey, int], tuple[object, dict[str, Holder]]] = {}
        # Written by caught_up: pods the view showed deleted (a reservation for one is let go), and the snapshot
        # the last reconcile saw (None, -1: none yet; the next looks at every pod).
        self.gone_pods = GonePods()
        self._reconciled_snapshot: ClusterSnapshot | None = None
        self._reconciled_version = -1

    @property
    def reconciled_version(self) -> int:
        """The version of the snapshot the last reconcile saw (-1: none yet)."""
        return self._reconciled_version

    def caught_up(self, snapshot: ClusterSnapshot) -> CaughtUp:
        """The quota context, usage and the reservations brought to `snapshot`: the indexes apply the snapshot's
        changes since they last looked, the ledger lets go of what they show bound, finished or deleted, or what
        expired; a gang's attempts adopt and settle their holds (service/gang_attempts.py)."""
        context = self.contexts.get(snapshot)
        matcher = self.matcher
        reconciled = self._reconciled_version
        changes = snapshot.changes_since(reconciled) if 0 <= reconciled <= snapshot.version else None
        gone_pods, gone_claims = gone_from_view(self._reconciled_snapshot, snapshot, changes)
        self.bookings.gone(POD, gone_pods)
        for uid in gone_claims:
            self.bookings.forget(CLAIM, uid)
        rebooked_pods, rebooked_claims = self.bookings.take_changed()
        bookings = self.bookings.view()
        usage = self.usage_index.totals(
            snapshot,
            context,
            lambda at, pod: pod_usage(at, pod, context, matcher=matcher, bookings=bookings),
            lambda at, claim: claim_usage(at, claim, context, matcher=matcher, bookings=bookings),
            touched_pods=rebooked_pods,
            touched_claims=rebooked_claims,
        )
        for uid, booking in self.usage_index.take_bookings().items():
            # what usage charged is what the claim keeps while allocated (no re-attribution needed)
            self.bookings.book_once(CLAIM, uid, booking, notify=False)
        pending = self._pending_demand
        self.provisional_index.totals(
            snapshot,
            context,
            lambda at, pod: provisional_usage(at, pod, context, pending, matcher=matcher, bookings=bookings),
            touched_pods=rebooked_pods,
        )
        # Only the reservations whose pods changed since the last reconcile can change state (and new ones).
        touched = pods_to_reconcile(snapshot, changes)
        self.gone_pods.record(self._reconciled_snapshot, snapshot, changes)
        self._reconciled_version = snapshot.version
        self._reconciled_snapshot = snapshot
        pod_keys, pod_uids = touched if touched is not None else (None, ())
        gangs_on = self.options.workload.gangs
        if gangs_on:
            self.gangs.adopt(snapshot, self.reservations)  # before a reconcile could take a hold for a pod's
        released = self.reservations.reconcile(
            partial(reservation_state, snapshot, gone=self.gone_pods), pod_keys=pod_keys, pod_uids=pod_uids
        )
        if gangs_on:
            released += self.gangs.settle(snapshot, self.reservations)
            for uid, pod_key, cluster_queue, charges in self.gangs.take_bookings():
                book_pod(self.bookings, uid, pod_key, cluster_queue, charges, "")
        return CaughtUp(context, usage, released)

    def view(self, snapshot: ClusterSnapshot, caught: CaughtUp) -> QuotaView:
        """The view at `snapshot` once caught up: Kueue's ledger over usage, the reservations held, what placed
        pods are about to hold and what admitted Workloads hold beyond their pods."""
        context, usage = caught.context, caught.usage
        reserved = self.reservations.totals()
        admitted_holds, workload_holds = self._admission_holds(snapshot, context)
        # What placed pods are about to hold that usage does not show yet, for pods this process holds no
        # reservation of (a reservation covers its pod until the allocation shows: never counted twice).
        reserved_pods = self.reservations.pod_keys()
        unbound = {
            key: counted.amounts
            for key, counted in self.provisional_index.unbound().items()
            if key not in reserved_pods
        }
        provisional: dict[QuotaKey, Fraction] = {}
        for amounts in unbound.values():
            for quota_key, amount in amounts:
                provisional[quota_key] = provisional.get(quota_key, Fraction(0)) + amount
        charged = add_amounts(usage, reserved, provisional, admitted_holds)
        return QuotaView(
            snapshot=snapshot,
            context=context,
            usage=usage,
            reserved=reserved,
            reservations_by_pod=self.reservations.by_pod(),
            ledger=QuotaLedger.from_usage(context.tree, charged),
            charged=charged,
            at=self.reservations.now(),
            admitted_holds=admitted_holds,
            workload_holds=workload_holds,
            unbound_usage=unbound,
            provisional=provisional,
            charged_pods=self.usage_index.charged_pods,
            holder_memo=self.holder_memo,
            claim_entries=self.usage_index.claim_entries,
        )

    def _admission_holds(
        self, snapshot: ClusterSnapshot, context: QuotaContext
    ) -> tuple[Mapping[QuotaKey, Fraction], Mapping[str, Mapping[QuotaKey, Fraction]]]:
        """What admitted Workloads hold beyond their pods' usage (the index, per event) and reservations."""
        governed: frozenset[str] | None = None

        def admitted(workload: Workload) -> Mapping[str, Mapping[QuotaKey, Fraction]]:
            nonlocal governed
            if workload.admission is None:
                return {}
            if governed is None:
                governed = governed_resources(context, snapshot.device_classes)
            return admitted_quota_by_pod_set(workload, context, governed)

        holds = self.admission_holds.refresh(snapshot, context, self.usage_index, admitted, pod_set_hold)
        return holds_with_reservations(holds.totals, holds.by_workload, self.reservations.workload_totals())

    def _pending_demand(
        self, snapshot: ClusterSnapshot, pod: Pod, node: str, context: QuotaContext
    ) -> dict[str, Fraction]:
        return pending_charges(
            snapshot,
            pod,
            node,
            context,
            self.matcher,
            budget=self.options.search_budget,
            features=self.options.features,
        )
