"""Kueue's flavor walk for one resource group: which ResourceFlavor the pod's charge is assigned.

Follows Kueue v0.19.2 pkg/scheduler/flavorassigner/flavorassigner.go: findFlavorForPodSets tries the group's
flavors in order, judges each by a granularMode (a preemption mode and a borrowing level, from
fitsResourceQuota), stops where shouldTryNextFlavor says so under the ClusterQueue's flavorFungibility, and
otherwise keeps the flavor isPreferred ranks best.

Where a request does not fit as it stands, the walk asks the preemption oracle (preemption_oracle.py) exactly
where fitsResourceQuota asks Kueue's: whether anyone could be preempted for it, and at what borrowing level.

Kueue decides flavors blind to nodes. Here a flavor is judged by the best of its device-feasible nodes, each
with the charge the allocator's devices would take there (`candidates`), so a pod is sent where both devices
and quota exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from extender.decisions.quota.charges import Charge
from extender.decisions.quota.context import QuotaContext, untolerated_taint
from extender.decisions.quota.fit import Fit, FitOutcome
from extender.decisions.quota.ledger import QuotaLedger
from extender.decisions.quota.preemption_oracle import (
    OracleAnswer,
    PreemptionOracle,
    PreemptionPossibility,
    height_that_fits,
)
from extender.decisions.quota.tree import FlavorResource
from extender.state.core import Toleration
from extender.state.kueue.cluster_queue import ClusterQueue, FlavorFungibility, FungibilityPolicy, FungibilityPreference
from extender.state.kueue.quotas import ResourceGroup

# Kueue's verdicts per (flavor, charge) of one ClusterQueue, shared by the walk and the verdicts of one call.
FitMemo = dict[tuple[str, Charge], tuple[Fit, ...]]
# The flavors holding a set of nodes (context.flavors_of_node), in the group's order.
FlavorSet = tuple[str, ...]


class FlavorAssignmentMode(IntEnum):
    """Kueue's preemptionMode inside the assigner (granularMode), ordered from lowest to highest preference."""

    NO_FIT = 0
    """noFit: not enough quota to assign this flavor, now or by preemption."""
    NO_CANDIDATES = 1
    """noPreemptionCandidates: preemption could make room by quota, but the oracle found nobody to preempt."""
    PREEMPT = 2
    """preempt: Kueue would preempt in the pod's own ClusterQueue; the extender does not preempt."""
    RECLAIM = 3
    """reclaim: Kueue would reclaim quota lent to other ClusterQueues of the cohort."""
    FIT = 4
    """fit: enough unused quota to assign this flavor without preemption, possibly by borrowing."""


_FROM_POSSIBILITY = {
    PreemptionPossibility.NO_CANDIDATES: FlavorAssignmentMode.NO_CANDIDATES,
    PreemptionPossibility.PREEMPT: FlavorAssignmentMode.PREEMPT,
    PreemptionPossibility.RECLAIM: FlavorAssignmentMode.RECLAIM,
}


class GranularMode(NamedTuple):
    """Kueue's granularMode: the preemption mode and the borrowing level of one request in one flavor."""

    preemption: FlavorAssignmentMode
    borrowing: int  # 0: within nominal quota; else the height of the cohort subtree the request fits in


WORST_MODE = GranularMode(FlavorAssignmentMode.NO_FIT, 1 << 30)  # worstGranularMode
BEST_MODE = GranularMode(FlavorAssignmentMode.FIT, 0)  # bestGranularMode


class ModeJudge:
    """What judging a flavor's fits needs beyond them: the queue, the ledger and the preemption oracle, made on
    first need (most decisions never ask it). No oracle (`make_oracle` None): the holders of quota are not
    known, e.g. a what-if without a cluster; then a request within nominal quota counts as one preemption could
    make room for."""

    __slots__ = ("_make_oracle", "_oracle", "cluster_queue", "ledger")

    def __init__(
        self,
        cluster_queue: ClusterQueue,
        ledger: QuotaLedger,
        make_oracle: Callable[[], PreemptionOracle] | None = None,
    ) -> None:
        self.cluster_queue = cluster_queue
        self.ledger = ledger
        self._make_oracle = make_oracle
        self._oracle: PreemptionOracle | None = None

    @property
    def oracle(self) -> PreemptionOracle | None:
        if self._oracle is None and self._make_oracle is not None:
            self._oracle = self._make_oracle()
        return self._oracle


def resource_mode(fit: Fit, judge: ModeJudge) -> tuple[GranularMode, OracleAnswer | None]:
    """fitsResourceQuota's mode for one resource, asking the oracle where Kueue asks it."""
    if fit.outcome is FitOutcome.FITS:
        return BEST_MODE, None
    tree = judge.ledger.tree
    queue = tree.find_queue(fit.cluster_queue)
    if fit.outcome is FitOutcome.FITS_BY_BORROWING:
        assert queue is not None
        height, _ = height_that_fits(tree, judge.ledger, queue, FlavorResource(fit.flavor, fit.resource), fit.requested)
        return GranularMode(FlavorAssignmentMode.FIT, max(height, 1)), None
    if fit.outcome is not FitOutcome.NEEDS_PREEMPTION:
        return WORST_MODE, None
    oracle = judge.oracle
    if oracle is None:
        if fit.nominal >= fit.requested:
            return GranularMode(FlavorAssignmentMode.PREEMPT, 0), None
        return WORST_MODE, None
    if not oracle.may_preempt(judge.cluster_queue, fit.flavor, fit.resource, fit.requested):
        return WORST_MODE, None
    answer = oracle.simulate(judge.cluster_queue, fit.flavor, fit.resource, fit.requested)
    return GranularMode(_FROM_POSSIBILITY[answer.possibility], answer.borrow), answer


def mode_of(
    fits: tuple[Fit, ...], judge: ModeJudge, fungibility: FlavorFungibility
) -> tuple[GranularMode, tuple[OracleAnswer, ...]]:
    """The representative granularMode of one node's request in one flavor: the worst of its resources by
    isPreferred (findFlavorForPodSets), with the oracle's answers behind it."""
    representative = BEST_MODE
    answers: list[OracleAnswer] = []
    for fit in fits:
        mode, answer = resource_mode(fit, judge)
        if answer is not None:
            answers.append(answer)
        if is_preferred(representative, mode, fungibility):
            representative = mode
        if representative.preemption == FlavorAssignmentMode.NO_FIT:
            break
    return representative, tuple(answers)


def is_preferred(a: GranularMode, b: GranularMode, fungibility: FlavorFungibility) -> bool:
    """isPreferred: is mode a better than b under the queue's fungibility preference?"""
    if a.preemption == FlavorAssignmentMode.NO_FIT:
        return False
    if b.preemption == FlavorAssignmentMode.NO_FIT:
        return True
    a_none = a.preemption == FlavorAssignmentMode.NO_CANDIDATES
    if a_none != (b.preemption == FlavorAssignmentMode.NO_CANDIDATES):
        return not a_none  # a flavor nobody can be preempted in ranks below every viable one
    if fungibility.preference is FungibilityPreference.PREEMPTION_OVER_BORROWING:
        if a.borrowing != b.borrowing:
            return a.borrowing < b.borrowing
        return a.preemption > b.preemption
    if a.preemption != b.preemption:
        return a.preemption > b.preemption
    return a.borrowing < b.borrowing


def should_try_next_flavor(mode: GranularMode, fungibility: FlavorFungibility) -> bool:
    """shouldTryNextFlavor: whenCanPreempt / whenCanBorrow decide whether the walk stops at this flavor."""
    if mode.preemption in (FlavorAssignmentMode.NO_FIT, FlavorAssignmentMode.NO_CANDIDATES):
        return True
    if (
        mode.preemption in (FlavorAssignmentMode.PREEMPT, FlavorAssignmentMode.RECLAIM)
        and fungibility.when_can_preempt is FungibilityPolicy.TRY_NEXT_FLAVOR
    ):
        return True
    return mode.borrowing > 0 and fungibility.when_can_borrow is FungibilityPolicy.TRY_NEXT_FLAVOR


class FlavorAttempt(NamedTuple):
    """One flavor the walk judged: its mode, the verdicts of the candidate that gave it, and the oracle's
    answers behind it (for the reason a pod waits with)."""

    flavor: str
    mode: GranularMode
    fits: tuple[Fit, ...]
    answers: tuple[OracleAnswer, ...]


@dataclass(frozen=True, slots=True)
class GroupChoice:
    """The walk's answer for one resource group."""

    flavor: str  # "" when no flavor can take the request now
    mode: GranularMode
    skipped: tuple[str, ...]  # why flavors were passed over (for the pod-level reason)
    admitted: bool = False  # Kueue already admitted the pod's Workload to this flavor
    attempts: tuple[FlavorAttempt, ...] = ()  # every flavor judged, in order


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


def _judge_flavor(
    name: str, candidates: list[tuple[FlavorSet, Charge]], judge: ModeJudge, fit_memo: FitMemo
) -> FlavorAttempt:
    """A flavor's mode: the best any of its candidates reaches."""
    fungibility = judge.cluster_queue.flavor_fungibility
    best = FlavorAttempt(name, WORST_MODE, (), ())
    for flavor_set, group_charge in candidates:
        if name not in flavor_set:
            continue
        fits = fits_in(judge.cluster_queue, name, group_charge, judge.ledger, fit_memo)
        node_mode, answers = mode_of(fits, judge, fungibility)
        if not best.fits or is_preferred(node_mode, best.mode, fungibility):
            best = FlavorAttempt(name, node_mode, fits, answers)
    return best


def walk_group(
    group: ResourceGroup,
    context: QuotaContext,
    tolerations: tuple[Toleration, ...],
    candidates: list[tuple[FlavorSet, Charge]],
    judge: ModeJudge,
    admitted_flavor: str,
    fit_memo: FitMemo,
) -> GroupChoice:
    """One resource group's walk over its flavors in order, independently of the other groups (Kueue's
    findFlavorForPodSets). `candidates`: the flavors holding some device-feasible nodes, with the group's part
    of the charge those nodes would take. A flavor's mode is the best any of its candidates reaches; the walk
    stops where shouldTryNextFlavor says so, else keeps the preferred. `admitted_flavor`: the flavor Kueue
    already admitted the pod's Workload to for this group ("" when none): the walk takes it as it is."""
    fungibility = judge.cluster_queue.flavor_fungibility
    best, best_mode = "", WORST_MODE
    skipped: list[str] = []
    attempts: list[FlavorAttempt] = []
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
        attempt = _judge_flavor(name, candidates, judge, fit_memo)
        attempts.append(attempt)
        mode = attempt.mode
        if admitted_flavor:
            return GroupChoice(name, mode, tuple(skipped), admitted=True, attempts=tuple(attempts))
        if not should_try_next_flavor(mode, fungibility):
            return GroupChoice(name, mode, tuple(skipped), attempts=tuple(attempts))
        if is_preferred(mode, best_mode, fungibility):
            best, best_mode = name, mode
    return GroupChoice(best, best_mode, tuple(skipped), attempts=tuple(attempts))
