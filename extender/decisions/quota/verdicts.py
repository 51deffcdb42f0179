"""What quota says about a pod: a rejection of the pod itself, or a verdict per node, and what to reserve.

The texts follow Kueue's own wording where Kueue has one (pkg/scheduler/flavorassigner/flavorassigner.go
fitsResourceQuota: "insufficient quota ...", "insufficient unused quota ..."), and a reason that depends only
on the flavor is worded identically on every node of that flavor, so kube-scheduler's FailedScheduling event
aggregates it. The categories are the labels of the filter metrics and of the explain view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

from extender.decisions.quota.fit import Fit, FitOutcome
from extender.state.quantity import format_quantity
from extender.state.reservations import QuotaKey

CATEGORY_QUEUE = "queue-config"
CATEGORY_STOPPED = "queue-stopped"
CATEGORY_FLAVOR = "other-flavor"
CATEGORY_QUOTA = "quota-exhausted"
CATEGORY_QUOTA_NEVER = "quota-exceeds-maximum"
CATEGORY_UNCOVERED = "resource-not-covered"
CATEGORY_UNMAPPED = "class-not-mapped"


class QuotaRejection(NamedTuple):
    """Why quota refuses: a text for people, whether waiting can help, and the metric category."""

    summary: str
    unresolvable: bool
    category: str


class NodeQuota(NamedTuple):
    """One node's quota numbers: the charge and Kueue's verdict per flavor-resource. A NamedTuple: nodes of one
    charge and flavors share one, and one is built per such bucket of nodes."""

    charges: Mapping[QuotaKey, Fraction]
    fits: tuple[Fit, ...]
    flavor: str  # the node's flavor for the pod's primary resource ("" when nothing is charged)
    rejection: QuotaRejection | None = None

    @property
    def admissible(self) -> bool:
        return self.rejection is None


@dataclass(frozen=True)
class QuotaDecision:
    """Quota's answer for one pod over its device-feasible nodes."""

    governed: bool
    cluster_queue: str = ""
    pod_rejection: QuotaRejection | None = None  # applies to every node
    per_node: Mapping[str, NodeQuota] = field(default_factory=dict)
    chosen_flavor: str = ""
    reservation: Mapping[QuotaKey, Fraction] = field(default_factory=dict)  # what to hold for the pod
    # The nodes of `per_node` whose NodeQuota refuses them, by that NodeQuota (nodes of one charge and flavor
    # share it): the caller answers them a group at a time instead of a node at a time.
    refused_groups: tuple[tuple[NodeQuota, list[str]], ...] = ()
    # The other nodes of `per_node` (they pass), by their NodeQuota: scoring goes a group at a time too.
    passed_groups: tuple[tuple[NodeQuota, list[str]], ...] = ()
    # Decided for a gang (decision.GroupCharge): the pod's own part of `reservation`, in the same flavors; None
    # when the decision is the pod's alone (then `reservation` is all its own).
    own_reservation: Mapping[QuotaKey, Fraction] | None = None

    @property
    def own(self) -> Mapping[QuotaKey, Fraction]:
        return self.reservation if self.own_reservation is None else self.own_reservation


NOT_GOVERNED = QuotaDecision(governed=False)


def reject_pod(summary: str, category: str, *, unresolvable: bool = True) -> QuotaDecision:
    """A decision refusing the pod on every node."""
    return QuotaDecision(governed=True, pod_rejection=QuotaRejection(summary, unresolvable, category))


def fit_rejection(fit: Fit) -> QuotaRejection:
    """The rejection a resource's verdict says, worded as Kueue's fitsResourceQuota reasons."""
    requested = format_quantity(fit.requested)
    if fit.outcome is FitOutcome.NOT_COVERED:
        return QuotaRejection(
            f"ClusterQueue {fit.cluster_queue} has no quota for {fit.resource} in flavor {fit.flavor}",
            True,
            CATEGORY_UNCOVERED,
        )
    if fit.outcome is FitOutcome.NEVER_FITS:
        return QuotaRejection(
            f"ClusterQueue {fit.cluster_queue} can never provide {requested} {fit.resource} in flavor {fit.flavor} "
            f"(at most {format_quantity(fit.potential_available)})",
            True,
            CATEGORY_QUOTA_NEVER,
        )
    if fit.outcome is FitOutcome.INACTIVE:
        return QuotaRejection(f"ClusterQueue {fit.cluster_queue} is inactive: {fit.reason}", True, CATEGORY_QUEUE)
    return QuotaRejection(
        f"ClusterQueue {fit.cluster_queue} quota exhausted for {fit.resource} in flavor {fit.flavor}: "
        f"requested {requested}, available {format_quantity(fit.available)}",
        False,
        CATEGORY_QUOTA,
    )
