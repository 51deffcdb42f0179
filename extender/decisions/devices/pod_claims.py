"""Which ResourceClaims a pod brings to the scheduler, and which of them still need devices.

kube-scheduler only calls us once the pod's claims exist, but `explain` and what-if rankings ask about pods
whose template claims were never generated: a template stands in for the claim it would produce, so a person
can ask "where would this pod go?" before creating it.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.decisions.devices.results import AllocatedClaim, PendingClaim
from extender.state.core import Pod
from extender.state.snapshot import ClusterSnapshot


@dataclass(frozen=True, slots=True)
class PodClaims:
    pending: tuple[PendingClaim, ...]
    allocated: tuple[AllocatedClaim, ...]
    problems: tuple[str, ...]  # pod-level reasons no node can fix (a missing claim or template)


NO_CLAIMS = PodClaims((), (), ())


def resolve_pod_claims(snapshot: ClusterSnapshot, pod: Pod) -> PodClaims:
    if not pod.claims:
        return NO_CLAIMS
    pending: list[PendingClaim] = []
    allocated: list[AllocatedClaim] = []
    problems: list[str] = []
    for ref in pod.claims:
        claim = snapshot.claim_for_pod(pod, ref)
        if claim is not None:
            label = f"claim {claim.key}"
            if claim.allocation is not None:
                allocated.append(AllocatedClaim(label, claim))
            else:
                pending.append(PendingClaim(label, ref.name, claim.key, claim.spec))
            continue
        if ref.claim_name:
            problems.append(f"ResourceClaim {pod.namespace}/{ref.claim_name} (pod claim {ref.name}) does not exist")
            continue
        if ref.name in pod.claim_statuses and pod.claim_statuses[ref.name] is None:
            continue  # the resourceclaim controller decided this entry needs no claim
        template = snapshot.claim_templates.get(f"{pod.namespace}/{ref.template_name}")
        if template is None:
            problems.append(
                f"ResourceClaimTemplate {pod.namespace}/{ref.template_name} (pod claim {ref.name}) does not exist"
            )
            continue
        pending.append(
            PendingClaim(f"claim {ref.name} (from template {ref.template_name})", ref.name, "", template.spec)
        )
    return PodClaims(tuple(pending), tuple(allocated), tuple(problems))


def named_claims_not_in_view(snapshot: ClusterSnapshot, pod: Pod) -> list[str]:
    """The ResourceClaims the pod names (`resourceClaimName`) that the view does not hold. kube-scheduler asks an
    extender about a pod only after its DynamicResources PreFilter found every one of them in its own informer
    (pkg/scheduler/framework/plugins/dynamicresources: a missing claim is UnschedulableAndUnresolvable before any
    extender is called), so when filter meets one, the extender's own watch is behind, not the pod wrong."""
    return [
        f"{pod.namespace}/{ref.claim_name}"
        for ref in pod.claims
        if ref.claim_name and f"{pod.namespace}/{ref.claim_name}" not in snapshot.claims
    ]
