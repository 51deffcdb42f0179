"""Quota in use: what one bound (or being bound) pod of a ClusterQueue holds, by flavor and resource.

Usage comes from what is actually allocated (claim status), attributed to the flavor of the node the pod runs
on; this is the API server's truth, so a restart or a lost watch rebuilds it exactly. `pod_usage` is the pure
attribution; the incremental bookkeeping over all pods is state/indexes/usage.py's UsageIndex, which the service
feeds with this function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from fractions import Fraction

from extender.decisions.devices.allocator import DEFAULT_SEARCH_BUDGET
from extender.decisions.devices.extended_resources import (
    EXTENDED_CLAIM_ANNOTATION,
    ExtendedRequests,
    class_for_resource,
    extended_charges,
    quota_resource,
    resolve_extended,
)
from extender.decisions.devices.feasibility import device_outcomes
from extender.decisions.devices.features import DEFAULT_FEATURES, Features
from extender.decisions.devices.pod_claims import PodClaims, resolve_pod_claims
from extender.decisions.devices.selection import DeviceMatcher
from extender.decisions.gang.claims import charges_group_claim
from extender.decisions.quota.charges import UNMAPPED_IGNORE, counts_devices_only, device_charge, node_charges
from extender.decisions.quota.context import QuotaContext
from extender.decisions.quota.workload_holds import own_flavors, own_workload
from extender.state.core import Pod
from extender.state.dra.claims import ClaimSpec, ResourceClaim
from extender.state.dra.devices import Device, consumed_by_name
from extender.state.indexes.usage import PodUsage
from extender.state.kueue.local_queue import pod_queue_name
from extender.state.kueue.pod_workload import pod_set_assignment, workload_refs
from extender.state.reservations import QuotaKey
from extender.state.snapshot import ClusterSnapshot


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
    queue = pod_queue_name(pod.labels)
    if not queue:
        return None
    local_queue = context.local_queues.get(f"{pod.namespace}/{queue}")
    return local_queue.cluster_queue if local_queue is not None else None


def charges_claim(snapshot: ClusterSnapshot, claim: ResourceClaim, pod: Pod, generated: bool) -> bool:
    """A claim shared by several pods is charged once: to the first pod of its reservedFor that the view shows
    and that has not finished.

    The resourceclaim controller drops a finished or deleted consumer from reservedFor only after the fact
    (pkg/controller/resourceclaim/controller.go syncClaim, on the pod's event), and the devices stay allocated
    to the claim's other consumers meanwhile. Charging the first entry as such charged nobody in that window: a
    filter could hand the freed quota to another pod, and usage came back when the controller caught up. An
    entry for another resource than pods, or for a pod that is gone or was replaced (another uid), is passed
    over the same way."""
    if generated or not claim.reserved_for:
        return True
    pods = snapshot.pods
    for consumer in claim.reserved_for:
        if consumer.resource != "pods":
            continue
        holder = pods.get(f"{claim.namespace}/{consumer.name}")
        if holder is None or holder.is_terminal or (consumer.uid and holder.uid and holder.uid != consumer.uid):
            continue
        return holder.key == pod.key and (not pod.uid or not holder.uid or holder.uid == pod.uid)
    return False


def in_flight_node(snapshot: ClusterSnapshot, pod: Pod) -> str:
    """The node of a pod kube-scheduler is binding right now: its claims are allocated and reserved for it
    (the DynamicResources plugin writes that in PreBind) but the binding is not visible yet. "" otherwise.

    Counting such pods as usage closes the gap an extender restart would open: reservations live in memory,
    but an allocation reserved for a pod is in the API server and survives us."""
    node = ""
    for claim, _key, _generated in _claims_of(snapshot, pod):
        if claim is None or claim.allocation is None:
            return ""
        if not any(consumer.uid == pod.uid for consumer in claim.reserved_for):
            continue
        for result in claim.allocation.results:
            pool = snapshot.pools.get((result.driver, result.pool))
            if pool is not None and pool.node_local:
                node = node or pool.node_local
    return node


def _find_device(snapshot: ClusterSnapshot, driver: str, pool_name: str, device_name: str) -> Device | None:
    pool = snapshot.pools.get((driver, pool_name))
    if pool is None:
        return None
    for device in pool.devices:
        if device.name == device_name:
            return device
    return None


def _claims_of(snapshot: ClusterSnapshot, pod: Pod) -> list[tuple[ResourceClaim | None, str, bool]]:
    """(claim, key it is or will be found under, generated for this pod) for each claim the pod holds, the
    one kube-scheduler made for its DRA-backed extended resources included."""
    found: list[tuple[ResourceClaim | None, str, bool]] = []
    for ref in pod.claims:
        claim = snapshot.claim_for_pod(pod, ref)
        expected = ref.claim_name or pod.claim_statuses.get(ref.name) or ""
        found.append(
            (
                claim,
                claim.key if claim is not None else (f"{pod.namespace}/{expected}" if expected else ""),
                not ref.claim_name,
            )
        )
    if pod.extended_claim_name:
        key = f"{pod.namespace}/{pod.extended_claim_name}"
        claim = snapshot.claims.get(key)
        if claim is not None and claim.annotations.get(EXTENDED_CLAIM_ANNOTATION) != "true":
            claim = None  # not the scheduler's claim: never charge a stranger's devices
        found.append((claim, key, True))
    return found


# (snapshot, pod, node, context) -> quota resource -> amount the pod's claims without an allocation would take
# on that node (see pending_charges)
PendingDemand = Callable[[ClusterSnapshot, Pod, str, QuotaContext], Mapping[str, Fraction]]


def nominated_node(pod: Pod) -> str:
    """The node kube-scheduler nominated an unbound pod for: since 1.35 it writes status.nominatedNodeName before
    PreBind work (DRA allocation) starts (pkg/scheduler/schedule_one.go bindingCycle, after
    RunPreBindPreFlights succeeds); preemption nominates too (the pod will be retried there). Either way the pod
    is about to take devices on that node while its claims may not show an allocation yet."""
    return pod.nominated_node_name if not pod.node_name else ""


def pending_charges(
    snapshot: ClusterSnapshot,
    pod: Pod,
    node_name: str,
    context: QuotaContext,
    matcher: DeviceMatcher,
    *,
    budget: int = DEFAULT_SEARCH_BUDGET,
    features: Features = DEFAULT_FEATURES,
) -> dict[str, Fraction]:
    """What the pod's claims without an allocation would take on `node_name`, by quota resource: the
    allocator's answer for that node alone, charged as filter charges it (charges.node_charges). The
    scheduler's extended-resource claim counts while PreBind has not written it yet (only the resources DRA
    serves on that node: a device plugin's are charged by pod_usage from the node's allocatable). When the view
    shows the node too full, what they take on the node alone; nothing when they could not fit even there."""
    node = snapshot.nodes.get(node_name)
    if node is None:
        return {}
    claims = resolve_pod_claims(snapshot, pod)
    extended = resolve_extended(snapshot.device_classes, pod)
    served = ExtendedRequests()
    if extended.resources and not extended.problems:
        written = snapshot.claims.get(f"{pod.namespace}/{pod.extended_claim_name}") if pod.extended_claim_name else None
        if written is None or written.allocation is None:
            served = ExtendedRequests(extended.served_by_dra(node))
    extended_claim = extended.claim_for(served.resources)
    if extended_claim is not None:
        claims = PodClaims((*claims.pending, extended_claim), claims.allocated, claims.problems)
    if not claims.pending:
        return {}
    outcome = device_outcomes(snapshot, claims, [node_name], matcher, budget=budget, features=features).allocations.get(
        node_name
    )
    if outcome is None:
        # The view can show the node fuller than it is (an allocation released in the API whose event has not
        # arrived): kube-scheduler placed the pod there, so charge what the claims take on the node alone.
        empty = _without_allocations(snapshot)
        outcome = device_outcomes(
            empty, claims, [node_name], matcher, budget=budget, features=features
        ).allocations.get(node_name)
    if outcome is None:
        return {}
    extra, problem = extended_charges(served, context.mappings)
    if problem:
        extra = {}
    charges, _error = node_charges(outcome, context, UNMAPPED_IGNORE, extra=extra, matcher=matcher)
    return charges


def _without_allocations(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot with no device in use. Allocation versions no real snapshot has (shared -1, none per node),
    so the free-device memos never hand this view's answers to a real one or the other way round."""
    return replace(snapshot, allocated={}, shared_allocated={}, alloc_versions={}, shared_alloc_version=-1)


def pod_usage(
    snapshot: ClusterSnapshot, pod: Pod, context: QuotaContext, *, matcher: DeviceMatcher | None = None
) -> PodUsage | None:
    """What a bound (or being bound) pod holds: its claims' allocations charged as filter charges them
    (devices, or the counters and capacity of the devices actually allocated), in the flavor Kueue admitted
    its Workload to, else the first flavor of the node the pod may use."""
    if pod.is_terminal or not (pod.claims or pod.extended_claim_name or pod.extended_requests):
        return None
    node_name = pod.node_name or in_flight_node(snapshot, pod)
    if not node_name:
        return None
    claim_keys, amounts, _unallocated, errors = _allocated_charges(snapshot, pod, context, node_name, matcher)
    if not claim_keys and not amounts:
        return None
    workload = own_workload(snapshot, pod, cluster_queue_of(pod, context))
    own_pod_set = pod_set_assignment(workload, pod) if workload is not None else None
    return PodUsage(
        node_name,
        tuple(claim_keys),
        tuple(amounts.items()),
        workload=workload.key if workload is not None else "",
        pod_set=own_pod_set.name if own_pod_set is not None else "",
        owners=workload_refs(pod),
        errors=errors,
    )


def provisional_usage(
    snapshot: ClusterSnapshot,
    pod: Pod,
    context: QuotaContext,
    pending_demand: PendingDemand,
    *,
    matcher: DeviceMatcher | None = None,
) -> PodUsage | None:
    """What a placed pod is about to hold that `pod_usage` does not count yet, on the node it is placed on.

    Placed: bound, in PreBind (claims reserved for it), or nominated (status.nominatedNodeName, written by
    kube-scheduler before PreBind since 1.35). Not counted yet: a nominated pod's claims, allocated or not, and
    any placed pod's claims the view does not show allocated (charged by `pending_demand`, what the allocator
    gives them on that node). Pods and claims come on separate watches, which deliver (and, after a reset or a
    relist, resume) independently, so the binding can show before the allocation PreBind wrote ahead of it; and
    a restarted or newly elected extender sees what kube-scheduler is binding for another one only this way.
    The service counts it for pods it holds no reservation of (the reservation already covers them), and never
    against the pod itself. Always returned for a placed pod (amounts may be empty), so its claim events
    re-attribute it. PodUsage.bound is False: these are the "unbound" charges of UsageIndex."""
    if pod.is_terminal or not (pod.claims or pod.extended_claim_name or pod.extended_requests):
        return None
    counted = pod.node_name or in_flight_node(snapshot, pod)
    node_name = counted or nominated_node(pod)
    if not node_name:
        return None
    claim_keys, allocated, unallocated, _errors = _allocated_charges(snapshot, pod, context, node_name, matcher)
    amounts: dict[QuotaKey, Fraction] = {} if counted else allocated
    cq_name = cluster_queue_of(pod, context)
    cluster_queue = context.cluster_queues.get(cq_name) if cq_name else None
    node = snapshot.nodes.get(node_name)
    if cluster_queue is not None and node is not None and unallocated:
        admitted = _admitted_flavors(snapshot, pod, cq_name)
        for resource, amount in pending_demand(snapshot, pod, node_name, context).items():
            flavor = admitted.get(resource) or context.node_flavor(cluster_queue, resource, node, pod.tolerations)
            if flavor is None:
                continue
            quota_key = (cluster_queue.name, flavor, resource)
            amounts[quota_key] = amounts.get(quota_key, Fraction(0)) + amount
    return PodUsage(node_name, tuple(claim_keys), tuple(amounts.items()), bound=False)


def _admitted_flavors(snapshot: ClusterSnapshot, pod: Pod, cq_name: str | None) -> dict[str, str]:
    """The flavors Kueue admitted the pod's own pod set to, by resource (when admitted to the pod's queue)."""
    return own_flavors(snapshot, pod, cq_name)


def _allocated_charges(
    snapshot: ClusterSnapshot, pod: Pod, context: QuotaContext, node_name: str, matcher: DeviceMatcher | None
) -> tuple[list[str], dict[QuotaKey, Fraction], bool, tuple[str, ...]]:
    """(claim keys read, charges of what is allocated on `node_name`, whether a claim is missing or not allocated
    yet, the scheduler's extended-resource claim included; why an allocated device could not be charged: a
    mapping's counter or capacity it does not publish, which the drift report shows rather than charging 0)."""
    claim_keys: list[str] = []
    amounts: dict[QuotaKey, Fraction] = {}
    cq_name = cluster_queue_of(pod, context)
    cluster_queue = context.cluster_queues.get(cq_name) if cq_name else None
    node = snapshot.nodes.get(node_name)
    admitted = _admitted_flavors(snapshot, pod, cq_name)
    unallocated = bool(pod.extended_requests) and not pod.extended_claim_name  # its claim not written yet
    errors: list[str] = []
    for claim, key, generated in _claims_of(snapshot, pod):
        if key:
            claim_keys.append(key)  # its arrival or change re-attributes this pod
        if claim is None or claim.allocation is None:
            unallocated = True
        if claim is None or cluster_queue is None or node is None or claim.allocation is None:
            continue
        charged_by_group = charges_group_claim(snapshot, claim, pod)
        if charged_by_group is False or (
            charged_by_group is None and not charges_claim(snapshot, claim, pod, generated=generated)
        ):
            continue
        extended_claim = claim.name == pod.extended_claim_name
        for result in claim.allocation.results:
            if result.admin_access:
                continue
            class_name = device_class_of(claim.spec, result.request)
            if class_name is None:
                continue
            pairs: tuple[tuple[str, Fraction], ...]
            if extended_claim:
                resource_name = pod.extended_request_resources.get(result.request, "")
                quota_name, problem = quota_resource(context.mappings, resource_name, class_name)
                if problem or not quota_name:
                    continue
                pairs = ((quota_name, Fraction(1)),)
            else:
                device = _find_device(snapshot, result.driver, result.pool, result.device)
                if device is None:
                    resource = context.resource_for_class(class_name)
                    pairs = ((resource, Fraction(1)),) if resource and counts_devices_only(context, class_name) else ()
                    if resource and not pairs:
                        errors.append(
                            f"claim {key or claim.name}: device {result.driver}/{result.pool}/{result.device} is not "
                            f"published in any ResourceSlice, so its {resource} counter or capacity cannot be charged"
                        )
                else:
                    pairs, error = device_charge(
                        device,
                        class_name,
                        context,
                        matcher,
                        consumed_capacity=consumed_by_name(result.consumed_capacity, result.driver) or None,
                    )
                    if error:
                        errors.append(f"claim {key or claim.name}: {error}")
            for resource, amount in pairs:
                flavor = admitted.get(resource) or context.node_flavor(cluster_queue, resource, node, pod.tolerations)
                if flavor is None:
                    continue
                quota_key = (cluster_queue.name, flavor, resource)
                amounts[quota_key] = amounts.get(quota_key, Fraction(0)) + amount
    if cluster_queue is not None and node is not None and pod.extended_requests:
        # DRA-backed extended resources a device plugin served on this node (it advertises them): no claim
        # holds them, Kueue still charges them.
        for resource, quantity in pod.extended_requests.items():
            if not node.allocatable.get(resource):
                continue
            device_class, problem = class_for_resource(snapshot.device_classes, resource)
            if device_class is None or problem:
                continue
            quota_name, problem = quota_resource(context.mappings, resource, device_class.name)
            if problem:
                continue
            flavor = admitted.get(quota_name) or context.node_flavor(cluster_queue, quota_name, node, pod.tolerations)
            if flavor is None:
                continue
            quota_key = (cluster_queue.name, flavor, quota_name)
            amounts[quota_key] = amounts.get(quota_key, Fraction(0)) + quantity
    return claim_keys, amounts, unallocated, tuple(dict.fromkeys(errors))
