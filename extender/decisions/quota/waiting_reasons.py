"""Why a pod waits when its resource group's flavor walk found no flavor that fits as it stands.

Two cases, worded once per group so that every node says the same (kube-scheduler's FailedScheduling event
aggregates identical reasons):

- The walk stopped at (or preferred) a flavor where Kueue would preempt or reclaim (preemption_oracle.py): the
  reason names the flavor, whom Kueue would preempt (their queue and priority), and that the extender never
  evicts: Kueue, or an operator, must make the room.
- No flavor can take the request now (Kueue's NoFit, or no preemption candidates anywhere): the reason lists
  each flavor the walk judged with its shortfall, as Kueue's assignment status lists its per-flavor reasons.
  Waiting cannot help only when every flavor is beyond the ClusterQueue's maximum capacity.
"""

from __future__ import annotations

from extender.decisions.quota.fit import Fit, FitOutcome, worst_fit
from extender.decisions.quota.flavor_walk import FlavorAssignmentMode, FlavorAttempt, GroupChoice
from extender.decisions.quota.preemption_oracle import Holder, OracleAnswer, PreemptionPossibility
from extender.decisions.quota.verdicts import CATEGORY_QUOTA, CATEGORY_QUOTA_NEVER, QuotaRejection, fit_rejection
from extender.state.quantity import format_quantity

MAX_TARGETS_NAMED = 5
_PREEMPTING = (FlavorAssignmentMode.PREEMPT, FlavorAssignmentMode.RECLAIM)


def group_refusal(cluster_queue: str, choice: GroupChoice, names: str) -> QuotaRejection | None:
    """The refusal every node shares for this group, or None when its chosen flavor fits as it stands (or the
    walk had nothing to judge: the nodes' own reasons say why)."""
    if choice.admitted or not choice.attempts:
        return None
    mode = choice.mode.preemption
    if mode == FlavorAssignmentMode.FIT:
        return None
    if choice.flavor and mode in _PREEMPTING:
        chosen = next(attempt for attempt in choice.attempts if attempt.flavor == choice.flavor)
        return QuotaRejection(_preemption_text(cluster_queue, chosen, names), False, CATEGORY_QUOTA)
    never = all(_unresolvable(attempt) for attempt in choice.attempts)
    category = CATEGORY_QUOTA_NEVER if never else CATEGORY_QUOTA
    if len(choice.attempts) == 1 and (single := _single_flavor_text(choice.attempts[0])):
        return QuotaRejection(single, never, category)
    parts = "; ".join(f"{attempt.flavor}: {_shortfall(attempt)}" for attempt in choice.attempts)
    summary = f"no flavor of ClusterQueue {cluster_queue} fits this pod's {names} now ({parts})"
    return QuotaRejection(summary, never, category)


def _single_flavor_text(attempt: FlavorAttempt) -> str:
    """With one flavor to choose from, its own verdict in Kueue's words (fitsResourceQuota's), with how much more
    is needed and what preemption could do: there is no list of flavors to give."""
    worst = worst_fit(attempt.fits)
    if worst is None:
        return ""
    own = fit_rejection(worst).summary
    if worst.outcome is not FitOutcome.NEEDS_PREEMPTION:
        return own
    needed = _needed(worst)
    tail = _shortfall(attempt)
    return own + f", {format_quantity(worst.shortfall)} more needed" + tail[len(needed) :]


def _unresolvable(attempt: FlavorAttempt) -> bool:
    worst = worst_fit(attempt.fits)
    return worst is not None and fit_rejection(worst).unresolvable


def _targets_text(answer: OracleAnswer) -> str:
    named = [_holder_text(holder) for holder in answer.targets[:MAX_TARGETS_NAMED]]
    more = len(answer.targets) - len(named)
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def _holder_text(holder: Holder) -> str:
    return f"{holder.unit} (ClusterQueue {holder.cluster_queue}, priority {holder.priority})"


def _preemption_text(cluster_queue: str, attempt: FlavorAttempt, names: str) -> str:
    """Kueue's shortfall in the flavor, then whom Kueue would preempt; the reason alone when no oracle was asked
    (the holders of quota are not known here)."""
    worst = worst_fit(attempt.fits)
    exhausted = fit_rejection(worst).summary if worst is not None else f"ClusterQueue {cluster_queue}: no room"
    answers = [answer for answer in attempt.answers if answer.targets]
    if not answers:
        return exhausted
    verb = "preempt" if any(a.possibility is PreemptionPossibility.PREEMPT for a in answers) else "reclaim quota from"
    targets = "; ".join(_targets_text(answer) for answer in answers)
    return (
        f"{exhausted}; there is room for this pod's {names} only if Kueue would {verb} {targets}; "
        f"the extender never evicts: Kueue (or an operator) must make the room"
    )


def _shortfall(attempt: FlavorAttempt) -> str:
    """One flavor's reason, as short as it can say it."""
    worst = worst_fit(attempt.fits)
    if worst is None:
        return "no node of this flavor can take the devices"
    if worst.outcome is FitOutcome.NEEDS_PREEMPTION:
        text = _needed(worst)
        mode = attempt.mode.preemption
        if mode == FlavorAssignmentMode.NO_CANDIDATES:
            return f"{text}, nothing Kueue may preempt for it"
        if mode in _PREEMPTING:
            targets = "; ".join(_targets_text(answer) for answer in attempt.answers if answer.targets)
            return f"{text}, Kueue could preempt {targets or 'workloads holding it'}"
        return text
    return fit_rejection(worst).summary


def _needed(fit: Fit) -> str:
    return (
        f"quota exhausted for {fit.resource}: requested {format_quantity(fit.requested)}, "
        f"available {format_quantity(fit.available)}, {format_quantity(fit.shortfall)} more needed"
    )
