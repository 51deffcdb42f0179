"""Kueue's flavor walk for one resource group: which ResourceFlavor the pod's charge is assigned.

Follows Kueue v0.19.2 pkg/scheduler/flavorassigner/flavorassigner.go: findFlavorForPodSets tries the group's
flavors in order, judges each by a granularMode (a preemption mode and a borrowing level, from
fitsResourceQuota), stops where shouldTryNextFlavor says so under the ClusterQueue's flavorFungibility, and
otherwise keeps the flavor isPreferred ranks best.

Kueue decides flavors blind to nodes. Here a flavor is judged by the best of its device-feasible nodes, each
with the charge the allocator's devices would take there (`candidates`), so a pod is sent where both devices
and quota exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from extender.decisions.quota.charges import Charge
from extender.decisions.quota.context import QuotaContext, untolerated_taint
from extender.decisions.quota.fit import Fit, FitOutcome
from extender.decisions.quota.ledger import QuotaLedger
from extender.state.core import Toleration
from extender.state.kueue.cluster_queue import ClusterQueue, FlavorFungibility, FungibilityPolicy, FungibilityPreference
from extender.state.kueue.quotas import ResourceGroup

# Kueue's verdicts per (flavor, charge) of one ClusterQueue, shared by the walk and the verdicts of one call.
FitMemo = dict[tuple[str, Charge], tuple[Fit, ...]]
# The flavors holding a set of nodes (context.flavors_of_node), in the group's order.
FlavorSet = tuple[str, ...]


class FlavorAssignmentMode(IntEnum):
    """Kueue's FlavorAssignmentMode (its preemptionMode inside the assigner), ordered from lowest to highest
    preference. Only the order counts; the gaps stand for Kueue's modes between these that need a preemption
    simulation (reclaim within the cohort), which the extender does not run."""

    NO_FIT = 0
    """NoFit: not enough quota to assign this flavor, now or by preemption."""
    PREEMPT = 2
    """Preempt: the request is within the ClusterQueue's nominal quota, so preemption (or workloads finishing)
    could make room; the extender does not preempt."""
    FIT = 4
    """Fit: enough unused quota to assign this flavor without preemption, possibly by borrowing."""


class GranularMode(NamedTuple):
    """Kueue's granularMode: the preemption mode and the borrowing level of one request in one flavor."""

    preemption: FlavorAssignmentMode
    borrowing: int  # 0: within nominal quota; 1: borrowing from the cohort


WORST_MODE = GranularMode(FlavorAssignmentMode.NO_FIT, 1 << 30)  # worstGranularMode


def mode_of(fits: tuple[Fit, ...]) -> GranularMode:
    """granularMode for one node's request in one flavor: the worst of its resources (fitsResourceQuota).

    The extender cannot simulate preemption; like Kueue it treats a request above what is free but within the
    ClusterQueue's nominal quota as one preemption could make room for, anything else that does not fit now
    as no fit."""
    preemption, borrowing = FlavorAssignmentMode.FIT, 0
    for fit in fits:
        if fit.outcome is FitOutcome.FITS:
            continue
        if fit.outcome is FitOutcome.FITS_BY_BORROWING:
            borrowing = 1
        elif fit.outcome is FitOutcome.NEEDS_PREEMPTION and fit.nominal >= fit.requested:
            preemption = min(preemption, FlavorAssignmentMode.PREEMPT)
        else:
            return WORST_MODE
    return GranularMode(preemption, borrowing)


def is_preferred(a: GranularMode, b: GranularMode, fungibility: FlavorFungibility) -> bool:
    """isPreferred: is mode a better than b under the queue's fungibility preference?"""
    if a.preemption == FlavorAssignmentMode.NO_FIT:
        return False
    if b.preemption == FlavorAssignmentMode.NO_FIT:
        return True
    if fungibility.preference is FungibilityPreference.PREEMPTION_OVER_BORROWING:
        if a.borrowing != b.borrowing:
            return a.borrowing < b.borrowing
        return a.preemption > b.preemption
    if a.preemption != b.preemption:
        return a.preemption > b.preemption
    return a.borrowing < b.borrowing


def should_try_next_flavor(mode: GranularMode, fungibility: FlavorFungibility) -> bool:
    """shouldTryNextFlavor: whenCanPreempt / whenCanBorrow decide whether the walk stops at this flavor."""
    if mode.preemption == FlavorAssignmentMode.NO_FIT:
        return True
    if (
        mode.preemption == FlavorAssignmentMode.PREEMPT
        and fungibility.when_can_preempt is FungibilityPolicy.TRY_NEXT_FLAVOR
    ):
        return True
    return mode.borrowing > 0 and fungibility.when_can_borrow is FungibilityPolicy.TRY_NEXT_FLAVOR


@dataclass(frozen=True, slots=True)
class GroupChoice:
    """The walk's answer for one resource group."""

    flavor: str  # "" when no flavor can take the request now
    mode: GranularMode
    skipped: tuple[str, ...]  # why flavors were passed over (for the pod-level reason)
    admitted: bool = False  # Kueue already admitted the pod's Workload to this flavor


def fits_in(
    cluster_queue: ClusterQueue, flavor: str, charge: Charge, ledger: QuotaLedger, memo: FitMemo
) -> tuple[Fit, ...]:
    """Kueue's verdict for each resource of `charge` in `flavor`, remembered for the call."""
    key = (flavor, charge)
    fits = memo.get(key)
    if fits is None:
        fits = tuple(ledger.fits(cluster_queue.name, flavor, resource, amount) for resource, amount in charge)
        memo[key] = fits
    return fits


def walk_group(
    cluster_queue: ClusterQueue,
    group: ResourceGroup,
    context: QuotaContext,
    tolerations: tuple[Toleration, ...],
    candidates: list[tuple[FlavorSet, Charge]],
    ledger: QuotaLedger,
    admitted_flavor: str,
    fit_memo: FitMemo,
) -> GroupChoice:
    """One resource group's walk over its flavors in order, independently of the other groups (Kueue's
    findFlavorForPodSets). `candidates`: the flavors holding some device-feasible nodes, with the group's part
    of the charge those nodes would take. A flavor's mode is the best any of its candidates reaches; the walk
    stops where shouldTryNextFlavor says so, else keeps the preferred. `admitted_flavor`: the flavor Kueue
    already admitted the pod's Workload to for this group ("" when none): the walk takes it as it is."""
    fungibility = cluster_queue.flavor_fungibility
    best, best_mode = "", WORST_MODE
    skipped: list[str] = []
    for flavor_quotas in group.flavors:
        name = flavor_quotas.name
        if admitted_flavor and name != admitted_flavor:
            continue
        flavor = context.flavors.get(name)
        if flavor is None:
            continue
        taint = untolerated_taint(flavor, tolerations)
        if taint is not None:
            skipped.append(f"untolerated taint {taint} in flavor {name}")
            continue
        mode = WORST_MODE
        for flavor_set, group_charge in candidates:
            if name not in flavor_set:
                continue
            node_mode = mode_of(fits_in(cluster_queue, name, group_charge, ledger, fit_memo))
            if is_preferred(node_mode, mode, fungibility):
                mode = node_mode
        if admitted_flavor:
            return GroupChoice(name, mode, tuple(skipped), admitted=True)
        if not should_try_next_flavor(mode, fungibility):
            return GroupChoice(name, mode, tuple(skipped))
        if is_preferred(mode, best_mode, fungibility):
            best, best_mode = name, mode
    return GroupChoice(best, best_mode, tuple(skipped))
