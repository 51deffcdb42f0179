"""Quota in use: what bound (or being bound) pods of a ClusterQueue hold, and allocated claims no such pod
carries, by flavor and resource.

Usage comes from what is actually allocated (claim status); this is the API server's truth, so a restart or a
lost watch rebuilds it. The rule (docs/kueue.md "Usage: every allocated device counts once"): every allocated
claim counts against exactly one ClusterQueue, in one flavor, for as long as it is allocated, whoever holds it.
`claim_charge` decides who carries it: a placed pod of that queue using it (`pod_usage` then counts it with the
pod's other charges), else the claim's own entry (`claim_usage`): a pod retried after a failed binding
(kube-scheduler's Unreserve leaves the allocation), a shared claim whose consumers finished, a PodGroup's claim
with no member running. The queue and flavors are the booking's (state/bookings.py: what the filter that gave
the quota chose, or what the claim was first charged in), never re-derived from the node while a booking is
known. The incremental bookkeeping is state/indexes/usage.py's UsageIndex, which the service feeds with these
functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
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
from extender.decisions.gang.claims import group_claim_charger, uses_claim
from extender.decisions.quota.charges import UNMAPPED_IGNORE, counts_devices_only, device_charge, node_charges
from extender.decisions.quota.context import QuotaContext
from extender.decisions.quota.workload_holds import own_flavors, own_workload
from extender.state.bookings import NO_BOOKINGS, Booking, BookingView
from extender.state.core import Pod
from extender.state.dra.claims import ClaimSpec, ResourceClaim
from extender.state.dra.devices import Device, consumed_by_name
from extender.state.indexes.usage import ClaimUsage, PodUsage
from extender.state.kueue.cluster_queue import ClusterQueue
from extender.state.kueue.local_queue import pod_queue_name
from extender.state.kueue.pod_workload import pod_set_assignment, workload_refs
from extender.state.podgroups.podgroup import POD_GROUPS_RESOURCE
from extender.state.reservations import QuotaKey, add_signed
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


def pod_cluster_queue(pod: Pod, context: QuotaContext, bookings: BookingView = NO_BOOKINGS) -> str | None:
    """The ClusterQueue a pod's charges count against: the one it was booked in when the extender gave it quota
    (its labels may have changed since: a bound pod's devices stay charged where they were given), else the one
    its queue label points to."""
    booking = bookings.pods.get(pod.uid) if pod.uid else None
    if booking is not None and booking.cluster_queue in context.cluster_queues:
        return booking.cluster_queue
    return cluster_queue_of(pod, context)


def charging_node(snapshot: ClusterSnapshot, pod: Pod) -> str:
    """The node on which `pod_usage` counts the pod: bound, or in PreBind (claims reserved for it); "" when it
    counts nowhere (not placed, finished, or its node is not in the view)."""
    if pod.is_terminal:
        return ""
    node = pod.node_name or in_flight_node(snapshot, pod)
    return node if node and node in snapshot.nodes else ""


@dataclass(frozen=True, slots=True)
class ClaimCharge:
    """Who carries an allocated claim's charge, decided the same way for the claim and for each pod using it (so
    exactly one of them counts it)."""

    carrier: str  # key of the placed pod whose usage counts the claim; "" when the claim's own entry does
    cluster_queue: str | None  # the queue charged; None when none is known (ungoverned, or nobody left to say)
    source: Pod | None = None  # the pod whose Workload and booking the charge follows (carrier, owner, consumer)
    group: str = ""  # the PodGroup key when the claim is a PodGroup's
    depends: tuple[str, ...] = ()  # pod keys whose change can change this answer
    problem: str = ""  # what is wrong with the claim's users (shown in the drift report)


def _consumer_pods(snapshot: ClusterSnapshot, claim: ResourceClaim) -> list[tuple[str, Pod | None, bool]]:
    """(pod key, the pod when the view shows that very pod, whether it is live) for each pod in reservedFor."""
    found: list[tuple[str, Pod | None, bool]] = []
    for consumer in claim.reserved_for:
        if consumer.resource != "pods":
            continue
        key = f"{claim.namespace}/{consumer.name}"
        pod = snapshot.pods.get(key)
        if pod is not None and consumer.uid and pod.uid and pod.uid != consumer.uid:
            pod = None  # replaced: another pod under the same name
        found.append((key, pod, pod is not None and not pod.is_terminal))
    return found


def owner_pod(snapshot: ClusterSnapshot, claim: ResourceClaim) -> Pod | None:
    """The pod a generated claim was made for (its owner: a template entry's claim, or kube-scheduler's claim for
    the pod's extended resources), when the view shows it."""
    if not claim.owner_uids:
        return None
    candidates = [f"{claim.namespace}/{claim.owner_pod}"] if claim.owner_pod else []
    candidates += [f"{claim.namespace}/{c.name}" for c in claim.reserved_for if c.resource == "pods"]
    for key in candidates:
        pod = snapshot.pods.get(key)
        if pod is not None and pod.uid and pod.uid in claim.owner_uids:
            return pod
    return None


def claim_charge(
    snapshot: ClusterSnapshot, claim: ResourceClaim, context: QuotaContext, bookings: BookingView = NO_BOOKINGS
) -> ClaimCharge:
    """The queue an allocated claim counts against and who carries the charge.

    The queue: the one the claim was first charged in (its booking), for the whole allocation; before any
    booking, the queue of the pod it was allocated for: its owner for a generated claim, the PodGroup's members
    for a PodGroup's claim, the first consumer still running (else the last one the view or the bookings know)
    for a shared claim. The carrier: a placed pod of that queue using the claim (for a PodGroup's claim, the
    first bound member, decisions/gang/claims.py group_claim_charger); else the claim's own entry, so the
    devices count while kube-scheduler retries a pod whose binding failed (its Unreserve takes the pod out of
    reservedFor and leaves the allocation: pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go
    Unreserve), while a finished consumer waits to be pruned (pkg/controller/resourceclaim/controller.go
    syncClaim), and while a PodGroup keeps its claim with no member running (the controller keeps the
    reservation for podgroups/<name> until the PodGroup is deleted). A pod of another queue using the claim
    never carries it: the charge does not move between queues."""
    booked = bookings.claims.get(claim.uid) if claim.uid else None
    booked_queue = (
        booked.cluster_queue if booked is not None and booked.cluster_queue in context.cluster_queues else None
    )

    def queue_of(pod: Pod) -> str | None:
        return pod_cluster_queue(pod, context, bookings)

    group_key = _group_of(snapshot, claim)
    if group_key:
        everyone = snapshot.members_of(group_key)
        members = [member for member in everyone if not member.is_terminal and uses_claim(member, claim)]
        queues = sorted({queue for member in members if (queue := queue_of(member))})
        problem = (
            f"the members of PodGroup {group_key} name different ClusterQueues ({', '.join(queues)})"
            if len(queues) > 1
            else ""
        )
        queue = booked_queue or next((q for member in members if (q := queue_of(member))), None)
        if queue is None:
            queue = next((q for member in everyone if uses_claim(member, claim) and (q := queue_of(member))), None)
        carrier = group_claim_charger(
            snapshot,
            claim,
            group_key,
            lambda member: bool(charging_node(snapshot, member)) and queue is not None and queue_of(member) == queue,
        )
        source = snapshot.pods.get(carrier) if carrier else next(iter(members), None)
        if queue is None and not problem:
            problem = f"PodGroup {group_key} has no member and the claim no booking: its queue is unknown"
        return ClaimCharge(carrier, queue, source, group_key, tuple(member.key for member in everyone), problem)

    consumers = _consumer_pods(snapshot, claim)
    depends = tuple(key for key, _pod, _live in consumers)
    owner = owner_pod(snapshot, claim)
    if claim.owner_uids and (owner is not None or claim.owner_pod):
        queue = booked_queue or (queue_of(owner) if owner is not None else None)
        if queue is None and owner is None:
            queue = _gone_pod_queue(claim.owner_uids, context, bookings)
        carrier = owner.key if owner is not None and charging_node(snapshot, owner) and queue_of(owner) == queue else ""
        owner_key = f"{claim.namespace}/{claim.owner_pod}" if claim.owner_pod else ""
        return ClaimCharge(
            carrier, queue, owner, "", tuple(dict.fromkeys((*depends, owner_key) if owner_key else depends))
        )

    live = [pod for _key, pod, is_live in consumers if pod is not None and is_live]
    known = [pod for _key, pod, _live in consumers if pod is not None]
    queue = booked_queue or next((q for pod in live if (q := queue_of(pod))), None)
    if queue is None:
        # no consumer running: the last one the view shows, else the last one booked
        queue = next((q for pod in reversed(known) if (q := queue_of(pod))), None)
    if queue is None:
        queue = _gone_pod_queue(tuple(c.uid for c in reversed(claim.reserved_for) if c.uid), context, bookings)
    carrier = next(
        (pod.key for pod in live if charging_node(snapshot, pod) and queue is not None and queue_of(pod) == queue), ""
    )
    source = snapshot.pods.get(carrier) if carrier else next(iter(live or list(reversed(known))), None)
    problem = ""
    if queue is None and claim.reserved_for and not known:
        problem = "allocated to pods the view no longer shows and no booking: its queue is unknown"
    return ClaimCharge(carrier, queue, source, "", depends, problem)


def _group_of(snapshot: ClusterSnapshot, claim: ResourceClaim) -> str:
    """The key of the PodGroup whose claim this is: the one it is reserved for (resourceclaim.IsReservedForPod
    with acceptPodGroupReservation), or, for a claim reserved for nobody, a PodGroup of its namespace naming it
    (resourceclaim.NameFromPodGroup: a resourceClaimName entry, or the claim recorded for a template)."""
    for consumer in claim.reserved_for:
        if consumer.resource == POD_GROUPS_RESOURCE:
            return f"{claim.namespace}/{consumer.name}"
    if claim.reserved_for or claim.owner_pod:
        return ""
    for group in snapshot.pod_groups.values():
        if group.namespace == claim.namespace and claim.name in group.claim_names():
            return group.key
    return ""


def foreign_claim(
    snapshot: ClusterSnapshot, pod: Pod, context: QuotaContext, cluster_queue: str, bookings: BookingView = NO_BOOKINGS
) -> str:
    """Why the pod may not use one of its allocated claims ("" when it may): the claim counts against another
    ClusterQueue than the pod's (`claim_charge`), and a pod never carries another queue's charge, so its use of
    the devices would be charged to nobody of its own queue: a ride on another queue's quota. Sharing a claim
    across queues is refused with this reason instead (docs/kueue.md: shared claims)."""
    for claim, _key, _generated in _claims_of(snapshot, pod):
        if claim is None or claim.allocation is None:
            continue
        charged = claim_charge(snapshot, claim, context, bookings).cluster_queue
        if charged and charged != cluster_queue:
            return (
                f"claim {claim.key} is allocated and counts against ClusterQueue {charged}: a pod of "
                f"ClusterQueue {cluster_queue} may not use it (a claim's devices count against one queue)"
            )
    return ""


def _gone_pod_queue(uids: tuple[str, ...], context: QuotaContext, bookings: BookingView) -> str | None:
    for uid in uids:
        booking = bookings.pods.get(uid)
        if booking is not None and booking.cluster_queue in context.cluster_queues:
            return booking.cluster_queue
    return None


def allocation_node(snapshot: ClusterSnapshot, claim: ResourceClaim) -> str:
    """The node of a claim's node-local devices ("" when they span nodes or the view has none of their pools)."""
    if claim.allocation is None:
        return ""
    for result in claim.allocation.results:
        pool = snapshot.pools.get((result.driver, result.pool))
        if pool is not None and pool.node_local:
            return pool.node_local
    return ""


def claim_usage(
    snapshot: ClusterSnapshot,
    claim: ResourceClaim,
    context: QuotaContext,
    *,
    matcher: DeviceMatcher | None = None,
    bookings: BookingView = NO_BOOKINGS,
) -> ClaimUsage | None:
    """An allocated claim's own entry in usage: its charge when no placed pod of its queue carries it (see
    `claim_charge`), in the flavors it was booked in (the claim's booking, else its pod's booking or Kueue
    admission, else the first flavor of the queue holding the allocation's node). None for a claim not
    allocated; a ClaimUsage without usage for a claim a pod carries (its `depends` still say which pods' events
    can change that)."""
    if claim.allocation is None:
        return None
    charge = claim_charge(snapshot, claim, context, bookings)
    node_name = allocation_node(snapshot, claim)
    if charge.carrier:
        return ClaimUsage(
            None,
            charge.depends,
            node_name,
            charge.cluster_queue or "",
            charge.carrier,
            charge.group,
            charge.problem,
            carried=True,
        )
    cluster_queue = context.cluster_queues.get(charge.cluster_queue) if charge.cluster_queue else None
    source = charge.source
    if cluster_queue is None:
        return ClaimUsage(
            None, charge.depends, node_name, "", source.key if source else "", charge.group, charge.problem
        )
    booked = bookings.claims.get(claim.uid) if claim.uid else None
    source_booking = bookings.pods.get(source.uid) if source is not None and source.uid else None
    admitted = _admitted_flavors(snapshot, source, cluster_queue.name) if source is not None else {}
    node = snapshot.nodes.get(node_name) if node_name else None
    tolerations = source.tolerations if source is not None else ()

    def flavor_of(resource: str) -> str | None:
        return (
            (booked.flavor(resource) if booked is not None and booked.cluster_queue == cluster_queue.name else None)
            or admitted.get(resource)
            or (
                source_booking.flavor(resource)
                if source_booking is not None and source_booking.cluster_queue == cluster_queue.name
                else None
            )
            or (context.node_flavor(cluster_queue, resource, node, tolerations) if node is not None else None)
        )

    extended = (
        source.extended_request_resources if source is not None and claim.name == source.extended_claim_name else None
    )
    amounts, problem = _claim_amounts(snapshot, claim, context, cluster_queue, flavor_of, matcher, extended)
    workload = own_workload(snapshot, source, cluster_queue.name) if source is not None else None
    usage = PodUsage(
        node_name,
        (claim.key,),
        tuple(amounts.items()),
        workload=workload.key if workload is not None else "",
        charged=_bookings_made(claim, cluster_queue.name, amounts, workload.key if workload is not None else ""),
    )
    return ClaimUsage(
        usage,
        charge.depends,
        node_name,
        cluster_queue.name,
        source.key if source is not None else "",
        charge.group,
        charge.problem or problem,
    )


def _bookings_made(
    claim: ResourceClaim, cluster_queue: str, amounts: Mapping[QuotaKey, Fraction], workload: str
) -> tuple[tuple[str, Booking], ...]:
    flavors = {resource: flavor for (queue, flavor, resource) in amounts if queue == cluster_queue}
    if not claim.uid or not flavors:
        return ()
    return ((claim.uid, Booking(cluster_queue, tuple(sorted(flavors.items())), claim.key, workload)),)


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
        empty = without_allocations(snapshot)
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


def without_allocations(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot with no device in use. Allocation versions no real snapshot has (shared -1, none per node),
    so the free-device memos never hand this view's answers to a real one or the other way round."""
    return replace(snapshot, allocated={}, shared_allocated={}, alloc_versions={}, shared_alloc_version=-1)


def pod_usage(
    snapshot: ClusterSnapshot,
    pod: Pod,
    context: QuotaContext,
    *,
    matcher: DeviceMatcher | None = None,
    bookings: BookingView = NO_BOOKINGS,
) -> PodUsage | None:
    """What a bound (or being bound) pod holds: the allocations of the claims it carries (`claim_charge`: its own
    generated claims, a shared claim or its PodGroup's when it is the one placed pod of the claim's queue that
    counts it) charged as filter charges them (devices, or the counters and capacity of the devices actually
    allocated), in the queue and flavors it was booked in (Kueue's admission of its Workload, else the
    extender's booking, else its queue label and the first flavor holding its node)."""
    if pod.is_terminal or not (pod.claims or pod.extended_claim_name or pod.extended_requests):
        return None
    node_name = pod.node_name or in_flight_node(snapshot, pod)
    if not node_name:
        return None
    claim_keys, amounts, _unallocated, charged, errors = _allocated_charges(
        snapshot, pod, context, node_name, matcher, bookings
    )
    if not claim_keys and not amounts:
        return None
    workload = own_workload(snapshot, pod, pod_cluster_queue(pod, context, bookings))
    own_pod_set = pod_set_assignment(workload, pod) if workload is not None else None
    return PodUsage(
        node_name,
        tuple(claim_keys),
        tuple(amounts.items()),
        workload=workload.key if workload is not None else "",
        pod_set=own_pod_set.name if own_pod_set is not None else "",
        owners=workload_refs(pod),
        charged=charged,
        errors=errors,
    )


def provisional_usage(
    snapshot: ClusterSnapshot,
    pod: Pod,
    context: QuotaContext,
    pending_demand: PendingDemand,
    *,
    matcher: DeviceMatcher | None = None,
    bookings: BookingView = NO_BOOKINGS,
) -> PodUsage | None:
    """What a placed pod is about to hold that `pod_usage` does not count yet, on the node it is placed on.

    Placed: bound, in PreBind (claims reserved for it), or nominated (status.nominatedNodeName, written by
    kube-scheduler before PreBind since 1.35). Not counted yet: any placed pod's claims the view does not show
    allocated (charged by `pending_demand`, what the allocator gives them on that node). An allocated claim is
    never counted here: usage counts every allocated claim already, through the pod carrying it or the claim's
    own entry (`claim_usage`). Pods and claims come on separate watches, which deliver (and, after a reset or a
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
    claim_keys, _allocated, unallocated, _charged, _errors = _allocated_charges(
        snapshot, pod, context, node_name, matcher, bookings
    )
    amounts: dict[QuotaKey, Fraction] = {}
    cq_name = pod_cluster_queue(pod, context, bookings)
    cluster_queue = context.cluster_queues.get(cq_name) if cq_name else None
    node = snapshot.nodes.get(node_name)
    if cluster_queue is not None and node is not None and unallocated:
        flavor_of = _pod_flavors(snapshot, pod, context, cluster_queue, node_name, bookings)
        for resource, amount in pending_demand(snapshot, pod, node_name, context).items():
            flavor = flavor_of(resource)
            if flavor is None:
                continue
            quota_key = (cluster_queue.name, flavor, resource)
            amounts[quota_key] = amounts.get(quota_key, Fraction(0)) + amount
    return PodUsage(node_name, tuple(claim_keys), tuple(amounts.items()), bound=False)


def _admitted_flavors(snapshot: ClusterSnapshot, pod: Pod, cq_name: str | None) -> dict[str, str]:
    """The flavors Kueue admitted the pod's own pod set to, by resource (when admitted to the pod's queue)."""
    return own_flavors(snapshot, pod, cq_name)


def _pod_flavors(
    snapshot: ClusterSnapshot,
    pod: Pod,
    context: QuotaContext,
    cluster_queue: ClusterQueue,
    node_name: str,
    bookings: BookingView,
) -> Callable[[str], str | None]:
    """The flavor a pod's charge of each resource counts in: Kueue's admission of its Workload, else the flavor
    the extender booked it in, else (no booking known: pods bound before the extender ran, or by a replica whose
    journal this one has not) the first flavor of its queue holding its node."""
    admitted = _admitted_flavors(snapshot, pod, cluster_queue.name)
    booking = bookings.pods.get(pod.uid) if pod.uid else None
    if booking is not None and booking.cluster_queue != cluster_queue.name:
        booking = None
    node = snapshot.nodes.get(node_name)

    def flavor_of(resource: str) -> str | None:
        return (
            admitted.get(resource)
            or (booking.flavor(resource) if booking is not None else None)
            or (context.node_flavor(cluster_queue, resource, node, pod.tolerations) if node is not None else None)
        )

    return flavor_of


def _carries(
    snapshot: ClusterSnapshot,
    claim: ResourceClaim,
    pod: Pod,
    cq_name: str | None,
    context: QuotaContext,
    bookings: BookingView,
) -> bool:
    """Whether the placed pod carries the allocated claim's charge: `claim_charge`'s answer, with its own
    generated claims answered directly (the commonest case: it carries them unless they were booked in another
    queue), which saves looking at its placement again for each."""
    if not _group_of(snapshot, claim):
        owner = owner_pod(snapshot, claim)
        if owner is not None and owner.key == pod.key:
            booked = bookings.claims.get(claim.uid) if claim.uid else None
            queue = (
                booked.cluster_queue
                if booked is not None and booked.cluster_queue in context.cluster_queues
                else cq_name
            )
            return queue is not None and queue == cq_name
    return claim_charge(snapshot, claim, context, bookings).carrier == pod.key


def _claim_amounts(
    snapshot: ClusterSnapshot,
    claim: ResourceClaim,
    context: QuotaContext,
    cluster_queue: ClusterQueue,
    flavor_of: Callable[[str], str | None],
    matcher: DeviceMatcher | None,
    extended_resources: Mapping[str, str] | None,
) -> tuple[dict[QuotaKey, Fraction], str]:
    """(the charge of an allocated claim's devices in `cluster_queue`, each resource in `flavor_of` it, what could
    not be charged). `extended_resources`: request -> extended resource name when the claim is kube-scheduler's
    claim for a pod's DRA-backed extended resources."""
    amounts: dict[QuotaKey, Fraction] = {}
    problems: list[str] = []
    if claim.allocation is None:
        return amounts, ""
    for result in claim.allocation.results:
        if result.admin_access:
            continue
        class_name = device_class_of(claim.spec, result.request)
        if class_name is None:
            continue
        pairs: tuple[tuple[str, Fraction], ...]
        if extended_resources is not None:
            resource_name = extended_resources.get(result.request, "")
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
                    problems.append(
                        f"device {result.driver}/{result.pool}/{result.device} is not published in any "
                        f"ResourceSlice, so its {resource} counter or capacity cannot be charged"
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
                    problems.append(error)
        for resource, amount in pairs:
            flavor = flavor_of(resource)
            if flavor is None:
                problems.append(f"no flavor of ClusterQueue {cluster_queue.name} for {resource}")
                continue
            quota_key = (cluster_queue.name, flavor, resource)
            amounts[quota_key] = amounts.get(quota_key, Fraction(0)) + amount
    return amounts, "; ".join(dict.fromkeys(problems))


def _allocated_charges(
    snapshot: ClusterSnapshot,
    pod: Pod,
    context: QuotaContext,
    node_name: str,
    matcher: DeviceMatcher | None,
    bookings: BookingView = NO_BOOKINGS,
) -> tuple[list[str], dict[QuotaKey, Fraction], bool, tuple[tuple[str, Booking], ...], tuple[str, ...]]:
    """(claim keys read, charges of what the pod carries on `node_name`, whether a claim is missing or not
    allocated yet, the scheduler's extended-resource claim included, the booking each claim it carries was
    charged in, and why an allocated device could not be charged: a mapping's counter or capacity it does not
    publish, which the drift report shows rather than charging 0)."""
    claim_keys: list[str] = []
    amounts: dict[QuotaKey, Fraction] = {}
    charged: list[tuple[str, Booking]] = []
    cq_name = pod_cluster_queue(pod, context, bookings)
    cluster_queue = context.cluster_queues.get(cq_name) if cq_name else None
    node = snapshot.nodes.get(node_name)
    flavor_of = (
        _pod_flavors(snapshot, pod, context, cluster_queue, node_name, bookings) if cluster_queue is not None else None
    )
    workload = own_workload(snapshot, pod, cq_name) if cluster_queue is not None else None
    unallocated = bool(pod.extended_requests) and not pod.extended_claim_name  # its claim not written yet
    errors: list[str] = []
    for claim, key, _generated in _claims_of(snapshot, pod):
        if key:
            claim_keys.append(key)  # its arrival or change re-attributes this pod
        if claim is None or claim.allocation is None:
            unallocated = True
        if claim is None or cluster_queue is None or flavor_of is None or node is None or claim.allocation is None:
            continue
        if not _carries(snapshot, claim, pod, cq_name, context, bookings):
            continue
        extended = pod.extended_request_resources if claim.name == pod.extended_claim_name else None
        claim_amounts, problem = _claim_amounts(snapshot, claim, context, cluster_queue, flavor_of, matcher, extended)
        if problem:
            errors.append(f"claim {key or claim.name}: {problem}")
        add_signed(amounts, claim_amounts.items(), 1)
        charged.extend(_bookings_made(claim, cluster_queue.name, claim_amounts, workload.key if workload else ""))
    if cluster_queue is not None and flavor_of is not None and node is not None and pod.extended_requests:
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
            flavor = flavor_of(quota_name)
            if flavor is None:
                continue
            quota_key = (cluster_queue.name, flavor, quota_name)
            amounts[quota_key] = amounts.get(quota_key, Fraction(0)) + quantity
    return claim_keys, amounts, unallocated, tuple(charged), tuple(dict.fromkeys(errors))
