"""What the other members of a gang take: the charge of a member shaped otherwise than the pod asked about.

kube-scheduler's pod-group cycle filters every member on the nodes of one placement (schedule_one_podgroup.go),
so when one member is asked about, the others will be asked about nodes like its own. A member shaped like it
takes on each node what it takes (decisions/gang/quota.py counts it as a copy, per node); a member shaped
otherwise (a driver beside its workers, a head beside its workers, the other replicated job of a JobSet) is
charged here the most its own claims and extended resources take on any of the nodes asked about, as filter
would charge it there (charges.node_charges). The group is then never judged smaller than it is; its claims
shared with the PodGroup are left out (the group's, charged once).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from fractions import Fraction

from extender.decisions.devices.extended_resources import extended_charges, resolve_extended
from extender.decisions.devices.feasibility import device_outcomes
from extender.decisions.devices.features import Features
from extender.decisions.devices.pod_claims import PodClaims, resolve_pod_claims
from extender.decisions.devices.selection import DeviceMatcher
from extender.decisions.gang.quota import Charges, MemberEstimate, member_shape
from extender.decisions.quota.attribution import without_allocations
from extender.decisions.quota.charges import node_charges
from extender.decisions.quota.context import QuotaContext
from extender.state.core import Pod, PodClaimRef
from extender.state.snapshot import ClusterSnapshot


def member_shape_in(snapshot: ClusterSnapshot, member: Pod, group_claims: Sequence[PodClaimRef]) -> Hashable:
    """member_shape with a claim named outright known by its spec (pods of one template that name claims made
    for them by a controller have equal specs, not equal names)."""

    def claim_spec(name: str) -> Hashable | None:
        claim = snapshot.claims.get(f"{member.namespace}/{name}")
        return claim.spec if claim is not None else None

    return member_shape(member, group_claims, claim_spec)


def member_estimator(
    snapshot: ClusterSnapshot,
    node_names: list[str],
    context: QuotaContext,
    matcher: DeviceMatcher,
    group_claims: Sequence[PodClaimRef],
    *,
    unmapped: str,
    budget: int,
    features: Features,
) -> MemberEstimate:
    """`estimate(member)`: the most the member's own claims and extended resources take on any of `node_names`
    (quota resource -> amount); None when it can take devices on none of them, even were they empty."""

    def estimate(member: Pod) -> Charges | None:
        group_entries = {ref.name for ref in member.claims if ref in group_claims}
        claims = resolve_pod_claims(snapshot, member)
        claims = PodClaims(
            tuple(claim for claim in claims.pending if claim.pod_claim_name not in group_entries),
            claims.allocated,
            claims.problems,
        )
        extended = resolve_extended(snapshot.device_classes, member)
        extra, problem = extended_charges(extended, context.mappings)
        if problem or claims.problems:
            return None
        if not claims.pending:
            return dict(extra)
        for view in (snapshot, without_allocations(snapshot)):
            allocations = device_outcomes(
                view, claims, node_names, matcher, budget=budget, features=features
            ).allocations
            most: dict[str, Fraction] = {}
            for allocation in allocations.values():
                charges, error = node_charges(allocation, context, unmapped, extra=extra, matcher=matcher)
                if error:
                    continue
                for resource, amount in charges.items():
                    most[resource] = max(most.get(resource, Fraction(0)), amount)
            if allocations:
                return most
        return None

    return estimate
