"""ResourceClaims of a PodGroup: one claim for the whole group, charged once.

With DRAWorkloadResourceClaims a pod claim entry that matches one of its PodGroup's spec.resourceClaims (same
name and source) binds to the PodGroup, not to the pod (k8s.io/dynamic-resource-allocation@v0.37.2
resourceclaim.BindTo): the claim is generated once for the group (PodGroup.status.resourceClaimStatuses),
allocated once and reserved for ``podgroups/<name>`` (resourceclaim.IsReservedForPod with
acceptPodGroupReservation), and every member pod uses the same devices. Quota sees it the same way: the claim's
devices are charged to the group's queue once, through one bound member, or through the claim's own usage entry
while no member is bound (decisions/quota/attribution.py claim_charge), for as long as the claim is allocated.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from extender.state.core import Pod
from extender.state.dra.claims import ClaimSpec, ResourceClaim
from extender.state.podgroups.podgroup import POD_GROUPS_RESOURCE
from extender.state.snapshot import ClusterSnapshot


def group_of_claim(snapshot: ClusterSnapshot, claim: ResourceClaim, pod: Pod) -> str:
    """The key of the pod's PodGroup when `claim` is that group's claim, else "".

    A group's claim is reserved for the PodGroup (reservedFor names podgroups/<name>: the pod does not know the
    group's uid, so the name decides, as resourceclaim.IsReservedForPod), or, before anything reserved it,
    named by the PodGroup (resourceclaim.NameFromPodGroup: a resourceClaimName entry, or the claim recorded for
    a template in its status)."""
    if not pod.pod_group or claim.namespace != pod.namespace:
        return ""
    for consumer in claim.reserved_for:
        if consumer.resource == POD_GROUPS_RESOURCE:
            return pod.group_key if consumer.name == pod.pod_group else ""
    group = snapshot.pod_groups.get(pod.group_key)
    if group is not None and claim.name in group.claim_names():
        return pod.group_key
    return ""


def uses_claim(pod: Pod, claim: ResourceClaim) -> bool:
    """Whether one of the pod's claim entries resolves to `claim` (by name, or as recorded in its status)."""
    if pod.namespace != claim.namespace:
        return False
    return any(ref.claim_name == claim.name or pod.claim_statuses.get(ref.name) == claim.name for ref in pod.claims)


def group_claim_charger(
    snapshot: ClusterSnapshot, claim: ResourceClaim, group_key: str, carries: Callable[[Pod], bool]
) -> str:
    """The member pod a group claim's charge is counted with: the first member using it (by key, not finished)
    that `carries` accepts (decisions/quota/attribution.py claim_charge: bound or in PreBind, in the claim's
    queue); "" when none does, and the claim's own usage entry counts it then (a PodGroup keeps its claim
    allocated with no member placed: pods restarted by their Job, a suspend, a finished Job kept). A nominated
    member never carries it: the claim is allocated, so usage counts it already, and moving the charge onto a
    pod that only holds a reservation would leave a window where it counts nowhere. Every member's attribution
    and the claim's own ask the same question of the same view, so exactly one of them charges the claim; the
    usage index re-attributes a claim and its pods together when one of them comes, binds, finishes or goes
    (state/indexes/usage.py)."""
    for member in snapshot.members_of(group_key):
        if member.is_terminal or not uses_claim(member, claim):
            continue
        if carries(member):
            return member.key
    return ""


def pending_group_claims(snapshot: ClusterSnapshot, pod: Pod) -> list[ClaimSpec]:
    """The specs of the pod's claims that are its PodGroup's and not allocated yet: the claim itself when it
    exists, or the template a PodGroup entry of the same name and source will instantiate once for the group
    (resourceclaim.BindTo matches name, resourceClaimName and resourceClaimTemplateName)."""
    if not pod.pod_group:
        return []
    group = snapshot.pod_groups.get(pod.group_key)
    specs: list[ClaimSpec] = []
    for ref in pod.claims:
        claim = snapshot.claim_for_pod(pod, ref)
        if claim is not None:
            if claim.allocation is None and group_of_claim(snapshot, claim, pod):
                specs.append(claim.spec)
            continue
        if group is None or not ref.template_name:
            continue
        if any(entry.name == ref.name and entry.template_name == ref.template_name for entry in group.claims):
            template = snapshot.claim_templates.get(f"{pod.namespace}/{ref.template_name}")
            if template is not None:
                specs.append(template.spec)
    return specs


def group_claims_demand(specs: list[ClaimSpec], resource_for_class: Callable[[str], str | None]) -> dict[str, Fraction]:
    """Quota resource -> devices the group's claims ask for, for requests of an exact count of a class charged
    per device (the charge then does not depend on the node). Requests charged by counters or capacity, "All"
    requests and prioritized lists are left out: their charge stays with every pod that asks (over-counted,
    never under-counted)."""
    demand: dict[str, Fraction] = {}
    for spec in specs:
        for request in spec.requests:
            exactly = request.exactly
            if exactly is None or exactly.allocation_mode != "ExactCount" or exactly.admin_access:
                continue
            resource = resource_for_class(exactly.device_class_name)
            if resource:
                demand[resource] = demand.get(resource, Fraction(0)) + exactly.count
    return demand
