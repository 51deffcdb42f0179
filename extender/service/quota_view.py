"""ONE quota view: usage, reservations and Kueue's arithmetic over them, reconciled once, read by everything.

filter, prioritize, bind, /diagnostics/queues, the web of metrics: all of them read a `QuotaView` the service
builds under its reservation lock (reservations reconciled against the same snapshot first), so no two of them
can disagree about what a ClusterQueue has left. Kueue keeps the same split in its cache
(pkg/cache/scheduler: the ClusterQueue snapshot with usage of admitted workloads, plus what the current
scheduling cycle has assumed); here "assumed" is our reservation ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from extender.decisions.quota.context import QuotaContext
from extender.decisions.quota.ledger import QuotaLedger
from extender.state.reservations import QuotaKey, Reservation
from extender.state.snapshot import ClusterSnapshot


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

    @property
    def reservations(self) -> tuple[Reservation, ...]:
        return tuple(self.reservations_by_pod.values())

    @property
    def governed(self) -> bool:
        return self.context.enabled and bool(self.context.cluster_queues)

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
