"""Quota admitted Workloads hold beyond what their pods already hold, kept in step with the cluster view.

The rule of what a Workload holds is a decision (decisions/quota/workload_holds.py: per pod set, what Kueue
admitted it for minus what that pod set's pods hold, never below zero); this index only keeps, per Workload,
what Kueue admitted it for and the remaining hold, and their sum per quota key. It is refreshed from the usage
index's list of Workloads whose pods' usage (or whose object) changed, so a watch event costs the Workloads it
touches, not all of them.
Reservations (pods between filter and binding) change per call and are few: the quota view subtracts them
from the holds of their Workloads when it is built (service/quota_view.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from extender.state.indexes.usage import UsageIndex
from extender.state.kueue.workload import Workload
from extender.state.reservations import QuotaKey, add_signed
from extender.state.snapshot import ClusterSnapshot

PodSetAmounts = Mapping[str, Mapping[QuotaKey, Fraction]]  # pod set name -> quota key -> amount
AdmittedQuota = Callable[[Workload], PodSetAmounts]
RemainingHold = Callable[[PodSetAmounts, PodSetAmounts], Mapping[QuotaKey, Fraction]]


@dataclass(frozen=True, slots=True)
class AdmissionHolds:
    """One consistent read of the index (copies: the index moves on)."""

    totals: Mapping[QuotaKey, Fraction]  # sum of every Workload's remaining hold
    by_workload: Mapping[str, Mapping[QuotaKey, Fraction]]  # Workload key -> its remaining hold (non-empty only)
    admitted: Mapping[str, Mapping[QuotaKey, Fraction]]  # Workload key -> what Kueue admitted it for


class AdmissionHoldIndex:
    """Thread-safe; `refresh` is called right after the usage index was brought up to `snapshot`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._basis: object = None
        self._admitted: dict[str, Mapping[QuotaKey, Fraction]] = {}
        self._holds: dict[str, Mapping[QuotaKey, Fraction]] = {}
        self._totals: dict[QuotaKey, Fraction] = {}
        self.full_recomputes = 0

    def refresh(
        self,
        snapshot: ClusterSnapshot,
        basis: object,
        usage: UsageIndex,
        admitted_quota: AdmittedQuota,
        remaining_hold: RemainingHold,
    ) -> AdmissionHolds:
        with self._lock:
            changed = usage.take_changed_workloads()
            if changed is None or basis is not self._basis:
                self.full_recomputes += 1
                self._admitted.clear()
                self._holds.clear()
                self._totals = {}
                keys: set[str] | list[str] = list(snapshot.workloads)
                self._basis = basis
            else:
                keys = changed
            for key in keys:
                workload = snapshot.workloads.get(key)
                admitted = admitted_quota(workload) if workload is not None else {}
                hold = remaining_hold(admitted, usage.pod_set_usage(key)) if admitted else {}
                self._set(key, _summed(admitted), hold)
            return AdmissionHolds(dict(self._totals), dict(self._holds), dict(self._admitted))

    def _set(self, key: str, admitted: Mapping[QuotaKey, Fraction], hold: Mapping[QuotaKey, Fraction]) -> None:
        add_signed(self._totals, self._holds.pop(key, {}).items(), -1)
        self._admitted.pop(key, None)
        if admitted:
            self._admitted[key] = dict(admitted)
        if hold:
            self._holds[key] = dict(hold)
            add_signed(self._totals, hold.items(), 1)


def _summed(by_pod_set: PodSetAmounts) -> dict[QuotaKey, Fraction]:
    total: dict[QuotaKey, Fraction] = {}
    for amounts in by_pod_set.values():
        add_signed(total, amounts.items(), 1)
    return total
