"""All-or-nothing quota for a gang: asked about one pod of a PodGroup, decide for the group.

kube-scheduler schedules a gang in one pod-group cycle (pkg/scheduler/schedule_one_podgroup.go
podGroupSchedulingDefaultAlgorithm): each pod in turn through the ordinary algorithm (so through our filter),
assumed, and everything reverted when fewer than minCount fit. Kueue admits a pod set whole: one flavor per
resource group for all its pods, the pod count times the per-pod request judged at once (pkg/scheduler/
flavorassigner). So the question for a pod of a gang is the group's: can the ClusterQueue (and its cohort) take
this pod and the rest of the gang's minCount not yet placed or reserved, in one flavor? This module asks it as a
layer above decide_quota: the rest of the gang's charge (`GangNeed.others` times this pod's charge, the group's
claims counted once) goes in as `group_extra`, so Kueue's flavor walk and fit judge the whole need on each node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from extender.decisions.quota.verdicts import CATEGORY_QUOTA, QuotaDecision, reject_pod
from extender.state.quantity import format_quantity
from extender.state.reservations import QuotaKey

CATEGORY_GANG = CATEGORY_QUOTA  # a gang refused for quota counts as a quota refusal in the metrics


@dataclass(frozen=True, slots=True)
class GangNeed:
    """What a pod of a gang asks of quota, as the service sees the group's attempt."""

    group_key: str
    min_count: int
    placed: int  # members bound or nominated: usage (or provisional usage) covers them
    in_attempt: int  # other members holding a reservation of this attempt
    # the group's claims' charge a member of the attempt already holds (QuotaKey amounts): credited to this pod
    claims_held: Mapping[QuotaKey, Fraction] = field(default_factory=dict)
    # quota resource -> what the group's pending claims take (charged once for the whole group)
    claims_demand: Mapping[str, Fraction] = field(default_factory=dict)
    # what the attempt holds for the rest of the gang now (credited to this pod's ledger)
    held_rest: Mapping[QuotaKey, Fraction] = field(default_factory=dict)
    # other pending members that charge nothing of their own (no claims but the group's, no extended
    # resources: a launcher beside its workers); they count towards minCount for free
    free_others: int = 0

    @property
    def others(self) -> int:
        """Members besides this pod that minCount still needs and that charge quota of their own: the cheapest
        way to minCount takes the members charging nothing first, so the group is never judged bigger than it
        has to be."""
        return max(0, self.min_count - self.placed - self.in_attempt - 1 - self.free_others)


@dataclass(frozen=True, slots=True)
class GangQuota:
    """The pod's quota decision for its group, and what the attempt holds."""

    quota: QuotaDecision
    need: GangNeed
    own: Mapping[QuotaKey, Fraction]  # what this pod holds itself
    group_hold: Mapping[QuotaKey, Fraction]  # what is held for the rest of the attempt
    claims: Mapping[QuotaKey, Fraction]  # the group claims' part of `own` (held once for the group)
    refused: str = ""  # the group-level refusal, "" when the group fits


def per_pod_charge(reservation: Mapping[QuotaKey, Fraction]) -> dict[str, Fraction]:
    charge: dict[str, Fraction] = {}
    for (_queue, _flavor, resource), amount in reservation.items():
        charge[resource] = charge.get(resource, Fraction(0)) + amount
    return charge


def _claims_part(reservation: Mapping[QuotaKey, Fraction], demand: Mapping[str, Fraction]) -> dict[QuotaKey, Fraction]:
    """The part of a reservation that is the group's claims (at most what the reservation holds)."""
    part: dict[QuotaKey, Fraction] = {}
    for quota_key, amount in reservation.items():
        share = min(amount, demand.get(quota_key[2], Fraction(0)))
        if share:
            part[quota_key] = share
    return part


def _minus(left: Mapping[QuotaKey, Fraction], right: Mapping[QuotaKey, Fraction]) -> dict[QuotaKey, Fraction]:
    result = {key: amount - right.get(key, Fraction(0)) for key, amount in left.items()}
    return {key: amount for key, amount in result.items() if amount > 0}


def decide_gang_quota(
    first: QuotaDecision, need: GangNeed, decide: Callable[[Mapping[str, Fraction]], QuotaDecision]
) -> GangQuota:
    """`first`: the pod's own decision (against a ledger already crediting `need.claims_held`); `decide`: the
    same decision with the rest of the gang's charge (quota resource -> amount) on every node."""
    reservation = first.reservation
    if not first.governed or not reservation:
        return GangQuota(first, need, dict(reservation), {}, {})
    claims = {} if need.claims_held else _claims_part(reservation, need.claims_demand)
    own = _minus(reservation, need.claims_held)
    others = need.others
    if others == 0:
        return GangQuota(first, need, own, {}, claims)
    each = per_pod_charge(_minus(reservation, _claims_part(reservation, need.claims_demand)))
    rest = {resource: amount * others for resource, amount in each.items() if amount}
    if not rest:
        return GangQuota(first, need, own, {}, claims)
    in_flavor = {key: rest[key[2]] for key in reservation if rest.get(key[2])}
    if in_flavor and all(need.held_rest.get(key, Fraction(0)) >= amount for key, amount in in_flavor.items()):
        # the attempt's hold already covers the rest in the flavor this pod takes: the group was judged whole
        # when the hold was made, and this pod's charge came out of it (once per attempt, not per member)
        return GangQuota(first, need, own, in_flavor, claims)
    whole = decide(rest)
    if whole.reservation:
        # one flavor for the whole gang: the flavors the group's decision chose
        hold = {key: rest[key[2]] for key in whole.reservation if rest.get(key[2])}
        return GangQuota(whole, need, _rekey(own, whole.reservation), hold, _rekey(claims, whole.reservation))
    refused = _refusal_text(need, each, whole, others)
    return GangQuota(reject_pod(refused, CATEGORY_GANG, unresolvable=False), need, {}, {}, {}, refused)


def _rekey(amounts: Mapping[QuotaKey, Fraction], chosen: Mapping[QuotaKey, Fraction]) -> dict[QuotaKey, Fraction]:
    """`amounts` moved to the flavor `chosen` holds for each resource (the group's flavor may differ from the
    one the pod alone would take)."""
    flavor_of = {resource: (queue, flavor) for queue, flavor, resource in chosen}
    moved: dict[QuotaKey, Fraction] = {}
    for (queue, flavor, resource), amount in amounts.items():
        queue, flavor = flavor_of.get(resource, (queue, flavor))
        moved[(queue, flavor, resource)] = moved.get((queue, flavor, resource), Fraction(0)) + amount
    return moved


def _refusal_text(need: GangNeed, each: Mapping[str, Fraction], whole: QuotaDecision, others: int) -> str:
    charge = ", ".join(f"{format_quantity(amount)} {resource}" for resource, amount in sorted(each.items()))
    why = ""
    if whole.pod_rejection is not None:
        why = whole.pod_rejection.summary
    elif whole.refused_groups:
        rejection = whole.refused_groups[0][0].rejection
        why = rejection.summary if rejection is not None else ""
    placed = f", {need.placed} placed" if need.placed else ""
    held = f", {need.in_attempt} reserved in this attempt" if need.in_attempt else ""
    return (
        f"PodGroup {need.group_key} (gang, minCount {need.min_count}{placed}{held}) does not fit its queue as a "
        f"whole: this pod and {others} more of {charge} each: {why}"
    )
