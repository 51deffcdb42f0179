"""All-or-nothing quota for a gang: asked about one pod of a PodGroup, decide for the group.

kube-scheduler schedules a gang in one pod-group cycle (pkg/scheduler/schedule_one_podgroup.go
podGroupSchedulingDefaultAlgorithm): each pod in turn through the ordinary algorithm (so through our filter),
assumed, and everything reverted when fewer than minCount fit; with TopologyAwareWorkloadScheduling the whole
cycle runs once per candidate placement (podGroupSchedulingPlacementAlgorithm) and the best successful one is
kept. Kueue admits a pod set whole: one flavor per resource group for all its pods, the pods' requests judged at
once (pkg/scheduler/flavorassigner). So the question for a pod of a gang is the group's: can the ClusterQueue
(and its cohort) take this pod and the rest of the gang's minCount not yet placed, in one flavor?

The rest of the gang is its actual pending members, each with its own charge, never copies of the pod asked
about: members shaped like the pod (the same claims and extended resources, as the pods of one template are)
take on each node what the pod takes there (`GroupCharge.copies`, sized per node, so in the flavor the group's
walk chooses); members shaped otherwise are charged what they would take on the nodes asked about (the most,
`estimate`), members that charge nothing count first, and the cheapest members make up minCount. The group's
charge goes into decide_quota as a GroupCharge, so Kueue's flavor walk and fit judge the whole need on each
node; the pod's own part comes out of that same decision (QuotaDecision.own_reservation).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from extender.decisions.quota.decision import GroupCharge
from extender.decisions.quota.verdicts import (
    CATEGORY_QUOTA,
    CATEGORY_QUOTA_NEVER,
    QuotaDecision,
    reject_pod,
)
from extender.state.core import Pod, PodClaimRef
from extender.state.quantity import format_quantity
from extender.state.reservations import QuotaKey

CATEGORY_GANG = CATEGORY_QUOTA  # a gang refused for quota counts as a quota refusal in the metrics
# A gang whose PodGroup has fewer pods than minCount: kube-scheduler itself waits for them (its GangScheduling
# PreEnqueue), so no quota is judged and nothing is held.
CATEGORY_GANG_WAITING = "gang-waiting-for-members"

Charges = Mapping[str, Fraction]  # quota resource -> amount
# A member's charge on the nodes asked about (the most it takes on any of them); None when it fits none
MemberEstimate = Callable[[Pod], Charges | None]


@dataclass(frozen=True, slots=True)
class ChildNeed:
    """A child of a CompositePodGroup the tree may be completed with: a PodGroup (the members its minCount still
    needs, and its pending members) or a composite (how many of its own children it still needs, and them)."""

    key: str
    needed: int = 0  # a PodGroup: members besides those placed its minCount needs
    pending: tuple[Pod, ...] = ()
    group_claims: tuple[PodClaimRef, ...] = ()
    composite: bool = False
    groups_needed: int = 0  # a composite: children besides those complete its minGroupCount needs
    children: tuple[ChildNeed, ...] = ()


@dataclass(frozen=True, slots=True)
class TreeLevel:
    """One CompositePodGroup above the pod's PodGroup (gang policy): the other children its minGroupCount needs
    besides the one the pod is in, and the children it may take them from."""

    key: str
    groups_needed: int
    siblings: tuple[ChildNeed, ...] = ()


@dataclass(frozen=True, slots=True)
class GangNeed:
    """A pod of a gang and the rest of its group, as the service sees them when the pod is asked about."""

    group_key: str
    min_count: int
    placed: int  # members bound or nominated: usage (or provisional usage) covers them
    present: int  # members in the view and not finished, this pod included
    # the other members neither placed nor finished, by key (the order every group decision walks them in)
    pending: tuple[Pod, ...] = ()
    # the PodGroup's own claim entries: a member's entry among them is the group's claim, charged once
    group_claims: tuple[PodClaimRef, ...] = ()
    # quota resource -> what the group's pending claims take (charged once for the whole group)
    claims_demand: Charges = field(default_factory=dict)
    # the CompositePodGroups above the pod's PodGroup, nearest first, up to the last one of gang policy: the tree
    # is scheduled all or nothing (kube-scheduler's compositePodGroupSchedulingAlgorithm)
    tree: tuple[TreeLevel, ...] = ()
    # what the group's attempt holds now (its one reservation), by flavor and resource: a group already judged
    # whole in the flavor this pod takes is not judged again (kube-scheduler asks about its members back to back)
    held: Mapping[QuotaKey, Fraction] = field(default_factory=dict)
    # members of the group (or tree) already asked about in the attempt, by the flavors they were judged in:
    # pod uid -> its own charge there. kube-scheduler has assumed them in this placement, so they are part of
    # the group's charge as they are, and only the rest of minCount is estimated
    asked: Mapping[frozenset[tuple[str, str]], Mapping[str, Mapping[QuotaKey, Fraction]]] = field(default_factory=dict)

    @property
    def needed(self) -> int:
        """Members besides this pod that minCount still needs."""
        return max(0, self.min_count - self.placed - 1)


@dataclass(frozen=True, slots=True)
class Counted:
    """The members that make up minCount besides the pod, cheapest first: how many are shaped like it, how many
    charge nothing, and the others' charges (one entry per member)."""

    alike: int = 0
    free: int = 0
    unlike: tuple[Charges, ...] = ()


@dataclass(frozen=True, slots=True)
class GangQuota:
    """The pod's quota decision for its group."""

    quota: QuotaDecision
    need: GangNeed
    own: Mapping[QuotaKey, Fraction]  # what this pod takes, in the group's flavors
    group_hold: Mapping[QuotaKey, Fraction]  # what the rest of the group takes there
    claims: Mapping[QuotaKey, Fraction]  # the group claims' part of `own` (held once for the group)
    counted: Counted = Counted()
    refused: str = ""  # the group-level refusal, "" when the group fits
    waiting: str = ""  # the group waits for members it does not have yet ("" when it has minCount)
    # the pod is beyond minCount: members asked before it make the group whole, so its refusal is its own and
    # leaves what the attempt holds for them
    extra: bool = False

    @property
    def whole(self) -> dict[QuotaKey, Fraction]:
        """The whole group's charge in its flavors: what the attempt must hold for it."""
        whole = dict(self.group_hold)
        for key, amount in self.own.items():
            whole[key] = whole.get(key, Fraction(0)) + amount
        return whole


def per_pod_charge(reservation: Mapping[QuotaKey, Fraction]) -> dict[str, Fraction]:
    charge: dict[str, Fraction] = {}
    for (_queue, _flavor, resource), amount in reservation.items():
        charge[resource] = charge.get(resource, Fraction(0)) + amount
    return charge


def charges_nothing(member: Pod, group_claims: Sequence[PodClaimRef]) -> bool:
    """A member with no quota charge of its own: no claim entries but its PodGroup's own claims (charged once for
    the group) and no extended resources (which DRA may back). Members with claims of devices quota does not
    govern still count as charging: the group is over-, never under-estimated."""
    return not member.extended_requests and all(ref in group_claims for ref in member.claims)


def member_shape(
    member: Pod, group_claims: Sequence[PodClaimRef], claim_spec: Callable[[str], Hashable | None]
) -> Hashable:
    """What a member's charge depends on besides the node: its own claim entries (a template by name, a claim
    named outright by its spec, as pods of one template name the same template) and its extended resources."""
    entries: list[Hashable] = []
    for ref in member.claims:
        if ref in group_claims:
            continue
        if ref.template_name:
            entries.append(("template", ref.template_name))
        else:
            spec = claim_spec(ref.claim_name)
            entries.append(("claim", spec if spec is not None else ref.claim_name))
    return (tuple(entries), tuple(sorted(member.extended_requests.items())))


def _size(charge: Charges) -> Fraction:
    return sum(charge.values(), Fraction(0))


@dataclass
class _Counter:
    """Counts members for a group decision: the pod's own shape and charge, and the estimates of members shaped
    otherwise (once per shape for the whole decision)."""

    each: Charges
    own_shape: Hashable
    shape: Callable[[Pod], Hashable]
    estimate: MemberEstimate
    asked: frozenset[str] = frozenset()  # members asked already: counted as they are, not estimated
    estimates: dict[Hashable, Charges | None] = field(default_factory=dict)

    def size(self, counted: Counted) -> Fraction:
        return counted.alike * _size(self.each) + sum((_size(charge) for charge in counted.unlike), Fraction(0))

    def members(self, wanted: int, pending: Sequence[Pod], group_claims: Sequence[PodClaimRef]) -> tuple[Counted, int]:
        """The cheapest members making up `wanted` (members that charge nothing first), and how many candidates
        there were (members that can take devices on the nodes asked about)."""
        free = alike_count = 0
        unlike: list[Charges] = []
        for member in pending:
            if member.uid in self.asked:
                continue
            if charges_nothing(member, group_claims):
                free += 1
                continue
            member_shape = self.shape(member)
            if member_shape == self.own_shape:
                alike_count += 1
                continue
            if member_shape not in self.estimates:
                self.estimates[member_shape] = self.estimate(member)
            found = self.estimates[member_shape]
            if found is not None:
                unlike.append(found)
        take_free = min(free, wanted)
        # the rest from members with charges, cheapest first (the pod's own shape first among equals)
        candidates: list[tuple[Fraction, int, Charges | None]] = [(_size(self.each), 0, None)] * alike_count
        candidates += [(_size(charge), 1, charge) for charge in unlike]
        candidates.sort(key=lambda item: (item[0], item[1]))
        chosen = candidates[: max(0, wanted - take_free)]
        counted = Counted(
            alike=sum(1 for _, kind, _ in chosen if kind == 0),
            free=take_free,
            unlike=tuple(charge for _, kind, charge in chosen if kind == 1 and charge is not None),
        )
        return counted, free + len(candidates)

    def child(self, child: ChildNeed) -> Counted | None:
        """The cheapest way to complete one child of a composite; None when it cannot be completed here."""
        if not child.composite:
            wanted = max(0, child.needed - sum(1 for member in child.pending if member.uid in self.asked))
            counted, candidates = self.members(wanted, child.pending, child.group_claims)
            return counted if candidates >= wanted else None
        return self.children(child.groups_needed, child.children)

    def complete(self, child: ChildNeed) -> bool:
        """The child is whole with the members asked already (kube-scheduler has them assumed)."""
        if not child.composite:
            return child.needed - sum(1 for member in child.pending if member.uid in self.asked) <= 0
        return sum(1 for grandchild in child.children if self.complete(grandchild)) >= child.groups_needed

    def children(self, wanted: int, children: Sequence[ChildNeed]) -> Counted | None:
        """The cheapest `wanted` of `children`, each completed its cheapest way; None when fewer can be."""
        costs = [counted for child in children if (counted := self.child(child)) is not None]
        if len(costs) < wanted:
            return None
        costs.sort(key=self.size)
        return _sum(costs[:wanted])


def _sum(parts: Iterable[Counted]) -> Counted:
    alike = free = 0
    unlike: list[Charges] = []
    for part in parts:
        alike, free = alike + part.alike, free + part.free
        unlike.extend(part.unlike)
    return Counted(alike, free, tuple(unlike))


def decide_gang_quota(
    first: QuotaDecision,
    need: GangNeed,
    decide: Callable[[GroupCharge], QuotaDecision],
    *,
    own_shape: Hashable,
    shape: Callable[[Pod], Hashable],
    estimate: MemberEstimate,
    carries_group_claims: bool,
    pod_uid: str = "",
) -> GangQuota:
    """`first`: the pod's own decision (against a ledger without what the group's attempt holds); `decide`: the
    same decision with the rest of the gang's charge on every node. `shape(member)` (member_shape): members of
    the pod's `own_shape` take what it takes; `estimate(member)`: what a member shaped otherwise takes on the
    nodes asked about. `carries_group_claims`: the pod uses the group's pending claims (then its own charge
    includes them)."""
    if need.present < need.min_count:
        waiting = (
            f"PodGroup {need.group_key} (gang, minCount {need.min_count}) is waiting for its members: "
            f"{need.present} of {need.min_count} exist"
        )
        return GangQuota(
            _reject(first, waiting, CATEGORY_GANG_WAITING, unresolvable=False), need, {}, {}, {}, waiting=waiting
        )
    reservation = first.reservation
    if not first.governed or not reservation:
        return GangQuota(first, need, dict(reservation), {}, {})
    shared = _claims_part(reservation, need.claims_demand) if carries_group_claims else {}
    each = {
        resource: amount - per_pod_charge(shared).get(resource, Fraction(0))
        for resource, amount in per_pod_charge(reservation).items()
    }
    each = {resource: amount for resource, amount in each.items() if amount > 0}
    asked = {
        uid: charge
        for uid, charge in need.asked.get(frozenset((q, f) for q, f, _ in reservation), {}).items()
        if uid != pod_uid
    }
    counter = _Counter(each, own_shape, shape, estimate, frozenset(asked))
    asked_here = sum(1 for member in need.pending if member.uid in asked)
    needed = max(0, need.needed - asked_here)
    # the group (or a composite above it) is whole without this pod: it is a member kube-scheduler tries beyond
    # what minCount (minGroupCount) needs
    extra_member = need.min_count - need.placed - asked_here <= 0 or any(
        sum(1 for sibling in level.siblings if counter.complete(sibling)) >= level.groups_needed + 1
        for level in need.tree
    )
    counted, candidates = counter.members(needed, need.pending, need.group_claims)
    if candidates < needed:
        refused = (
            f"PodGroup {need.group_key} (gang, minCount {need.min_count}) cannot be completed on these nodes: "
            f"{needed} more members needed besides this pod, {candidates} can take devices here"
        )
        return GangQuota(_reject(first, refused, CATEGORY_GANG), need, {}, {}, {}, counted, refused)
    for level in need.tree:
        others = counter.children(level.groups_needed, level.siblings)
        if others is None:
            refused = (
                f"CompositePodGroup {level.key} (gang) cannot be completed: {level.groups_needed} more of its "
                f"groups needed besides this pod's, fewer can be completed on these nodes"
            )
            return GangQuota(_reject(first, refused, CATEGORY_GANG), need, {}, {}, {}, counted, refused)
        counted = _sum((counted, others))
    extra: dict[str, Fraction] = {}
    # members asked before count as they were charged, less the group's claims (held once, by this pod or below)
    asked_charges = (_less(per_pod_charge(own), need.claims_demand) for own in asked.values())
    for charge in (*counted.unlike, *asked_charges):
        for resource, amount in charge.items():
            extra[resource] = extra.get(resource, Fraction(0)) + amount
    if not carries_group_claims:
        for resource, amount in need.claims_demand.items():
            extra[resource] = extra.get(resource, Fraction(0)) + amount
    claims = dict(_claims_part(reservation, need.claims_demand)) if carries_group_claims else {}
    if not counted.alike and not extra:
        return GangQuota(first, need, dict(reservation), {}, claims, counted)
    rest = dict(extra)
    for resource, amount in each.items():
        rest[resource] = rest.get(resource, Fraction(0)) + counted.alike * amount
    held = _held_in_flavor(need.held, reservation, rest)
    if held is not None:
        # Judged whole in this flavor at an earlier member (the hold was made then, and the ledger this pod is
        # judged against leaves it out): the pod's own charge and the rest's, as the group's decision would give.
        return GangQuota(first, need, dict(reservation), held, claims, counted)
    group = GroupCharge(counted.alike, per_pod_charge(shared), extra)
    whole = decide(group)
    if whole.reservation:
        own = dict(whole.own)
        return GangQuota(
            whole, need, own, _minus(whole.reservation, own), _in_flavors(claims, whole.reservation), counted
        )
    refused = _refusal_text(need, each, counted, whole, len(asked))
    unresolvable = _unresolvable(whole)
    category = CATEGORY_QUOTA_NEVER if unresolvable else CATEGORY_GANG
    rejection = _reject(first, refused, category, unresolvable=unresolvable)
    return GangQuota(rejection, need, {}, {}, {}, counted, refused, extra=extra_member)


def _reject(first: QuotaDecision, summary: str, category: str, *, unresolvable: bool = False) -> QuotaDecision:
    """The group's refusal on every node, naming the pod's ClusterQueue as its own decision did."""
    return replace(reject_pod(summary, category, unresolvable=unresolvable), cluster_queue=first.cluster_queue)


def _held_in_flavor(
    held: Mapping[QuotaKey, Fraction], reservation: Mapping[QuotaKey, Fraction], rest: Charges
) -> dict[QuotaKey, Fraction] | None:
    """The rest of the group in the flavors the pod takes (`reservation`'s), when the attempt's hold already
    covers the pod and the rest there; None when it does not (or the rest needs a resource the pod does not)."""
    if not held or not rest:
        return None
    resources = {resource for _, _, resource in reservation}
    if not resources >= rest.keys():
        return None
    in_flavor = {key: rest[key[2]] for key in reservation if rest.get(key[2])}
    for key, amount in reservation.items():
        if held.get(key, Fraction(0)) < amount + in_flavor.get(key, Fraction(0)):
            return None
    return in_flavor


def _claims_part(reservation: Mapping[QuotaKey, Fraction], demand: Charges) -> dict[QuotaKey, Fraction]:
    """The part of a reservation that is the group's claims (at most what the reservation holds)."""
    part: dict[QuotaKey, Fraction] = {}
    for quota_key, amount in reservation.items():
        share = min(amount, demand.get(quota_key[2], Fraction(0)))
        if share:
            part[quota_key] = share
    return part


def _less(charge: Charges, claims: Charges) -> dict[str, Fraction]:
    return {r: amount - claims.get(r, Fraction(0)) for r, amount in charge.items() if amount > claims.get(r, 0)}


def _minus(left: Mapping[QuotaKey, Fraction], right: Mapping[QuotaKey, Fraction]) -> dict[QuotaKey, Fraction]:
    result = {key: amount - right.get(key, Fraction(0)) for key, amount in left.items()}
    return {key: amount for key, amount in result.items() if amount > 0}


def _in_flavors(amounts: Mapping[QuotaKey, Fraction], chosen: Mapping[QuotaKey, Fraction]) -> dict[QuotaKey, Fraction]:
    """`amounts` in the flavor `chosen` holds for each resource (the group's flavor may differ from the one the
    pod alone would take)."""
    flavor_of = {resource: (queue, flavor) for queue, flavor, resource in chosen}
    moved: dict[QuotaKey, Fraction] = {}
    for (queue, flavor, resource), amount in amounts.items():
        queue, flavor = flavor_of.get(resource, (queue, flavor))
        moved[(queue, flavor, resource)] = moved.get((queue, flavor, resource), Fraction(0)) + amount
    return moved


def _unresolvable(whole: QuotaDecision) -> bool:
    """Whether waiting cannot help the group: the group's own refusal says so on every node it refused."""
    if whole.pod_rejection is not None:
        return whole.pod_rejection.unresolvable
    rejections = [quota.rejection for quota, _ in whole.refused_groups if quota.rejection is not None]
    return bool(rejections) and all(rejection.unresolvable for rejection in rejections)


def _describe(charge: Charges) -> str:
    return ", ".join(f"{format_quantity(amount)} {resource}" for resource, amount in sorted(charge.items()))


def _refusal_text(need: GangNeed, each: Charges, counted: Counted, whole: QuotaDecision, asked: int) -> str:
    why = ""
    if whole.pod_rejection is not None:
        why = whole.pod_rejection.summary
    elif whole.refused_groups:
        rejection = whole.refused_groups[0][0].rejection
        why = rejection.summary if rejection is not None else ""
    placed = f", {need.placed} placed" if need.placed else ""
    placed += f", {asked} passed in this attempt" if asked else ""
    tree = f" in CompositePodGroup {need.tree[-1].key}" if need.tree else ""
    if not counted.unlike:
        rest = f"{counted.alike} more of {_describe(each)} each"
    else:
        kinds: dict[str, int] = {}
        if counted.alike:
            kinds[_describe(each)] = counted.alike
        for charge in counted.unlike:
            kinds[_describe(charge)] = kinds.get(_describe(charge), 0) + 1
        others = counted.alike + len(counted.unlike)
        rest = f"{others} more ({', '.join(f'{n} of {text}' for text, n in kinds.items())})"
    if counted.free:
        rest += f" ({counted.free} more charging nothing)"
    return (
        f"PodGroup {need.group_key} (gang, minCount {need.min_count}{placed}){tree} does not fit its queue as a "
        f"whole: this pod and {rest}: {why}"
    )
