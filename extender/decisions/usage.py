"""Quota in use: what one bound (or being bound) pod of a ClusterQueue holds, by flavor and resource.

Usage comes from what is actually allocated (claim status), attributed to the flavor of the node the pod runs
on; this is the API server's truth, so a restart or a lost watch rebuilds it exactly. `pod_usage` is the pure
attribution; the incremental bookkeeping over all pods is state/indexes/usage.py's UsageIndex, which the service
feeds with this function.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from extender.decisions.allocator import DEFAULT_SEARCH_BUDGET, Allocation
from extender.decisions.feasibility import device_feasibility
from extender.decisions.pod_claims import resolve_pod_claims
from extender.decisions.quota_context import QuotaContext
from extender.decisions.selection import DeviceMatcher
from extender.state.core import Pod
from extender.state.dra import ClaimSpec, ResourceClaim
from extender.state.indexes.usage import PodUsage
from extender.state.kueue import QUEUE_NAME_LABEL
from extender.state.reservations import QuotaKey
from extender.state.store import ClusterSnapshot


def device_class_of(spec: ClaimSpec, request: str) -> str | None:
    """The DeviceClass behind an allocation result's request name ("req" or "req/sub")."""
    name, _, sub_name = request.partition("/")
    for candidate in spec.requests:
        if candidate.name != name:
            continue
        if candidate.exactly is not None and not sub_name:
            return candidate.exactly.device_class_name
        for sub in candidate.first_available:
            if sub.name == sub_name:
                return sub.device_class_name
    return None


def cluster_queue_of(pod: Pod, context: QuotaContext) -> str | None:
    queue = pod.labels.get(QUEUE_NAME_LABEL)
    if not queue:
        return None
    local_queue = context.local_queues.get(f"{pod.namespace}/{queue}")
    return local_queue.cluster_queue if local_queue is not None else None


def charges_claim(claim: ResourceClaim, pod: Pod, generated: bool) -> bool:
    """A claim shared by several pods is charged once: to the first pod it is reserved for."""
    if generated or not claim.reserved_for:
        return True
    return claim.reserved_for[0].uid == pod.uid or (
        not claim.reserved_for[0].uid and claim.reserved_for[0].name == pod.name
    )


def in_flight_node(snapshot: ClusterSnapshot, pod: Pod) -> str:
    """The node of a pod kube-scheduler is binding right now: its claims are allocated and reserved for it
    (the DynamicResources plugin writes that in PreBind) but the binding is not visible yet. "" otherwise.

    Counting such pods as usage closes the gap an extender restart would open: reservations live in memory,
    but an allocation reserved for a pod is in the API server and survives us."""
    node = ""
    for ref in pod.claims:
        claim = snapshot.claim_for_pod(pod, ref)
        if claim is None or claim.allocation is None:
            return ""
        if not any(consumer.uid == pod.uid for consumer in claim.reserved_for):
            continue
        for result in claim.allocation.results:
            pool = snapshot.pools.get((result.driver, result.pool))
            if pool is not None and pool.node_local:
                node = node or pool.node_local
    return node


# (snapshot, pod, node) -> devices per DeviceClass the pod's unallocated claims would take on that node
PendingDemand = Callable[[ClusterSnapshot, Pod, str], tuple[tuple[str, int], ...]]


def nominated_node(pod: Pod) -> str:
    """The node kube-scheduler nominated an unbound pod for: since 1.35 it writes status.nominatedNodeName before
    PreBind work (DRA allocation) starts (pkg/scheduler/schedule_one.go bindingCycle, after
    RunPreBindPreFlights succeeds); preemption nominates too (the pod will be retried there). Either way the pod
    is about to take devices on that node while its claims may not show an allocation yet."""
    return pod.nominated_node_name if not pod.node_name else ""


def pending_class_counts(
    snapshot: ClusterSnapshot,
    pod: Pod,
    node: str,
    matcher: DeviceMatcher,
    budget: int = DEFAULT_SEARCH_BUDGET,
) -> tuple[tuple[str, int], ...]:
    """What the pod's claims without an allocation would take on `node`: the allocator's answer for that node
    alone (the charge our filter would have reserved there). Nothing when they do not fit there."""
    claims = resolve_pod_claims(snapshot, pod)
    if not claims.pending:
        return ()
    outcome = device_feasibility(snapshot, claims, [node], matcher, budget=budget).get(node)
    return outcome.class_counts() if isinstance(outcome, Allocation) else ()


def pod_usage(
    snapshot: ClusterSnapshot, pod: Pod, context: QuotaContext, pending_demand: PendingDemand | None = None
) -> PodUsage | None:
    """What the pod holds, on the node it holds it: bound pods and pods in PreBind (claims reserved for them)
    by their allocations; nominated pods also by what their unallocated claims would take on the nominated node
    (`pending_demand`), so a restarted or newly elected extender counts pods another one let through and
    kube-scheduler is still binding."""
    if pod.is_terminal or not pod.claims:
        return None
    node_name = pod.node_name or in_flight_node(snapshot, pod) or nominated_node(pod)
    if not node_name:
        return None
    claim_keys: list[str] = []
    amounts: dict[QuotaKey, Fraction] = {}
    cq_name = cluster_queue_of(pod, context)
    cluster_queue = context.cluster_queues.get(cq_name) if cq_name else None
    node = snapshot.nodes.get(node_name)
    for ref in pod.claims:
        claim = snapshot.claim_for_pod(pod, ref)
        if claim is None:
            # Remember where the claim will appear, so its arrival re-attributes this pod.
            expected = ref.claim_name or pod.claim_statuses.get(ref.name)
            if expected:
                claim_keys.append(f"{pod.namespace}/{expected}")
            continue
        claim_keys.append(claim.key)
        if cluster_queue is None or node is None or claim.allocation is None:
            continue
        if not charges_claim(claim, pod, generated=not ref.claim_name):
            continue
        for result in claim.allocation.results:
            if result.admin_access:
                continue
            class_name = device_class_of(claim.spec, result.request)
            resource = context.resource_for_class(class_name) if class_name else None
            if resource is None:
                continue
            flavor = context.node_flavor(cluster_queue, resource, node)
            if flavor is None:
                continue
            key = (cluster_queue.name, flavor, resource)
            amounts[key] = amounts.get(key, Fraction(0)) + 1
    if cluster_queue is not None and node is not None and pending_demand is not None and not pod.node_name:
        for class_name, count in pending_demand(snapshot, pod, node_name):
            resource = context.resource_for_class(class_name)
            flavor = context.node_flavor(cluster_queue, resource, node) if resource is not None else None
            if resource is None or flavor is None:
                continue
            key = (cluster_queue.name, flavor, resource)
            amounts[key] = amounts.get(key, Fraction(0)) + count
    return PodUsage(node_name, tuple(claim_keys), tuple(amounts.items()), bound=bool(pod.node_name))
