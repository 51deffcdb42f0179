"""Quota verdicts per node: what the pod would be charged there, in which flavor, and whether it is left.

Kueue decides flavors blind to nodes; here the flavor walk only counts flavors that have a device-feasible node
whose charge fits, so a pod is sent where both devices and quota exist. Reasons that depend only on the
flavor are worded identically on every node of that flavor, so kube-scheduler's event aggregates them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

from extender.decisions.allocator import Allocation
from extender.decisions.quota_context import QuotaContext
from extender.decisions.quota_tree import Fit, FitOutcome, QuotaLedger, worst_fit
from extender.state.core import Pod
from extender.state.kueue import QUEUE_NAME_LABEL, ClusterQueue, FungibilityPolicy
from extender.state.quantity import format_quantity
from extender.state.reservations import QuotaKey
from extender.state.store import ClusterSnapshot

UNMAPPED_IGNORE = "ignore"
UNMAPPED_REJECT = "reject"


class QuotaRejection(NamedTuple):
    summary: str
    unresolvable: bool
    category: str


class NodeQuota(NamedTuple):
    """One node's quota numbers: the charge and Kueue's verdict per flavor-resource. (A NamedTuple: one is
    built per candidate node.)"""

    charges: Mapping[QuotaKey, Fraction]
    fits: tuple[Fit, ...]
    flavor: str  # the node's flavor for the pod's primary resource ("" when nothing is charged)
    rejection: QuotaRejection | None = None

    @property
    def admissible(self) -> bool:
        return self.rejection is None


@dataclass(frozen=True)
class QuotaDecision:
    governed: bool
    cluster_queue: str = ""
    pod_rejection: QuotaRejection | None = None  # applies to every node
    per_node: Mapping[str, NodeQuota] = field(default_factory=dict)
    chosen_flavor: str = ""
    reservation: Mapping[QuotaKey, Fraction] = field(default_factory=dict)  # what to hold for the pod

    def node_rejection(self, node: str) -> QuotaRejection | None:
        if self.pod_rejection is not None:
            return self.pod_rejection
        quota = self.per_node.get(node)
        return quota.rejection if quota is not None else None


NOT_GOVERNED = QuotaDecision(governed=False)

CATEGORY_QUEUE = "queue-config"
CATEGORY_STOPPED = "queue-stopped"
CATEGORY_FLAVOR = "other-flavor"
CATEGORY_QUOTA = "quota-exhausted"
CATEGORY_QUOTA_NEVER = "quota-exceeds-maximum"
CATEGORY_UNCOVERED = "resource-not-covered"
CATEGORY_UNMAPPED = "class-not-mapped"


def _reject(summary: str, category: str, *, unresolvable: bool = True) -> QuotaDecision:
    return QuotaDecision(governed=True, pod_rejection=QuotaRejection(summary, unresolvable, category))


def queue_problem(
    snapshot: ClusterSnapshot, pod: Pod, context: QuotaContext
) -> tuple[ClusterQueue | None, QuotaDecision | None]:
    """The pod's ClusterQueue, or a decision rejecting the pod on every node."""
    queue = pod.labels.get(QUEUE_NAME_LABEL, "")
    local_queue = context.local_queues.get(f"{pod.namespace}/{queue}")
    if local_queue is None:
        return None, _reject(f"LocalQueue {pod.namespace}/{queue} does not exist", CATEGORY_QUEUE)
    if local_queue.stop_policy.value != "None":
        return None, _reject(
            f"LocalQueue {local_queue.key} is stopped ({local_queue.stop_policy.value})", CATEGORY_STOPPED
        )
    cluster_queue = context.cluster_queues.get(local_queue.cluster_queue)
    if cluster_queue is None:
        return None, _reject(
            f"ClusterQueue {local_queue.cluster_queue} of LocalQueue {local_queue.key} does not exist", CATEGORY_QUEUE
        )
    if cluster_queue.is_stopped:
        return None, _reject(
            f"ClusterQueue {cluster_queue.name} is stopped ({cluster_queue.stop_policy.value})", CATEGORY_STOPPED
        )
    problem = context.problems.get(cluster_queue.name)
    if problem:
        return None, _reject(problem, CATEGORY_QUEUE)
    namespace = snapshot.namespaces.get(pod.namespace)
    labels = namespace.labels if namespace is not None else {"kubernetes.io/metadata.name": pod.namespace}
    if not cluster_queue.selects_namespace(labels):
        return None, _reject(
            f"ClusterQueue {cluster_queue.name} does not admit workloads from namespace {pod.namespace}",
            CATEGORY_QUEUE,
        )
    return cluster_queue, None


def node_charges(allocation: Allocation, context: QuotaContext, unmapped: str) -> tuple[dict[str, Fraction], str]:
    """Quota resource -> amount for this allocation; an error text when an unmapped class must be rejected."""
    charges: dict[str, Fraction] = {}
    for class_name, count in allocation.class_counts():
        resource = context.resource_for_class(class_name)
        if resource is None:
            if unmapped == UNMAPPED_REJECT:
                return {}, f"DeviceClass {class_name} has no deviceClassMapping, and unmapped classes are rejected"
            continue
        charges[resource] = charges.get(resource, Fraction(0)) + count
    return charges, ""


def _fit_reason(fit: Fit) -> QuotaRejection:
    requested = format_quantity(fit.requested)
    if fit.outcome is FitOutcome.NOT_COVERED:
        return QuotaRejection(
            f"ClusterQueue {fit.cluster_queue} has no quota for {fit.resource} in flavor {fit.flavor}",
            True,
            CATEGORY_UNCOVERED,
        )
    if fit.outcome is FitOutcome.NEVER_FITS:
        return QuotaRejection(
            f"ClusterQueue {fit.cluster_queue} can never provide {requested} {fit.resource} in flavor {fit.flavor} "
            f"(at most {format_quantity(fit.potential_available)})",
            True,
            CATEGORY_QUOTA_NEVER,
        )
    if fit.outcome is FitOutcome.INACTIVE:
        return QuotaRejection(f"ClusterQueue {fit.cluster_queue} is inactive: {fit.reason}", True, CATEGORY_QUEUE)
    return QuotaRejection(
        f"ClusterQueue {fit.cluster_queue} quota exhausted for {fit.resource} in flavor {fit.flavor}: "
        f"requested {requested}, available {format_quantity(fit.available)}",
        False,
        CATEGORY_QUOTA,
    )


def decide_quota(
    snapshot: ClusterSnapshot,
    pod: Pod,
    allocations: Mapping[str, Allocation],
    context: QuotaContext | None,
    ledger_for: QuotaLedger | None,
    *,
    unmapped: str = UNMAPPED_IGNORE,
) -> QuotaDecision:
    """Quota verdicts for the device-feasible nodes (`allocations`), with the flavor chosen Kueue's way.

    `ledger_for` holds usage plus every other pod's reservation, so the answer is what this pod may still take.
    """
    if context is None or not context.enabled or QUEUE_NAME_LABEL not in pod.labels:
        return NOT_GOVERNED
    cluster_queue, rejection = queue_problem(snapshot, pod, context)
    if rejection is not None:
        return rejection
    assert cluster_queue is not None and ledger_for is not None
    workload = snapshot.admitted_workload(pod.uid)
    admitted_flavors: dict[str, str] = {}
    if (
        workload is not None
        and workload.admission is not None
        and workload.admission.cluster_queue == cluster_queue.name
    ):
        for assignment in workload.admission.pod_set_assignments:
            admitted_flavors.update(assignment.flavors)

    per_node: dict[str, NodeQuota] = {}
    flavor_order: list[str] = []
    # Nodes differ only by (devices taken per class, the node's flavor per charged resource); thousands of
    # candidate nodes fall into a handful of those, so each combination is judged once.
    charges_memo: dict[tuple[tuple[str, int], ...], tuple[dict[str, Fraction], str]] = {}
    quota_memo: dict[tuple[tuple[tuple[str, int], ...], tuple[str | None, ...]], NodeQuota] = {}
    for node_name, allocation in allocations.items():
        node = snapshot.nodes.get(node_name)
        if node is None:
            continue
        by_class = allocation.class_counts()
        memoized = charges_memo.get(by_class)
        if memoized is None:
            memoized = node_charges(allocation, context, unmapped)
            charges_memo[by_class] = memoized
        resource_charges, error = memoized
        if error:
            per_node[node_name] = NodeQuota({}, (), "", QuotaRejection(error, True, CATEGORY_UNMAPPED))
            continue
        if len(resource_charges) == 1:
            node_flavors: tuple[str | None, ...] = (
                context.node_flavor(cluster_queue, next(iter(resource_charges)), node),
            )
        else:
            node_flavors = tuple(context.node_flavor(cluster_queue, resource, node) for resource in resource_charges)
        memo_key = (by_class, node_flavors)
        quota = quota_memo.get(memo_key)
        if quota is None:
            quota = _judge(cluster_queue, resource_charges, node_flavors, admitted_flavors, ledger_for)
            quota_memo[memo_key] = quota
            if quota.flavor and quota.flavor not in flavor_order:
                flavor_order.append(quota.flavor)
        per_node[node_name] = quota

    chosen = _choose_flavor(cluster_queue, per_node, flavor_order)
    if chosen:
        other_flavor = {
            flavor: QuotaRejection(
                f"ClusterQueue {cluster_queue.name} assigned flavor {chosen} to this pod; node is in flavor {flavor}",
                False,
                CATEGORY_FLAVOR,
            )
            for flavor in flavor_order
            if flavor != chosen
        }
        # NodeQuota objects are shared by every node of one (charge, flavor): rewrite each once.
        rewritten: dict[int, NodeQuota] = {}
        for node_name, quota in per_node.items():
            if quota.rejection is None and quota.flavor and quota.flavor != chosen:
                replacement = rewritten.get(id(quota))
                if replacement is None:
                    replacement = quota._replace(rejection=other_flavor[quota.flavor])
                    rewritten[id(quota)] = replacement
                per_node[node_name] = replacement
    reservation: dict[QuotaKey, Fraction] = {}
    for quota in {id(quota): quota for quota in per_node.values() if quota.rejection is None}.values():
        for key, amount in quota.charges.items():
            reservation[key] = max(reservation.get(key, Fraction(0)), amount)
    return QuotaDecision(
        governed=True,
        cluster_queue=cluster_queue.name,
        per_node=per_node,
        chosen_flavor=chosen,
        reservation=reservation,
    )


def _judge(
    cluster_queue: ClusterQueue,
    resource_charges: Mapping[str, Fraction],
    node_flavors: tuple[str | None, ...],
    admitted_flavors: Mapping[str, str],
    ledger: QuotaLedger,
) -> NodeQuota:
    """Kueue's verdict for charging `resource_charges` in the given flavors (one per resource)."""
    charges: dict[QuotaKey, Fraction] = {}
    fits: list[Fit] = []
    primary_flavor = ""
    for (resource, amount), flavor in zip(resource_charges.items(), node_flavors, strict=True):
        if flavor is None:
            if cluster_queue.resource_group_for(resource) is None:
                summary = f"ClusterQueue {cluster_queue.name} has no quota for {resource}"
                return NodeQuota(
                    charges, tuple(fits), primary_flavor, QuotaRejection(summary, True, CATEGORY_UNCOVERED)
                )
            summary = f"node matches no flavor of ClusterQueue {cluster_queue.name} for {resource}"
            return NodeQuota(charges, tuple(fits), primary_flavor, QuotaRejection(summary, True, CATEGORY_FLAVOR))
        primary_flavor = primary_flavor or flavor
        if resource in admitted_flavors and admitted_flavors[resource] != flavor:
            summary = f"Kueue admitted this pod's workload to flavor {admitted_flavors[resource]} for {resource}"
            return NodeQuota(charges, tuple(fits), primary_flavor, QuotaRejection(summary, True, CATEGORY_FLAVOR))
        charges[(cluster_queue.name, flavor, resource)] = amount
        fits.append(ledger.fits(cluster_queue.name, flavor, resource, amount))
    worst = worst_fit(fits)
    rejection = _fit_reason(worst) if worst is not None and not worst.admissible else None
    return NodeQuota(charges, tuple(fits), primary_flavor, rejection)


def _choose_flavor(cluster_queue: ClusterQueue, per_node: Mapping[str, NodeQuota], seen_flavors: list[str]) -> str:
    """Kueue's flavor walk over flavors that have a fitting node: first fit, or (TryNextFlavor) first without
    borrowing."""
    order = [name for name in cluster_queue.flavor_names if name in seen_flavors]
    order += [name for name in seen_flavors if name not in order]
    try_next = cluster_queue.flavor_fungibility.when_can_borrow is FungibilityPolicy.TRY_NEXT_FLAVOR
    fallback = ""
    for flavor in order:
        fitting = [q for q in per_node.values() if q.flavor == flavor and q.rejection is None]
        if not fitting:
            continue
        needs_borrowing = all(any(fit.outcome is FitOutcome.FITS_BY_BORROWING for fit in q.fits) for q in fitting)
        if needs_borrowing and try_next:
            fallback = fallback or flavor
            continue
        return flavor
    return fallback
