"""ONE quota view: usage, reservations and Kueue's arithmetic over them, reconciled once, read by everything.

filter, prioritize, bind, /diagnostics/queues, the web of metrics: all of them read a `QuotaView` the service
builds under its reservation lock (reservations reconciled against the same snapshot first), so no two of them
can disagree about what a ClusterQueue has left. Kueue keeps the same split in its cache
(pkg/cache/scheduler: the ClusterQueue snapshot with usage of admitted workloads, plus what the current
scheduling cycle has assumed); here "assumed" is our reservation ledger.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from extender.decisions.quota.attribution import cluster_queue_of
from extender.decisions.quota.context import QuotaContext
from extender.decisions.quota.ledger import QuotaLedger
from extender.decisions.quota.preemption_oracle import Holder, HolderLookup
from extender.decisions.quota.workload_holds import own_workload
from extender.state.core import Pod
from extender.state.indexes.usage import ClaimUsage
from extender.state.reservations import QuotaKey, Reservation
from extender.state.snapshot import ClusterSnapshot

MAX_HOLDER_MEMO = 1024  # quota keys whose holders the service remembers; cleared, not evicted, past it


def add_amounts(*parts: Mapping[QuotaKey, Fraction]) -> dict[QuotaKey, Fraction]:
    total: dict[QuotaKey, Fraction] = {}
    for part in parts:
        for key, amount in part.items():
            total[key] = total.get(key, Fraction(0)) + amount
    return {key: amount for key, amount in total.items() if amount}


@dataclass(frozen=True)
class QuotaView:
    snapshot: ClusterSnapshot
    context: QuotaContext
    usage: Mapping[QuotaKey, Fraction]  # what bound pods (and pods being bound) hold, from the API's claims
    reserved: Mapping[QuotaKey, Fraction]  # what pods that passed filter hold until seen bound
    reservations_by_pod: Mapping[str, Reservation]  # those reservations by pod uid
    ledger: QuotaLedger  # Kueue's available / potentialAvailable over usage + reserved + admitted holds
    charged: Mapping[QuotaKey, Fraction]  # what the ledger is built from: usage + reserved + provisional + holds
    at: float  # the reservation clock when the view was taken (for "expires in")
    # What admitted Workloads hold beyond what their pods hold on nodes (decisions/quota/workload_holds.py): in
    # total, and per Workload key (its own pods are decided without it).
    admitted_holds: Mapping[QuotaKey, Fraction] = field(default_factory=dict)
    workload_holds: Mapping[str, Mapping[QuotaKey, Fraction]] = field(default_factory=dict)
    # placed pods' charges usage does not show yet (nominated, or claims not seen allocated), by pod key: only
    # of pods without a reservation; in the ledger, not in `usage`
    unbound_usage: Mapping[str, tuple[tuple[QuotaKey, Fraction], ...]] = field(default_factory=dict)
    provisional: Mapping[QuotaKey, Fraction] = field(default_factory=dict)  # their sum
    # (pod key, amount, admitted Workload key) of the bound pods counted in a quota key: the usage index's answer
    # (state/indexes/usage.py charged_pods), asked only when the preemption oracle runs; None when unknown
    charged_pods: Callable[[QuotaKey], Sequence[tuple[str, Fraction, str]]] | None = None
    # the service's memo of the holders derived from one charged_pods answer (by the answer's identity, kept in
    # the value so the id cannot be reused meanwhile): views come and go per call, the bound pods rarely change
    holder_memo: dict[tuple[QuotaKey, int], tuple[object, dict[str, Holder]]] | None = None
    # (claim key, entry) of the allocated claims no pod carries (counted in `usage` on their own entries) and of
    # those with a problem: asked by diagnostics only (state/indexes/usage.py claim_entries)
    claim_entries: Callable[[], Sequence[tuple[str, ClaimUsage]]] | None = None

    @property
    def reservations(self) -> tuple[Reservation, ...]:
        return tuple(self.reservations_by_pod.values())

    @property
    def governed(self) -> bool:
        return self.context.enabled and bool(self.context.cluster_queues)

    def own_workload_key(self, pod: Pod) -> str:
        """The admitted Workload whose hold the pod's charge replaces (decisions/quota/workload_holds.py
        own_workload), "" when none."""
        workload = own_workload(self.snapshot, pod, cluster_queue_of(pod, self.context))
        return workload.key if workload is not None else ""

    def ledger_excluding(self, pod_id: str, pod_key: str = "", workload: str = "") -> QuotaLedger:
        """The ledger without the pod's own charge: its reservation, the usage counted for it on a node it is
        nominated for (a pod nominated by preemption is filtered again), and the hold of the admitted Workload
        it belongs to (that hold is kept for its pods): never charged against itself."""
        own = self.reservations_by_pod.get(pod_id)
        counted = self.unbound_usage.get(pod_key, ())
        hold = self.workload_holds.get(workload) if workload else None
        if own is None and not counted and not hold:
            return self.ledger
        # Kueue's removeUsage along the pod's queue's path, O(depth), instead of a rebuild over every quota.
        known = self.context.cluster_queues  # the ledger ignored charges of a ClusterQueue deleted since
        removed = add_amounts(own.charges if own is not None else {}, dict(counted), hold or {})
        return self.ledger.with_usage_deltas(
            (cq, flavor, resource, -amount) for (cq, flavor, resource), amount in removed.items() if cq in known
        )

    def holders_lookup(self, pod_key: str, workload: str = "") -> HolderLookup | None:
        """Who holds each quota key, for the preemption oracle deciding pod `pod_key` (of admitted Workload
        `workload`): every pod and admitted Workload the ledger counts, but the pod and its Workload themselves
        (ledger_excluding leaves them out too). A Workload's pods and its remaining hold are one holder: Kueue
        preempts Workloads. None when the view cannot say who holds what."""
        if self.charged_pods is None:
            return None
        found: dict[QuotaKey, tuple[Holder, ...]] = {}

        def lookup(cluster_queue: str, flavor: str, resource: str) -> tuple[Holder, ...]:
            key = (cluster_queue, flavor, resource)
            holders = found.get(key)
            if holders is None:
                holders = found[key] = self._holders(key, pod_key, workload)
            return holders

        return lookup

    def _holders(self, key: QuotaKey, skip_pod: str, skip_workload: str) -> tuple[Holder, ...]:
        assert self.charged_pods is not None
        bound = self.charged_pods(key)
        units = dict(self._bound_holders(key, bound))
        units.pop(f"Pod {skip_pod}", None)
        if skip_workload:
            units.pop(f"Workload {skip_workload}", None)
        for reservation in self.reservations_by_pod.values():
            amount = reservation.charges.get(key)
            if amount:
                self._add_holder(units, key, reservation.pod_key, amount, reservation.workload, skip_pod, skip_workload)
        for pod_key, amounts in self.unbound_usage.items():
            for charged_key, amount in amounts:
                if charged_key == key:
                    self._add_holder(units, key, pod_key, amount, "", skip_pod, skip_workload)
        for workload_key, holds in self.workload_holds.items():
            amount = holds.get(key)
            if amount:
                self._add_holder(units, key, "", amount, workload_key, skip_pod, skip_workload)
        return tuple(units.values())

    def _bound_holders(self, key: QuotaKey, bound: Sequence[tuple[str, Fraction, str]]) -> dict[str, Holder]:
        """The holders of the bound pods' usage, remembered while the usage index answers the same tuple."""
        memo = self.holder_memo
        memo_key = (key, id(bound))
        if memo is not None:
            found = memo.get(memo_key)
            if found is not None and found[0] is bound:
                return found[1]
        units: dict[str, Holder] = {}
        for pod_key, amount, workload_key in bound:
            self._add_holder(units, key, pod_key, amount, workload_key, "", "")
        if memo is not None:
            if len(memo) >= MAX_HOLDER_MEMO:
                memo.clear()
            memo[memo_key] = (bound, units)
        return units

    def _add_holder(
        self,
        units: dict[str, Holder],
        key: QuotaKey,
        pod_key: str,
        amount: Fraction,
        workload_key: str,
        skip_pod: str,
        skip_workload: str,
    ) -> None:
        if not amount > 0 or (pod_key and pod_key == skip_pod) or (workload_key and workload_key == skip_workload):
            return
        workload = self.snapshot.workloads.get(workload_key) if workload_key else None
        if workload is not None:
            unit, priority, created = f"Workload {workload_key}", workload.priority, workload.created
        else:
            pod = self.snapshot.pods.get(pod_key)
            priority = (pod.priority or 0) if pod is not None else 0
            unit, created = f"Pod {pod_key}", pod.created if pod is not None else ""
        held = units.get(unit)
        units[unit] = Holder(unit, key[0], priority, created, amount if held is None else amount + held.amount)
