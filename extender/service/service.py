"""The application service: the one object a process runs, and the only one that holds mutable state.

It owns the cluster source and store, the indexes and caches the decisions read (usage per queue, selector
verdicts, free devices, CEL programs: extender/decisions/caches.py, extender/state/indexes/), the reservation
ledger and its lifecycle, and the decision history. Each verb is: take ONE quota view (snapshot + reconciled
reservations + usage + Kueue's ledger, under the reservation lock), hand values and caches to the pure decision
functions, and hold or release the pod's reservation in the same critical section, so check-then-reserve is
atomic across gunicorn threads. The HTTP layer, the CLI and the metrics read the same views; none of them
touches the ledger or the store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from functools import partial
from operator import is_

from extender.decisions.caches import DecisionCaches
from extender.decisions.devices.selection import DeviceMatcher
from extender.decisions.pod_decision import PodDecision
from extender.decisions.quota.attribution import claim_usage, pending_charges, pod_usage, provisional_usage
from extender.decisions.quota.context import QUOTA_KINDS, QuotaContext, build_quota_context
from extender.decisions.quota.ledger import QuotaLedger
from extender.decisions.quota.preemption_oracle import Holder
from extender.decisions.quota.workload_holds import (
    admitted_quota_by_pod_set,
    governed_resources,
    holds_with_reservations,
    pod_set_hold,
)
from extender.decisions.ranking import Ranking, score_nodes
from extender.decisions.scheduling import decide_pod
from extender.service.bind_proofs import BindProofs
from extender.service.config import ExtenderConfig
from extender.service.drift import (
    AllocatedClaim,
    UnchargedPod,
    UnplacedWorkload,
    allocated_claims,
    uncharged_pods,
    unplaced_workloads,
)
from extender.service.errors import BindError, NotLeadingError, NotSyncedError
from extender.service.gang_attempts import GangAttempts, GangStatus, gang_group, gang_status
from extender.service.gc_tuning import freeze_loaded_state, tune_for_large_heap
from extender.service.history import DecisionHistory, DecisionRecord
from extender.service.leadership import Leadership
from extender.service.parking import ParkedPods
from extender.service.pod_facts import await_named_claims, needs_our_decision, own_workload_key, pod_id
from extender.service.quota_view import QuotaView, add_amounts
from extender.service.reconciliation import GonePods, pods_to_reconcile, reservation_state
from extender.state.bookings import CLAIM, POD, BookingMemory, booking_of_charges, gone_from_view
from extender.state.core import Pod
from extender.state.indexes.admission_holds import AdmissionHoldIndex
from extender.state.indexes.usage import UsageIndex
from extender.state.kueue.local_queue import pod_queue_name
from extender.state.kueue.workload import Workload
from extender.state.podgroups.podgroup import PodGroup
from extender.state.reservation_journal import ReservationJournal
from extender.state.reservations import QuotaKey, Reservation, ReservationLedger
from extender.state.snapshot import ClusterSnapshot
from extender.state.sources import ClusterSource, SourceHealth
from extender.state.store import ClusterStore

log = logging.getLogger(__name__)

Binder = Callable[[str, str, str, str], None]  # (namespace, pod name, pod uid, node)


_QUOTA_KINDS_IN_ORDER = tuple(sorted(QUOTA_KINDS))

# How long the view keeper waits for a change before looking again whether it is stopping.
VIEW_KEEPER_IDLE_SECONDS = 1.0


class SchedulingService:
    def __init__(
        self,
        source: ClusterSource,
        config: ExtenderConfig,
        *,
        store: ClusterStore | None = None,
        binder: Binder | None = None,
        requeue: Callable[[], None] | None = None,
        journal: ReservationJournal | None = None,
        clock: Callable[[], float] = time.monotonic,
        keep_view_current: bool = False,
        leadership: Leadership | None = None,
    ) -> None:
        self.source = source
        self.config = config
        self.store = store if store is not None else ClusterStore()
        self.binder = binder
        self.options = config.decisions
        self.caches = DecisionCaches()
        self.matcher = DeviceMatcher(self.caches)
        self.usage_index = UsageIndex()  # updated from the snapshot's change list, see state/indexes/usage.py
        # the preemption oracle's holders of bound pods' usage, per usage-index answer (service/quota_view.py)
        self.holder_memo: dict[tuple[QuotaKey, int], tuple[object, dict[str, Holder]]] = {}
        self.admission_holds = AdmissionHoldIndex()  # fed by the usage index, see state/indexes/admission_holds.py
        # Placed pods' charges usage does not show yet (decisions/quota/attribution.py provisional_usage), kept
        # the same way.
        self.provisional_index = UsageIndex()
        # With a journal (state/reservation_journal.py), the ledger outlives this process: kube-scheduler may
        # still be binding pods it promised quota to, with nothing of that visible in the API server yet.
        self.journal = journal
        self.reservations = ReservationLedger(config.reservations.ttl_seconds, clock=clock, sink=journal)
        # The queue and flavors each pod and allocated claim was charged in (state/bookings.py), in the journal
        # next to the reservations.
        self.bookings = BookingMemory(sink=journal)
        self._reconciled_version = -1  # the snapshot the last reconcile saw (-1: none; the next looks at all)
        self.gangs = GangAttempts(  # service/gang_attempts.py
            config.reservations.gang_window_seconds, composites=self.options.workload.composite_pod_group
        )
        self._reconciled_snapshot: ClusterSnapshot | None = None
        self.gone_pods = GonePods()  # pods the view showed deleted: a reservation for one is let go
        self.history = DecisionHistory(config.diagnostics.history, config.diagnostics.history_node_verdicts)
        # what bind checks first: the extender's own filter passed the pod on the node (kept while bind is on)
        self.bind_proofs = BindProofs(max_age_seconds=config.bind.filter_max_age_seconds, clock=clock)
        self.released_reservations: dict[str, int] = {}  # release reason -> count, for metrics
        self.restored_reservations = 0  # taken over from the journal at start
        # Of those, the pods whose reservation has not been let go yet, and how the others were let go: one
        # "expired" is quota held for a pod that never came (an alert in docs/monitoring.md).
        self.restored_released: dict[str, int] = {}
        self._context_lock = threading.Lock()
        # What the quota context was built from: the quota kinds' dicts of its snapshot (see quota_context) and
        # whether Kueue was on.
        self._context_sources: list[Mapping[str, object]] = []
        self._context_kueue_enabled = False
        self._context: QuotaContext | None = None
        # Pods refused for quota or devices since the last requeue (service/parking.py): when a later view shows
        # either freed, `requeue` (kube/requeue.py) wakes them (kube-scheduler may see no event for it).
        self.requeue = requeue
        self.parked = ParkedPods()
        self._stopping = threading.Event()
        self.requeues = 0
        self.keep_view_current = keep_view_current
        # Why this extender must not reserve now ("" when it may): another scheduler replica leads.
        self.leadership = leadership

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        # The gates are one value for the service's life (caches keyed on gated device views rely on it).
        gates = self.options.features.gates()
        log.info("DRA feature gates: %s", ",".join(f"{name}={str(on).lower()}" for name, on in gates.items()))
        tune_for_large_heap()
        self._restore_reservations()
        if self.leadership is not None:
            self.leadership.start()
        self.source.start(self.store)
        self.store.snapshot()
        freeze_loaded_state()
        if self.requeue is not None or self.journal is not None:
            threading.Thread(target=self._housekeeping, name="reservations", daemon=True).start()
        if self.keep_view_current:
            threading.Thread(target=self._keep_view_current, name="view-keeper", daemon=True).start()

    def _restore_reservations(self) -> None:
        """What the previous process on this listen address promised and kube-scheduler may still be binding:
        held again until the cluster view shows it bound, deleted or finished, or its TTL runs out."""
        if self.journal is None:
            return
        restored = self.journal.load()
        for item in restored:
            self.reservations.restore(
                item.pod_uid,
                item.pod_key,
                item.cluster_queue,
                item.charges,
                item.remaining_seconds,
                node=item.node,
                seen=item.seen,
                workload=item.workload,
            )
        self.restored_reservations = len(restored)
        for kind, uid, booking in self.journal.loaded_bookings:
            self.bookings.book(kind, uid, booking, persist=False)
        if restored:
            log.info("restored %d reservations of the previous process from %s", len(restored), self.journal.path)

    def stop(self) -> None:
        self._stopping.set()
        self.source.stop()

    def _housekeeping(self, period: float = 1.0) -> None:
        """Reconcile once a second while reservations are held or pods are parked, not only when a verb asks.

        Parked pods are not filtered again by themselves (the requeue needs someone to look at the quota).
        And a reservation is let go as "deleted" only once its pod has been seen in the view: a pod filtered,
        bound and deleted with no verb call in between (a quiet cluster) would otherwise hold its quota until the
        TTL. The journal then also follows the ledger promptly."""
        while not self._stopping.wait(period):
            if (self.parked.count or len(self.reservations)) and not self.sync_problem():
                try:
                    self.quota_view()
                except Exception:
                    log.exception("reconciling reservations failed")

    def _keep_view_current(self) -> None:
        """Bring the usage indexes and the reservations to each new snapshot as its watch events arrive, not at
        the next filter: that work (a binding's pod and claim events re-attributing the pod, a pod placed before
        its allocation shows costing an allocator run) then happens while kube-scheduler does its own, and a
        filter or prioritize inside its serial cycle finds the view caught up. Under the reservation lock, as
        the verbs catch up: a verb arriving meanwhile waits only for the rest of the same work."""
        version = self.store.version
        while not self._stopping.is_set():
            changed = self.store.wait_for_change(version, VIEW_KEEPER_IDLE_SECONDS)
            if changed == version or self._stopping.is_set():
                continue
            # Taken before the sync check: an incomplete view (the initial lists) waits for its next change
            # here, where keeping `version` would return at once and spin through every check until synced.
            version = changed
            if self.sync_problem():
                continue
            self.store.pacing.step_aside()  # a verb running now catches the view up itself
            try:
                self.catch_up()
            except Exception:
                log.exception("keeping the quota view current failed")
            self.history.release_evicted()  # what the verbs' records evicted (service/history.py)

    def catch_up(self) -> None:
        """The view keeper's work for one new snapshot: the usage indexes and the reservations brought to it, and
        parked pods requeued when that freed room."""
        with self.reservations.lock:
            snapshot = self.snapshot()
            context, usage, expired = self._caught_up(snapshot)
            if self.parked.count:  # the lagging-view case (service/parking.py) needs no verb to wait for
                view = self._view(snapshot, context, usage, self.reservations.totals())
                self._requeue_if_freed(view, expired)

    def health(self) -> SourceHealth:
        return self.source.health()

    def sync_problem(self) -> str:
        """Why verdicts cannot be given now ("" when the view is complete): the same test as /readyz. A source
        that can tell it cheaply (LiveSource.ready_for_verdicts) is asked first: health() builds a report over
        every watched collection, and this runs on every call of every verb."""
        quick = self.source.ready_for_verdicts(self.config.source.verdict_grace_seconds)
        if quick and self.store.snapshot().synced:
            return ""
        health = self.source.health()
        if not health.ready:
            return health.message
        name, seconds = health.disconnected
        if seconds > self.config.source.verdict_grace_seconds:
            # Readiness tolerates a broken watch for staleGraceSeconds; verdicts do not: events missed meanwhile
            # (a binding another extender admitted, an allocation) would be missing from the quota.
            return f"the watch of {name} has been reconnecting for {seconds:.1f}s"
        if not self.store.snapshot().synced:
            return "waiting for the initial lists of the cluster view"
        return ""

    def require_synced(self) -> None:
        problem = self.sync_problem()
        if problem:
            raise NotSyncedError(f"the extender's cluster view is not synced ({problem}); retry later")

    # --- views --------------------------------------------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        return self.store.snapshot()

    def quota_context(self, snapshot: ClusterSnapshot) -> QuotaContext:
        """Rebuilt only when a Kueue object, a Namespace or the ConfigMap changed: a snapshot shares a kind's dict
        with the one before unless an object of that kind changed, so the very dicts the context was built from
        mean the same objects. They are held, not their id()s, which a freed dict would lend to a new one."""
        sources = [snapshot.objects[kind] for kind in _QUOTA_KINDS_IN_ORDER]
        with self._context_lock:
            if (
                self._context is None
                or snapshot.kueue_enabled != self._context_kueue_enabled
                or not all(map(is_, sources, self._context_sources))
            ):
                self._context = build_quota_context(
                    snapshot, self.config.quota.device_class_mappings, self.config.kueue_config
                )
                self._context_sources = sources
                self._context_kueue_enabled = snapshot.kueue_enabled
            return self._context

    def quota_view(self) -> QuotaView:
        """The one quota view: reservations reconciled against the snapshot it is built from."""
        with self.reservations.lock:
            return self._quota_view_locked()

    def _quota_view_locked(self) -> QuotaView:
        # The snapshot is taken under the lock: one taken before it may predate a binding that another thread's
        # reconcile has since turned from a reservation into usage, and would then count neither.
        snapshot = self.snapshot()
        context, usage, expired = self._caught_up(snapshot)
        view = self._view(snapshot, context, usage, self.reservations.totals())
        self._requeue_if_freed(view, expired)
        return view

    def _caught_up(self, snapshot: ClusterSnapshot) -> tuple[QuotaContext, Mapping[QuotaKey, Fraction], bool]:
        """The quota context, usage and the reservations brought to `snapshot` (caller holds the reservation
        lock): the indexes apply the snapshot's changes since they last looked, the ledger lets go of what they
        show bound, finished or deleted, or what expired (the third value: whether any did)."""
        context = self.quota_context(snapshot)
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
        if self.options.workload.gangs:
            self.gangs.adopt(snapshot, self.reservations)  # before a reconcile could take a hold for a pod's
        released = self.reservations.reconcile(
            partial(reservation_state, snapshot, gone=self.gone_pods), pod_keys=pod_keys, pod_uids=pod_uids
        )
        if self.options.workload.gangs:
            released += self.gangs.settle(snapshot, self.reservations)
            for uid, pod_key, cluster_queue, charges in self.gangs.take_bookings():
                self._book(uid, pod_key, cluster_queue, charges, "")
        self._count_released(released)
        expired = any(why == "expired" for _, why in released)
        return context, usage, expired

    def _count_released(self, released: list[tuple[Reservation, str]]) -> None:
        for reservation, why in released:
            self.released_reservations[why] = self.released_reservations.get(why, 0) + 1
            if reservation.restored:
                self.restored_released[why] = self.restored_released.get(why, 0) + 1
            log.debug("released reservation of %s: %s", reservation.pod_key, why)

    def _requeue_if_freed(self, view: QuotaView, expired: bool) -> None:
        if self.parked.freed(view, expired=expired) and self.requeue is not None:
            self.requeues += 1
            self.requeue()

    def _view(
        self,
        snapshot: ClusterSnapshot,
        context: QuotaContext,
        usage: Mapping[QuotaKey, Fraction],
        reserved: Mapping[QuotaKey, Fraction],
    ) -> QuotaView:
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

    def unplaced_workloads(self, snapshot: ClusterSnapshot) -> list[UnplacedWorkload]:
        """Admitted Workloads whose pods are not bound, with the node-level reason (service/drift.py)."""
        return unplaced_workloads(snapshot, lambda pod: self.explain(pod))

    def group_claims(self, namespace: str, name: str) -> list[AllocatedClaim]:
        """How the claims of PodGroup namespace/name are charged: the queue, and the member carrying each or its
        own entry (for the PodGroup page; the drift report lists the ones no member carries)."""
        with self.reservations.lock:
            view = self._quota_view_locked()
        group = view.snapshot.pod_groups.get(f"{namespace}/{name}")
        found = []
        for claim_name in sorted(group.claim_names() if group is not None else ()):
            entry = self.usage_index.claim_entry(f"{namespace}/{claim_name}")
            if entry is not None:
                found.append((f"{namespace}/{claim_name}", entry))
        return allocated_claims(found)

    def uncharged_pods(self) -> list[UnchargedPod]:
        """Placed pods part of whose usage could not be charged, with why (service/drift.py), as of the last
        quota view."""
        return uncharged_pods(self.usage_index.charge_errors())

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

    def stored_pod(self, namespace: str, name: str, uid: str, resource_version: str) -> Pod | None:
        """The view's copy of a pod, when it is the very version asked about (transport/wire.py
        parse_extender_args takes it instead of parsing the request's copy again)."""
        pod = self.snapshot().pods.get(f"{namespace}/{name}")
        if pod is None or pod.uid != uid or not self.store.pod_at_version(pod, resource_version):
            return None
        return pod

    def last_decision(self, namespace: str, name: str) -> DecisionRecord | None:
        return self.history.get(f"{namespace}/{name}")

    def gang_status(self, namespace: str, name: str) -> GangStatus | None:
        """A PodGroup as the extender sees it (service/gang_attempts.py gang_status), or None when unknown."""
        with self.reservations.lock:
            view = self._quota_view_locked()
            return gang_status(
                view.snapshot, f"{namespace}/{name}", self.gangs, self.reservations, self.history.get, view.context
            )

    # --- verbs --------------------------------------------------------------------------------------------------

    def filter(self, pod: Pod, node_names: Iterable[str]) -> PodDecision:
        started = time.perf_counter()
        self.require_synced()
        snapshot = self.snapshot()
        if not needs_our_decision(pod, snapshot):
            passed = self._decide(snapshot, pod, node_names, view=None)
            self._remember_for_bind(pod, passed)
            return passed
        not_leading = self.leadership() if self.leadership is not None else ""
        if not_leading:
            raise NotLeadingError(not_leading)
        if self.source.follows_changes:
            await_named_claims(self.store, snapshot, pod)
        identity = pod_id(pod)
        with self.reservations.lock:
            view = self._quota_view_locked()
            group = self._gang_group(view, pod)
            decision = self._decide(view.snapshot, pod, node_names, view=view, started=started, group=group)
            if group is not None and decision.gang is not None:
                # The group's attempt holds the member's charge with the rest of the group's (one reservation
                # for every placement judged): the member holds none of its own.
                self._count_released(
                    self.gangs.record(view.snapshot, pod, group, decision, decision.verdicts.keys(), self.reservations)
                )
                self.reservations.release(identity)
            elif decision.reservation:
                # In the view already: a deletion before the next reconcile must release it (not wait for the TTL).
                in_view = view.snapshot.pods.get(pod.key)
                workload = own_workload_key(view, pod)
                self.reservations.reserve(
                    identity,
                    pod.key,
                    decision.quota.cluster_queue,
                    decision.reservation,
                    workload=workload,
                    seen=in_view is not None and (not pod.uid or in_view.uid == pod.uid),
                )
                self._book(pod.uid, pod.key, decision.quota.cluster_queue, decision.reservation, workload)
            else:
                self.reservations.release(identity)
                if not decision.any_passed:  # refused everywhere: kube-scheduler parks the pod
                    self.parked.park(decision.failures.category_counts(), view)
        self.history.remember_filter(identity, decision)
        self.history.record("filter", Ranking(decision, {}), started)
        self._remember_for_bind(pod, decision)
        return decision

    def _remember_for_bind(self, pod: Pod, decision: PodDecision) -> None:
        if self.config.bind.enabled:
            self.bind_proofs.remember(pod_id(pod), pod.key, pod.scheduler_name, decision)

    def bind_refusal(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Why the extender will not bind this pod to `node` ("" when it will): only a pod of a scheduler it
        binds for (bind.schedulerNames), on a node its own filter passed the pod on (service/bind_proofs.py),
        and, where the view holds the pod, the very pod filtered (same UID and scheduler name)."""
        key = f"{namespace}/{name}"
        names = self.config.bind.scheduler_names
        refusal = self.bind_proofs.refusal(uid or key, key, node, names)
        if refusal:
            return refusal
        current = self.snapshot().pods.get(key)
        if current is not None and uid and current.uid and current.uid != uid:
            return f"pod {key} has UID {current.uid}, not {uid}"
        if current is not None and current.scheduler_name not in names:
            return f"pod {key} names scheduler {current.scheduler_name!r}, not one this extender binds for"
        return ""

    def rank_ahead(self, decision: PodDecision) -> Ranking | None:
        """prioritize's ranking of a filter decision, made once filter's answer is out (the transport calls this
        after writing it), while kube-scheduler runs its own score plugins; None when there is nothing to make.

        Why: kube-scheduler sends prioritize the list our filter passed (pkg/scheduler/schedule_one.go
        findNodesThatPassExtenders keeps the extender's answer, prioritizeNodes sends it on), only after its own
        PreScore and Score plugins have run over those nodes: milliseconds during which the extender waits. The
        scores made in that gap are the ones prioritize would make: they are a function of the decision (its
        allocations and NodeQuotas) and of the nodes' device usage in the snapshot, taken here as prioritize
        takes it. Inside the serial cycle prioritize is then left to recognise its list (one comparison) and
        answer."""
        if decision.fast_path or not decision.verdicts.allocations:
            return None  # prioritize answers these without scoring anything
        ranking = score_nodes(
            decision, decision.passed, self.snapshot(), self.caches, self.options.weights, passed_exactly=True
        )
        return ranking if self.history.remember_ranking(decision.pod_uid or decision.pod_key, ranking) else None

    def prioritize(self, pod: Pod, node_names: Iterable[str]) -> Ranking:
        """Scores for the nodes that passed filter; reuses the filter's decision for the same pod when it has one,
        and the ranking made of it ahead (`rank_ahead`) when asked about the very nodes it passed."""
        started = time.perf_counter()
        self.require_synced()
        names = node_names if isinstance(node_names, list) else list(node_names)
        recent = self.history.recent_filter_ranked(pod_id(pod))
        decision, ahead = recent if recent is not None else (None, None)
        # kube-scheduler asks about the very nodes our filter passed, in our order (one comparison in C; each
        # node once); else the nodes asked, each once, which the filter's coverage and score_nodes compare with.
        asked = None if decision is not None and names == decision.passed else dict.fromkeys(names).keys()
        if ahead is not None and asked is None:
            self.history.record("prioritize", ahead, started)
            return ahead
        snapshot = self.snapshot()
        if decision is None or (asked is not None and not decision.verdicts.keys() >= asked):
            if not needs_our_decision(pod, snapshot):
                return Ranking(self._decide(snapshot, pod, names, view=None), {})
            decision = self._decide(snapshot, pod, names, view=self.quota_view(), started=started)
        ranking = score_nodes(
            decision, names, snapshot, self.caches, self.options.weights, asked=asked, passed_exactly=asked is None
        )
        if not decision.fast_path:
            self.history.record("prioritize", ranking, started)
        return ranking

    def explain(self, pod: Pod, node_names: Iterable[str] | None = None) -> Ranking:
        """A what-if ranking: the same decision as filter, over every node by default, reserving nothing.
        Bounded by diagnostics.explain.deadlineSeconds: nodes not reached say so instead of holding a thread."""
        started = time.perf_counter()
        view = self.quota_view()
        names = list(node_names) if node_names is not None else sorted(view.snapshot.nodes)
        governed = needs_our_decision(pod, view.snapshot)
        group = self._gang_group(view, pod) if governed else None
        decision = self._decide(
            view.snapshot,
            pod,
            names,
            view=view if governed else None,
            started=started,
            deadline_seconds=self.config.diagnostics.explain.deadline_seconds,
            group=group,
        )
        return score_nodes(decision, names, view.snapshot, self.caches, self.options.weights)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind through the API; on success hold exactly the charge of the node chosen, on failure nothing."""
        identity = uid or f"{namespace}/{name}"
        # The proofs are kept while the verb is served (bind.enabled): a bind the extender did not filter for is
        # refused before anything else, and what it holds for the pod (the filter's reservation, if any) stays.
        refusal = self.bind_refusal(namespace, name, uid, node) if self.config.bind.enabled else ""
        if refusal:
            raise BindError(f"not binding {namespace}/{name} to {node}: {refusal}")
        problem = self.sync_problem()
        if problem:
            # The reservation may stand on an incomplete view: let it go, kube-scheduler retries the pod.
            self.reservations.release(identity)
            raise BindError(f"not binding {namespace}/{name}: the cluster view is not synced ({problem})")
        if self.binder is None:
            self.reservations.release(identity)
            raise BindError("binding needs a live cluster source (--kubeconfig or --in-cluster)")
        try:
            self.binder(namespace, name, uid, node)
        except Exception as error:
            self.reservations.release(identity)
            raise BindError(f"binding {namespace}/{name} to {node} failed: {error}") from error
        with self.reservations.lock:
            reservation = self.reservations.get(identity)
            filtered = self.history.recent_filter(identity)
            verdict = filtered.verdicts.get(node) if filtered is not None else None
            if (
                reservation is not None
                and verdict is not None
                and verdict.passed
                and verdict.quota is not None
                and (filtered is None or filtered.gang is None)  # a gang's node charge is the group's
            ):
                # The filter held the largest charge of all passing nodes; the node chosen may take less.
                self.reservations.reserve(
                    identity,
                    reservation.pod_key,
                    reservation.cluster_queue,
                    verdict.quota.charges,
                    workload=reservation.workload,
                )
                self._book(
                    uid, reservation.pod_key, reservation.cluster_queue, verdict.quota.charges, reservation.workload
                )
            self.reservations.confirm(identity, node)

    def _book(self, uid: str, pod_key: str, cluster_queue: str, charges: Iterable[QuotaKey], workload: str) -> None:
        """Remember the queue and flavors a pod was given quota in (state/bookings.py): its usage stays there once
        it is bound, whatever its labels say then and whichever other flavors its node is in."""
        booking = booking_of_charges(cluster_queue, charges, pod_key, workload)
        if booking is not None and uid:
            self.bookings.book(POD, uid, booking)

    # --- the one call into the decisions ------------------------------------------------------------------------

    def _decide(
        self,
        snapshot: ClusterSnapshot,
        pod: Pod,
        node_names: Iterable[str],
        *,
        view: QuotaView | None,
        started: float | None = None,
        deadline_seconds: float | None = None,
        group: PodGroup | None = None,
    ) -> PodDecision:
        governed = view is not None and view.governed and bool(pod_queue_name(pod.labels))
        ledger = holders = None
        if governed and view:
            workload = own_workload_key(view, pod)
            ledger = view.ledger_excluding(pod_id(pod), pod.key, workload)
            holders = view.holders_lookup(pod.key, workload)
        need = None
        if group is not None and ledger is not None and view is not None:
            with self.reservations.lock:
                need, ledger = self.gangs.need_and_ledger(
                    view, pod, group, self.reservations, ledger, group_claims=self.options.workload.group_claims
                )
        return decide_pod(
            snapshot,
            pod,
            node_names,
            matcher=self.matcher,
            quota_context=view.context if view is not None else None,
            ledger=ledger,
            holders=holders,
            options=self.options,
            deadline=(started + (deadline_seconds or self.config.limits.request_deadline_seconds))
            if started is not None
            else None,
            gang=need,
            bookings=self.bookings.view(),
        )

    def _gang_group(self, view: QuotaView, pod: Pod) -> PodGroup | None:
        enabled = self.options.workload.gangs and bool(pod.pod_group)
        return gang_group(view, pod, own_workload_key(view, pod)) if enabled else None
