"""The one object a process runs: cluster source + store, caches, reservations, and the verbs on top.

It wires the pure decision functions to the mutable state: takes a snapshot, builds (or reuses) the quota
context, asks `decide_pod`, and holds or releases the pod's reservation under one lock so that
check-then-reserve is atomic across gunicorn threads. It contains no scheduling rules of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction

from cachetools import LRUCache

from extender.decisions.free_devices import FreeDeviceIndex
from extender.decisions.quota_context import QUOTA_KINDS, QuotaContext, build_quota_context
from extender.decisions.quota_tree import QuotaLedger
from extender.decisions.scheduling import PodDecision, decide_pod
from extender.decisions.selection import DeviceMatcher
from extender.decisions.usage import UsageTracker, in_flight_node
from extender.state.core import Pod
from extender.state.kueue import QUEUE_NAME_LABEL
from extender.state.reservations import QuotaKey, Reservation, ReservationLedger
from extender.state.sources import ClusterSource, SourceHealth
from extender.state.store import ClusterSnapshot, ClusterStore
from extender.transport.config import ExtenderConfig
from extender.transport.gc_tuning import freeze_loaded_state, tune_for_large_heap

log = logging.getLogger(__name__)


class BindError(RuntimeError):
    """Binding the pod through the API failed; nothing stays reserved for it."""


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    verb: str  # filter | prioritize | explain
    at: float  # wall-clock time
    decision: PodDecision
    duration_seconds: float


def _needs_our_decision(pod: Pod) -> bool:
    return bool(pod.claims) or QUEUE_NAME_LABEL in pod.labels


def _record_weight(record: DecisionRecord) -> int:
    return max(1, len(record.decision.verdicts))


# kube-scheduler calls prioritize right after filter in the same cycle; an older filter answer is not reused.
PRIORITIZE_REUSE_SECONDS = 10.0
LAST_FILTER_KEPT = 64

Binder = Callable[[str, str, str, str], None]  # (namespace, pod name, pod uid, node)


class SchedulingEngine:
    def __init__(
        self,
        source: ClusterSource,
        config: ExtenderConfig,
        *,
        store: ClusterStore | None = None,
        binder: Binder | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.config = config
        self.store = store if store is not None else ClusterStore()
        self.binder = binder
        self.matcher = DeviceMatcher()
        self.free_index = FreeDeviceIndex(self.matcher)
        self.reservations = ReservationLedger(config.reservation_ttl_seconds, clock=clock)
        self.usage = UsageTracker()
        # Bounded by pods and by node verdicts held: one decision over 5000 nodes weighs 5000 verdicts, so a count
        # of pods alone would let the history grow to gigabytes on a big cluster.
        self.history: LRUCache[str, DecisionRecord] = LRUCache(
            maxsize=config.diagnostics_history_verdicts, getsizeof=_record_weight
        )
        self._history_pods = config.diagnostics_history
        # prioritize follows filter within one scheduling cycle; a few recent decisions are all it needs, and each
        # one holds a verdict per candidate node.
        self._last_filter: LRUCache[str, tuple[float, PodDecision]] = LRUCache(maxsize=LAST_FILTER_KEPT)
        self._history_lock = threading.Lock()
        self._context_lock = threading.Lock()
        self._context_key: tuple | None = None
        self._context: QuotaContext | None = None
        self.started_at = time.time()
        self.released_counts: dict[str, int] = {}

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        tune_for_large_heap()
        self.source.start(self.store)
        self.store.snapshot()
        freeze_loaded_state()

    def stop(self) -> None:
        self.source.stop()

    def health(self) -> SourceHealth:
        return self.source.health()

    # --- shared plumbing --------------------------------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        return self.store.snapshot()

    def quota_context(self, snapshot: ClusterSnapshot) -> QuotaContext:
        """Rebuilt only when a Kueue object, a Namespace or the ConfigMap changed (dict identity in snapshots)."""
        key = (snapshot.kueue_enabled, *(id(snapshot.objects[kind]) for kind in sorted(QUOTA_KINDS)))
        with self._context_lock:
            if self._context is None or key != self._context_key:
                self._context = build_quota_context(
                    snapshot, self.config.device_class_mappings, self.config.kueue_config
                )
                self._context_key = key
            return self._context

    def reconcile_reservations(self, snapshot: ClusterSnapshot) -> None:
        def pod_state(reservation: Reservation) -> str:
            pod = snapshot.pods.get(reservation.pod_key)
            if pod is None or (reservation.pod_uid and pod.uid and pod.uid != reservation.pod_uid):
                return "deleted" if reservation.seen else "pending"
            if (pod.node_name or in_flight_node(snapshot, pod)) and all(
                (claim := snapshot.claim_for_pod(pod, ref)) is not None and claim.allocation is not None
                for ref in pod.claims
            ):
                # Pods and claims arrive on separate watches: until the allocation is seen too, usage does not
                # show the charge yet, so releasing the reservation on the binding alone would count nothing.
                # An allocation reserved for the pod before its binding shows is already counted (in flight).
                return "bound"
            if pod.is_terminal:
                return "finished"
            if pod.deleting:
                return "deleted"
            return "seen"

        for reservation, why in self.reservations.reconcile(pod_state):
            self.released_counts[why] = self.released_counts.get(why, 0) + 1
            log.debug("released reservation of %s: %s", reservation.pod_key, why)

    def usage_with_reservations(
        self, snapshot: ClusterSnapshot, context: QuotaContext, *, excluding_pod: str = ""
    ) -> dict[QuotaKey, Fraction]:
        usage = dict(self.usage.usage(snapshot, context))
        held = self.reservations.totals_excluding(excluding_pod) if excluding_pod else self.reservations.totals()
        for key, amount in held.items():
            usage[key] = usage.get(key, Fraction(0)) + amount
        return usage

    def ledger(self, snapshot: ClusterSnapshot, context: QuotaContext, *, excluding_pod: str = "") -> QuotaLedger:
        return context.tree.ledger(self.usage_with_reservations(snapshot, context, excluding_pod=excluding_pod))

    def _decide(
        self, snapshot: ClusterSnapshot, pod: Pod, node_names: Iterable[str], *, started: float | None = None
    ) -> PodDecision:
        context = self.quota_context(snapshot)
        needs_quota = context.enabled and bool(context.cluster_queues) and QUEUE_NAME_LABEL in pod.labels
        ledger = self.ledger(snapshot, context, excluding_pod=pod.uid or pod.key) if needs_quota else None
        return decide_pod(
            snapshot,
            pod,
            node_names,
            matcher=self.matcher,
            free_index=self.free_index,
            quota_context=context,
            ledger=ledger,
            options=self.config.decisions,
            deadline=(started + self.config.request_deadline_seconds) if started is not None else None,
        )

    def _record(self, verb: str, decision: PodDecision, started: float) -> None:
        record = DecisionRecord(verb, time.time(), decision, time.perf_counter() - started)
        with self._history_lock:
            if _record_weight(record) > self.history.maxsize:
                return  # larger than the whole history allows: not kept
            self.history[decision.pod_key] = record
            while len(self.history) > self._history_pods:
                self.history.popitem()

    def _fast_path(self, snapshot: ClusterSnapshot, pod: Pod, node_names: Iterable[str]) -> PodDecision:
        """No claims and no queue: every known node passes, nothing is reserved or recorded."""
        return decide_pod(
            snapshot,
            pod,
            node_names,
            matcher=self.matcher,
            quota_context=None,
            ledger=None,
            options=self.config.decisions,
        )

    # --- verbs --------------------------------------------------------------------------------------------------

    def filter(self, pod: Pod, node_names: Iterable[str]) -> PodDecision:
        started = time.perf_counter()
        if not _needs_our_decision(pod):
            return self._fast_path(self.snapshot(), pod, node_names)
        with self.reservations.lock:
            # The snapshot must be taken under the lock: one taken before it may predate a binding that another
            # thread's reconcile has since turned from a reservation into usage, and would then count neither.
            snapshot = self.snapshot()
            self.reconcile_reservations(snapshot)
            decision = self._decide(snapshot, pod, node_names, started=started)
            pod_id = pod.uid or pod.key
            if decision.reservation:
                self.reservations.reserve(pod_id, pod.key, decision.quota.cluster_queue, decision.reservation)
            else:
                self.reservations.release(pod_id)
        with self._history_lock:  # cachetools caches are not thread-safe (an eviction racing a write raises)
            self._last_filter[pod_id] = (time.monotonic(), decision)
        self._record("filter", decision, started)
        return decision

    def prioritize(self, pod: Pod, node_names: Iterable[str]) -> PodDecision:
        """Scores for the nodes that passed filter; reuses the filter's decision for the same pod when it has one."""
        started = time.perf_counter()
        names = list(node_names)
        pod_id = pod.uid or pod.key
        with self._history_lock:
            previous = self._last_filter.get(pod_id)
        if previous is not None:
            filtered_at, decision = previous
            fresh = time.monotonic() - filtered_at < PRIORITIZE_REUSE_SECONDS
            if fresh and all(name in decision.verdicts for name in names):
                return decision
        snapshot = self.snapshot()
        if not _needs_our_decision(pod):
            return self._fast_path(snapshot, pod, names)
        decision = self._decide(snapshot, pod, names, started=started)
        self._record("prioritize", decision, started)
        return decision

    def explain(self, pod: Pod, node_names: Iterable[str] | None = None) -> PodDecision:
        """A what-if ranking: the same decision as filter, over every node by default, reserving nothing."""
        snapshot = self.snapshot()
        names = list(node_names) if node_names is not None else sorted(snapshot.nodes)
        return self._decide(snapshot, pod, names)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind through the API; on success hold exactly the charge of the node chosen, on failure nothing."""
        pod_id = uid or f"{namespace}/{name}"
        if self.binder is None:
            self.reservations.release(pod_id)
            raise BindError("binding needs a live cluster source (--kubeconfig or --in-cluster)")
        try:
            self.binder(namespace, name, uid, node)
        except Exception as error:
            self.reservations.release(pod_id)
            raise BindError(f"binding {namespace}/{name} to {node} failed: {error}") from error
        with self.reservations.lock:
            held = self.reservations.get(pod_id)
            with self._history_lock:
                previous = self._last_filter.get(pod_id)
            verdict = previous[1].verdicts.get(node) if previous is not None else None
            if held is not None and verdict is not None and verdict.passed and verdict.quota is not None:
                # The filter held the largest charge of all passing nodes; the node chosen may take less.
                self.reservations.reserve(pod_id, held.pod_key, held.cluster_queue, verdict.quota.charges)
            self.reservations.confirm(pod_id, node)

    def last_decision(self, namespace: str, name: str) -> DecisionRecord | None:
        with self._history_lock:
            return self.history.get(f"{namespace}/{name}")
