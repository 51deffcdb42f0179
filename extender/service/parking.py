"""Pods our filter refused for what a later change can lift, and when to ask for them to be tried again.

kube-scheduler gives an extender's refusal the fake plugin "Extender" and moves such a pod back to its queue
on any event of the unrolled wildcard list (framework/types.go UnrollWildCardResource: Pods, Nodes,
ResourceClaims, DeviceClasses and more; not ResourceSlices, DeviceTaintRules or Kueue's objects), and only
for events that arrive while the pod is in flight or after it was parked (scheduling_queue.go
determineSchedulingHintForInFlightPod, MoveAllToActiveOrBackoffQueue). Two ways a refused pod is then left
waiting for the unschedulable pool's 5-minute flush:

- What freed the quota or the devices is no such event: a ClusterQueue's nominal quota raised or a cohort
  changed, an admitted Workload's hold let go, a reservation lapsing, a ResourceSlice published or rebuilt, a
  DeviceTaintRule removed.
- Our view lagged behind kube-scheduler's: the pod deletion or claim deallocation that freed what the pod
  needs reached kube-scheduler's informers first, it tried the pod again at once, and our filter, not having
  seen the event yet, refused it. The event was spent before the pod went in flight, so nothing moves it.

So `ParkedPods` remembers, over the refusals since the last requeue, what the last one was decided against:
the quota context, the quota charged per (ClusterQueue, flavor, resource) (usage + reservations + provisional
+ admitted holds, what the view's ledger is built from) and the store's count of device releases. A later view
that shows the context rebuilt, a reservation expired, any charge lower, or a device released asks for one
requeue (kube/requeue.py): harmless when nothing fits after all, the pod is refused and parked again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from extender.decisions.devices.results import CATEGORY_NO_DEVICES, CATEGORY_POOL, CATEGORY_TAKEN
from extender.decisions.quota.context import QuotaContext
from extender.decisions.quota.verdicts import CATEGORY_QUOTA
from extender.service.quota_view import QuotaView
from extender.state.reservations import QuotaKey

# Refusals that quota or devices freed later can lift.
QUOTA_CATEGORIES = frozenset((CATEGORY_QUOTA,))
DEVICE_CATEGORIES = frozenset((CATEGORY_TAKEN, CATEGORY_NO_DEVICES, CATEGORY_POOL))


@dataclass(frozen=True, slots=True)
class ParkedAgainst:
    """What the last parking refusal was decided against."""

    context: QuotaContext
    charged: Mapping[QuotaKey, Fraction]
    device_releases: int


def charges_fell(before: Mapping[QuotaKey, Fraction], now: Mapping[QuotaKey, Fraction]) -> bool:
    return any(now.get(key, Fraction(0)) < amount for key, amount in before.items())


class ParkedPods:
    """Not thread-safe: the service calls it under its reservation lock."""

    def __init__(self) -> None:
        self.count = 0  # parking refusals since the last requeue
        self.against: ParkedAgainst | None = None

    def park(self, categories: Mapping[str, int], view: QuotaView) -> None:
        """Remember a refusal decided against `view` when one of its categories is one freed quota or devices
        can lift."""
        if QUOTA_CATEGORIES.isdisjoint(categories) and DEVICE_CATEGORIES.isdisjoint(categories):
            return
        self.count += 1
        self.against = ParkedAgainst(view.context, view.charged, view.snapshot.device_releases)

    def freed(self, view: QuotaView, *, expired: bool) -> bool:
        """Whether to requeue now, given a view brought up to date; forgets the parked pods when so."""
        against = self.against  # set exactly while count > 0
        if against is None:
            return False
        if not (
            expired
            or view.context is not against.context
            or view.snapshot.device_releases != against.device_releases
            or charges_fell(against.charged, view.charged)
        ):
            return False
        self.count = 0
        self.against = None
        return True
