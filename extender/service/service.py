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
from dataclasses import dataclass
from typing import Any

from extender.decisions.caches import DecisionCaches
from extender.decisions.devices.pod_claims import named_claims_not_in_view
from extender.decisions.devices.selection import DeviceMatcher
from extender.decisions.pod_decision import PodDecision
from extender.decisions.quota.context import QuotaContext
from extender.decisions.ranking import Ranking, score_nodes
from extender.decisions.scheduling import decide_pod, needs_our_decision
from extender.memo import BoundedMemo
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
from extender.service.history import DecisionHistory, DecisionRecord
from extender.service.leadership import Leadership
from extender.service.parking import ParkedPods
from extender.service.quota_context_cache import QuotaContextCache
from extender.service.quota_view import QuotaView
from extender.service.view_builder import CaughtUp, QuotaViewBuilder, book_pod
from extender.state.bookings import BookingMemory
from extender.state.collector import freeze_loaded_state, tune_for_large_heap
from extender.state.core import Pod
from extender.state.kueue.local_queue import pod_queue_name
from extender.state.podgroups.podgroup import PodGroup
from extender.state.reservation_journal import ReservationJournal
from extender.state.reservations import QuotaKey, Reservation, ReservationLedger
from extender.state.snapshot import ClusterSnapshot
from extender.state.sources import ClusterSource, SourceHealth
from extender.state.store import ClusterStore

log = logging.getLogger(__name__)

Binder = Callable[[str, str, str, str], None]  # (namespace, pod name, pod uid, node)


# How long the view keeper waits for a change before looking again whether it is stopping.
VIEW_KEEPER_IDLE_SECONDS = 1.0
# How long filter waits for a claim the pod names to reach the view (await_named_claims).
CLAIM_CATCH_UP_SECONDS = 0.5


def pod_id(pod: Pod) -> str:
    """The key of a pod's reservation, its history and its bind proof: its UID (a pod re-created under the same
    name is another pod), or its name when a request carries no UID."""
    return pod.uid or pod.key


def await_named_claims(store: ClusterStore, snapshot: ClusterSnapshot, pod: Pod) -> None:
    """Give a watch that is behind kube-scheduler's informer a moment to deliver the claims the pod names
    (pod_claims.named_claims_not_in_view: kube-scheduler has them, or it would not have asked), at most
    CLAIM_CATCH_UP_SECONDS, instead of refusing every node for a claim that exists: a pod refused so waits in
    kube-scheduler's unschedulable pool, and the claim's creation, which would move it back, has already
    happened. For a source that follows the cluster only; a claim still missing after that is refused."""
    deadline = time.monotonic() + CLAIM_CATCH_UP_SECONDS
    while named_claims_not_in_view(snapshot, pod) and (left := deadline - time.monotonic()) > 0:
        store.wait_for_change(snapshot.version, left)
        snapshot = store.snapshot()


@dataclass(frozen=True, slots=True)
class ServiceStats:
    """What /metrics reports of the service besides the quota view, read at once (transport/metrics.py)."""

    released: Mapping[str, int]  # reservations let go, by reason
    parked: int  # pods refused since the last requeue
    requeues: int
    restored: int  # reservations taken over from the journal at start
    restored_released: Mapping[str, int]  # of those, let go, by reason
    restored_held: int  # of those, still held
    memos: tuple[BoundedMemo[Any, Any], ...]  # the decisions' caches (decisions/caches.py)


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
        # Set here, never replaced: the source filling the store, the store (its own lock), the binder of a live
        # source, the options of every decision.
        self.source = source
        self.config = config
        self.store = store if store is not None else ClusterStore()
        self.binder = binder
        self.options = config.decisions
        # The decisions' caches and the device matcher over them: keyed on values, shared by every thread.
        self.caches = DecisionCaches()
        self.matcher = DeviceMatcher(self.caches)
        # With a journal (state/reservation_journal.py), the ledger outlives this process: kube-scheduler may
        # still be binding pods it promised quota to, with nothing of that visible in the API server yet. The
        # ledger's lock (`reservations.lock`) is THE lock of a verb's critical section: everything below marked
        # "under the reservation lock" is written only while it is held.
        self.journal = journal
        self.reservations = ReservationLedger(config.reservations.ttl_seconds, clock=clock, sink=journal)
        # Under the reservation lock: the queue and flavors each pod and allocated claim was charged in
        # (state/bookings.py), in the journal next to the reservations; each gang's attempt and its hold
        # (service/gang_attempts.py).
        self.bookings = BookingMemory(sink=journal)
        self.gangs = GangAttempts(
            config.reservations.gang_window_seconds, composites=self.options.workload.composite_pod_group
        )
        # The quota context of the newest snapshot (its own lock: pages read it without the reservation lock).
        self.contexts = QuotaContextCache(config)
        # Under the reservation lock: the usage indexes and the reconcile that build each quota view.
        self.views = QuotaViewBuilder(
            self.contexts, self.matcher, self.options, self.reservations, self.bookings, self.gangs
        )
        # Its own lock: the decisions made, for diagnostics, prioritize and bind.
        self.history = DecisionHistory(config.diagnostics.history, config.diagnostics.history_node_verdicts)
        # Its own lock: what bind checks first, that the extender's own filter passed the pod on the node.
        self.bind_proofs = BindProofs(max_age_seconds=config.bind.filter_max_age_seconds, clock=clock)
        # Under the reservation lock, for metrics: reservations let go by reason; taken over from the journal at
        # start; of those, how they were let go (one "expired" is quota held for a pod that never came: an alert
        # in docs/monitoring.md).
        self.released_reservations: dict[str, int] = {}
        self.restored_reservations = 0
        self.restored_released: dict[str, int] = {}
        # Under the reservation lock: pods refused for quota or devices since the last requeue
        # (service/parking.py); when a later view shows either freed, `requeue` (kube/requeue.py) wakes them
        # (kube-scheduler may see no event for it), counted in `requeues`.
        self.requeue = requeue
        self.parked = ParkedPods()
        self.requeues = 0
        self._stopping = threading.Event()
        # Set here: whether a thread keeps the view current between calls (serve of a live cluster), and why this
        # extender must not reserve now ("" when it may: another scheduler replica leads).
        self.keep_view_current = keep_view_current
        self.leadership = leadership

    def stats(self) -> ServiceStats:
        with self.reservations.lock:
            return ServiceStats(
                released=dict(self.released_reservations),
                parked=self.parked.count,
                requeues=self.requeues,
                restored=self.restored_reservations,
                restored_released=dict(self.restored_released),
                restored_held=self.reservations.restored_held(),
                memos=tuple(self.caches.memos()),
            )

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
            caught = self._caught_up(snapshot)
            if self.parked.count:  # the lagging-view case (service/parking.py) needs no verb to wait for
                self._requeue_if_freed(self.views.view(snapshot, caught), caught.expired)

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
        """The quota context of `snapshot` (service/quota_context_cache.py), without the reservation lock."""
        return self.contexts.get(snapshot)

    def quota_view(self) -> QuotaView:
        """The one quota view: reservations reconciled against the snapshot it is built from."""
        with self.reservations.lock:
            return self._quota_view_locked()

    def _quota_view_locked(self) -> QuotaView:
        # The snapshot is taken under the lock: one taken before it may predate a binding that another thread's
        # reconcile has since turned from a reservation into usage, and would then count neither.
        snapshot = self.snapshot()
        caught = self._caught_up(snapshot)
        view = self.views.view(snapshot, caught)
        self._requeue_if_freed(view, caught.expired)
        return view

    def _caught_up(self, snapshot: ClusterSnapshot) -> CaughtUp:
        caught = self.views.caught_up(snapshot)
        self._count_released(caught.released)
        return caught

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
            entry = self.views.usage_index.claim_entry(f"{namespace}/{claim_name}")
            if entry is not None:
                found.append((f"{namespace}/{claim_name}", entry))
        return allocated_claims(found)

    def uncharged_pods(self) -> list[UnchargedPod]:
        """Placed pods part of whose usage could not be charged, with why (service/drift.py), as of the last
        quota view."""
        return uncharged_pods(self.views.usage_index.charge_errors())

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
                workload = view.own_workload_key(pod)
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
        ranking = score_nodes(decision, decision.passed, self.snapshot(), self.caches, self.options.weights)
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
        ranking = score_nodes(decision, names, snapshot, self.caches, self.options.weights)
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
        book_pod(self.bookings, uid, pod_key, cluster_queue, charges, workload)

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
            workload = view.own_workload_key(pod)
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
        return gang_group(view, pod, view.own_workload_key(pod)) if enabled else None
