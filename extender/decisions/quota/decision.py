"""Quota verdicts per node: what the pod would be charged there, in which flavor, and whether it is left.

Kueue decides flavors blind to nodes; here the flavor walk only counts flavors that have a device-feasible node
whose charge fits, so a pod is sent where both devices and quota exist. Reasons that depend only on the
flavor are worded identically on every node of that flavor, so kube-scheduler's event aggregates them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

from extender.decisions.devices.extended_resources import (
    EXTENDED_CLAIM_NAME,
    NO_EXTENDED,
    ExtendedRequests,
    extended_charges,
)
from extender.decisions.devices.results import Allocation, ChosenDevice
from extender.decisions.devices.selection import DeviceMatcher
from extender.decisions.quota.charges import (
    UNMAPPED_IGNORE as UNMAPPED_IGNORE,
)
from extender.decisions.quota.charges import (
    UNMAPPED_REJECT as UNMAPPED_REJECT,
)
from extender.decisions.quota.charges import (
    counts_devices_only,
    device_charge,
    unmapped_reason,
)
from extender.decisions.quota.context import QuotaContext, untolerated_taint
from extender.decisions.quota.tree import Fit, FitOutcome, QuotaLedger, worst_fit
from extender.state.core import Pod, Toleration
from extender.state.dra import consumed_by_name
from extender.state.kueue import (
    ClusterQueue,
    FlavorFungibility,
    FungibilityPolicy,
    FungibilityPreference,
    ResourceGroup,
    pod_queue_name,
)
from extender.state.quantity import format_quantity
from extender.state.reservations import QuotaKey
from extender.state.store import ClusterSnapshot

# One node's charge: (quota resource, amount) pairs, sorted; equal charges of one call are one tuple object.
Charge = tuple[tuple[str, Fraction], ...]


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
    # The nodes of `per_node` whose NodeQuota refuses them, by that NodeQuota (nodes of one charge and flavor
    # share it): the caller answers them a group at a time instead of a node at a time.
    refused_groups: tuple[tuple[NodeQuota, list[str]], ...] = ()
    # The other nodes of `per_node` (they pass), by their NodeQuota: scoring goes a group at a time too.
    passed_groups: tuple[tuple[NodeQuota, list[str]], ...] = ()


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
    queue = pod_queue_name(pod.labels)
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


def _consumed_capacity(chosen: ChosenDevice) -> Mapping[str, Fraction] | None:
    """What the allocator says this pick consumes of a consumable-capacity device (allocation results carry
    consumedCapacity once the allocator shares such devices); None: the device is taken whole."""
    return consumed_by_name(chosen.consumed_capacity, chosen.device.driver) or None


def node_charges(
    allocation: Allocation,
    context: QuotaContext,
    unmapped: str,
    *,
    extra: Mapping[str, Fraction] | None = None,
    matcher: DeviceMatcher | None = None,
) -> tuple[dict[str, Fraction], str]:
    """Quota resource -> amount for this allocation (plus the pod's extended-resource charge `extra`); an
    error text when a device cannot be charged (an unmapped class that must be rejected, a mapping's counter
    or capacity the device does not publish)."""
    charges: dict[str, Fraction] = dict(extra) if extra else {}
    for claim in allocation.claims:
        if claim.claim.pod_claim_name == EXTENDED_CLAIM_NAME:
            continue  # charged through `extra`, whether DRA or a device plugin serves it on this node
        for chosen in claim.devices:
            if chosen.admin_access:
                continue
            pairs, error = device_charge(
                chosen.device,
                chosen.device_class,
                context,
                matcher,
                unmapped=unmapped,
                consumed_capacity=_consumed_capacity(chosen),
            )
            if error:
                return {}, error
            for resource, amount in pairs:
                charges[resource] = charges.get(resource, Fraction(0)) + amount
    return charges, ""


def _class_count_charges(
    by_class: tuple[tuple[str, int], ...], context: QuotaContext, unmapped: str, extra: Mapping[str, Fraction]
) -> tuple[dict[str, Fraction], str]:
    charges: dict[str, Fraction] = dict(extra)
    for class_name, count in by_class:
        resource = context.resource_for_class(class_name)
        if resource is None:
            if unmapped == UNMAPPED_REJECT:
                return {}, unmapped_reason(class_name)
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


# --- Kueue's flavor walk (pkg/scheduler/flavorassigner) ----------------------------------------------------------

# preemptionMode of flavorassigner.go, with borrowing as a level: noFit < preempt < fit.
_NO_FIT, _PREEMPT, _FIT = 0, 2, 4


class _Mode(NamedTuple):
    preemption: int
    borrowing: int  # 0: within nominal quota; 1: borrowing from the cohort


_WORST = _Mode(_NO_FIT, 1 << 30)


def _mode_of(fits: tuple[Fit, ...]) -> _Mode:
    """granularMode for one node's request in one flavor: the worst of its resources (fitsResourceQuota).

    The extender cannot simulate preemption; like Kueue it treats a request above what is free but within the
    ClusterQueue's nominal quota as one preemption could make room for, anything else that does not fit now
    as no fit."""
    preemption, borrowing = _FIT, 0
    for fit in fits:
        if fit.outcome is FitOutcome.FITS:
            continue
        if fit.outcome is FitOutcome.FITS_BY_BORROWING:
            borrowing = 1
        elif fit.outcome is FitOutcome.NEEDS_PREEMPTION and fit.nominal >= fit.requested:
            preemption = min(preemption, _PREEMPT)
        else:
            return _WORST
    return _Mode(preemption, borrowing)


def _preferred(a: _Mode, b: _Mode, fungibility: FlavorFungibility) -> bool:
    """flavorassigner.isPreferred: is mode a better than b under the queue's fungibility preference?"""
    if a.preemption == _NO_FIT:
        return False
    if b.preemption == _NO_FIT:
        return True
    if fungibility.preference is FungibilityPreference.PREEMPTION_OVER_BORROWING:
        if a.borrowing != b.borrowing:
            return a.borrowing < b.borrowing
        return a.preemption > b.preemption
    if a.preemption != b.preemption:
        return a.preemption > b.preemption
    return a.borrowing < b.borrowing


def _try_next_flavor(mode: _Mode, fungibility: FlavorFungibility) -> bool:
    """flavorassigner.shouldTryNextFlavor: whenCanPreempt / whenCanBorrow decide whether the walk stops here."""
    if mode.preemption == _NO_FIT:
        return True
    if mode.preemption == _PREEMPT and fungibility.when_can_preempt is FungibilityPolicy.TRY_NEXT_FLAVOR:
        return True
    return mode.borrowing > 0 and fungibility.when_can_borrow is FungibilityPolicy.TRY_NEXT_FLAVOR


@dataclass(frozen=True, slots=True)
class _GroupChoice:
    flavor: str  # "" when no flavor can take the request now
    mode: _Mode
    skipped: tuple[str, ...]  # why flavors were passed over (for the pod-level reason)
    admitted: bool = False  # Kueue already admitted the pod's Workload to this flavor


def _walk_group(
    cluster_queue: ClusterQueue,
    group: ResourceGroup,
    context: QuotaContext,
    tolerations: tuple[Toleration, ...],
    candidates: list[tuple[tuple[str, ...], tuple[tuple[str, Fraction], ...]]],
    ledger: QuotaLedger,
    forced: str,
    fit_memo: dict[tuple[str, tuple[tuple[str, Fraction], ...]], tuple[Fit, ...]],
) -> _GroupChoice:
    """One resource group's walk over its flavors in order, independently of the other groups (Kueue's
    findFlavorForPodSets). A flavor's mode is the best any of its device-feasible nodes reaches with the
    charge it would take there; the walk stops where shouldTryNextFlavor says so, else keeps the preferred."""
    fungibility = cluster_queue.flavor_fungibility
    best, best_mode = "", _WORST
    skipped: list[str] = []
    for flavor_quotas in group.flavors:
        name = flavor_quotas.name
        if forced and name != forced:
            continue
        flavor = context.flavors.get(name)
        if flavor is None:
            continue
        taint = untolerated_taint(flavor, tolerations)
        if taint is not None:
            skipped.append(f"untolerated taint {taint} in flavor {name}")
            continue
        mode = _WORST
        for held, charge in candidates:
            if name not in held:
                continue
            fits = _fits_in(cluster_queue, name, charge, ledger, fit_memo)
            node_mode = _mode_of(fits)
            if _preferred(node_mode, mode, fungibility):
                mode = node_mode
        if forced:
            return _GroupChoice(name, mode, tuple(skipped), admitted=True)
        if not _try_next_flavor(mode, fungibility):
            return _GroupChoice(name, mode, tuple(skipped))
        if _preferred(mode, best_mode, fungibility):
            best, best_mode = name, mode
    return _GroupChoice(best, best_mode, tuple(skipped))


def _fits_in(
    cluster_queue: ClusterQueue,
    flavor: str,
    charge: tuple[tuple[str, Fraction], ...],
    ledger: QuotaLedger,
    memo: dict[tuple[str, tuple[tuple[str, Fraction], ...]], tuple[Fit, ...]],
) -> tuple[Fit, ...]:
    key = (flavor, charge)
    fits = memo.get(key)
    if fits is None:
        fits = tuple(ledger.fits(cluster_queue.name, flavor, resource, amount) for resource, amount in charge)
        memo[key] = fits
    return fits


def decide_quota(
    snapshot: ClusterSnapshot,
    pod: Pod,
    allocations: Mapping[str, Allocation],
    context: QuotaContext | None,
    ledger_for: QuotaLedger | None,
    *,
    unmapped: str = UNMAPPED_IGNORE,
    extended: ExtendedRequests = NO_EXTENDED,
    matcher: DeviceMatcher | None = None,
    same_counts: bool = False,
) -> QuotaDecision:
    """Quota verdicts for the device-feasible nodes (`allocations`), with flavors chosen Kueue's way.

    `same_counts`: every allocation takes the same devices per class (the commonest pod's remembered answers,
    settled.SettledNodes, all of one request shape), so that a charge made of class counts alone is the same
    on every node and the nodes go into its bucket with one list copy instead of a look at each.
    Every allocation is for a node of `snapshot.nodes`: decide_pod's device step refuses the others as unknown
    before any allocator runs, so no node is looked up here (in a 1000-node burst under the real kube-scheduler
    that check took about a sixth of filter's CPU: the nodes' map is long-lived, out of the CPU caches by the
    time a call comes).

    Per node: the charge of what the allocator would take there. Per resource group of the charged
    resources: Kueue's flavor walk over the flavors the pod may use (taints), each flavor judged by its best
    node. A node passes when, for every group, it belongs to the group's chosen flavor and its own charge
    fits there. `ledger_for` holds usage plus every other pod's reservation, so the answer is what this pod
    may still take.
    """
    if context is None or not context.enabled or not pod_queue_name(pod.labels):
        return NOT_GOVERNED
    cluster_queue, rejection = queue_problem(snapshot, pod, context)
    if rejection is not None:
        return rejection
    assert cluster_queue is not None and ledger_for is not None
    extra, problem = extended_charges(extended, context.mappings)
    if problem:
        return _reject(problem, CATEGORY_UNMAPPED)
    workload = snapshot.admitted_workload(pod.uid, *pod.owner_uids)
    admitted_flavors: dict[str, str] = {}
    if (
        workload is not None
        and workload.admission is not None
        and workload.admission.cluster_queue == cluster_queue.name
    ):
        for assignment in workload.admission.pod_set_assignments:
            admitted_flavors.update(assignment.flavors)
    tolerations = pod.tolerations

    # 1. Each node's charge. Nodes differ only by the devices taken per class (or, for counter and capacity
    # mappings, by the devices themselves): thousands of candidate nodes fall into a handful of charges, so
    # from here on the work is per charge (and per flavor set), and per node only a lookup and an append.
    # The allocator's shortcut hands every node it settles the same class-count tuple: keyed by its identity
    # (alive for this call: `allocations` holds it), its charge costs one lookup per node.
    nodes = snapshot.nodes
    per_node: dict[str, NodeQuota] = {}
    charge_nodes: dict[int, tuple[Charge, list[str]]] = {}  # id(charge) -> (charge, its nodes in order)
    charges_memo: dict[object, tuple[Charge, str]] = {}
    by_counts: dict[int, list[str]] = {}  # id(class counts) -> the bucket of its charge
    device_only: dict[str, bool] = {}
    refused: dict[str, NodeQuota] = {}
    refused_groups: list[tuple[NodeQuota, list[str]]] = []  # what QuotaDecision.refused_groups says
    unmapped_nodes: dict[str, list[str]] = {}  # error -> the nodes it refuses (a list of refused_groups)
    counts_only = not extended.resources
    together = same_counts and len(allocations) > 1
    for node_name, allocation in allocations.items():
        counts = allocation.known_class_counts
        bucket_of_counts = by_counts.get(id(counts)) if counts is not None else None
        if bucket_of_counts is not None:
            if together:  # the first node's charge holds for all: the rest join its bucket at once
                bucket_of_counts.extend(list(allocations)[len(bucket_of_counts) :])
                break
            bucket_of_counts.append(node_name)  # the common case: one lookup, one append
            continue
        by_class = counts if counts is not None else allocation.class_counts()
        simple = counts_only
        for class_name, _ in by_class:
            only = device_only.get(class_name)
            if only is None:
                only = device_only[class_name] = counts_devices_only(context, class_name)
            if not only:
                simple = False
                break
        memo_key: object = (
            by_class if simple else tuple(id(chosen.device) for claim in allocation.claims for chosen in claim.devices)
        )
        memoized = charges_memo.get(memo_key)
        if memoized is None:
            if simple:
                computed, error = _class_count_charges(by_class, context, unmapped, extra)
            else:
                computed, error = node_charges(allocation, context, unmapped, extra=extra, matcher=matcher)
            memoized = (tuple(sorted(computed.items())), error)
            charges_memo[memo_key] = memoized
        charge, error = memoized
        if error:
            rejected = refused.get(error)
            if rejected is None:
                rejected = refused[error] = NodeQuota({}, (), "", QuotaRejection(error, True, CATEGORY_UNMAPPED))
                unmapped_nodes[error] = []
                refused_groups.append((rejected, unmapped_nodes[error]))
            per_node[node_name] = rejected
            unmapped_nodes[error].append(node_name)
            continue
        bucket = charge_nodes.get(id(charge))
        if bucket is None:
            bucket = charge_nodes[id(charge)] = (charge, [])
        bucket[1].append(node_name)
        if simple and counts is not None:
            by_counts[id(counts)] = bucket[1]

    # 2. The charged resources by resource group; a resource no group covers is refused everywhere (on a node
    # whose charge names several such resources, the last one found says it).
    groups: dict[int, tuple[ResourceGroup, list[str]]] = {}
    uncovered: dict[int, NodeQuota] = {}  # id(charge) -> its refusal
    for charge, _ in charge_nodes.values():
        for resource, _amount in charge:
            group = cluster_queue.resource_group_for(resource)
            if group is None:
                summary = f"ClusterQueue {cluster_queue.name} has no quota for {resource}"
                refusal = NodeQuota({}, (), "", QuotaRejection(summary, True, CATEGORY_UNCOVERED))
                for other_id, (other, _names) in charge_nodes.items():
                    if any(name == resource for name, _ in other):
                        uncovered[other_id] = refusal
                continue
            entry = groups.setdefault(id(group), (group, []))
            if resource not in entry[1]:
                entry[1].append(resource)
    for charge_id, refusal in uncovered.items():
        uncovered_names = charge_nodes.pop(charge_id)[1]
        per_node.update(dict.fromkeys(uncovered_names, refusal))
        refused_groups.append((refusal, uncovered_names))

    # 3. Each group walks its flavors independently. Nodes of one charge are split by the flavors holding them
    # in each group: `buckets` ends with one entry per (charge, flavors per group), each with its nodes.
    fit_memo: dict[tuple[str, Charge], tuple[Fit, ...]] = {}
    choices: list[tuple[ResourceGroup, tuple[str, ...], _GroupChoice]] = []
    buckets: list[tuple[Charge, tuple[tuple[str, ...], ...], list[str]]] = [
        (charge, (), names) for charge, names in charge_nodes.values()
    ]
    for group, resources in groups.values():
        wanted = set(resources)
        candidates: list[tuple[tuple[str, ...], Charge]] = []
        seen: set[tuple[tuple[str, ...], int]] = set()
        parts: dict[int, Charge] = {}
        split: list[tuple[Charge, tuple[tuple[str, ...], ...], list[str]]] = []
        partition = context.flavor_partition(cluster_queue, group, nodes, tolerations)
        # Every node of `nodes` is in exactly one member set, and every bucket holds only nodes of `nodes`
        # (allocations are on known nodes only): with one set, it holds the whole bucket, which then stays one list (the
        # commonest case, one flavor per group, costs no set intersection per node).
        only_held = next(iter(partition)) if len(partition) == 1 else None
        for charge, helds, names in buckets:
            part = parts.get(id(charge))
            if part is None:
                part = parts[id(charge)] = tuple((r, a) for r, a in charge if r in wanted)
            if not part:
                split.append((charge, (*helds, ()), names))
                continue
            if only_held is not None:
                held_groups: Iterable[tuple[tuple[str, ...], list[str]]] = ((only_held, names),)
            else:
                remaining = set(names)
                held_groups = ((held, list(remaining & members)) for held, members in partition.items())
            for held, held_names in held_groups:
                if not held_names:
                    continue
                split.append((charge, (*helds, held), held_names))
                if (held, id(part)) not in seen:
                    seen.add((held, id(part)))
                    candidates.append((held, part))
        buckets = split
        forced = next((admitted_flavors[r] for r in resources if r in admitted_flavors), "")
        choice = _walk_group(cluster_queue, group, context, tolerations, candidates, ledger_for, forced, fit_memo)
        choices.append((group, tuple(resources), choice))

    # 4. Each bucket's verdict against the chosen flavors (one per bucket; every node of it shares it).
    admissible: list[NodeQuota] = []
    passed_groups: list[tuple[NodeQuota, list[str]]] = []
    for charge, helds, names in buckets:
        quota = _node_verdict(cluster_queue, charge, helds, choices, fit_memo, ledger_for)
        per_node.update(dict.fromkeys(names, quota))
        if quota.rejection is None:
            admissible.append(quota)
            passed_groups.append((quota, names))
        else:
            refused_groups.append((quota, names))

    chosen = ",".join(dict.fromkeys(choice.flavor for _, _, choice in choices if choice.flavor))
    reservation: dict[QuotaKey, Fraction] = {}
    for quota in admissible:  # what the pod is held to: the largest charge of any node that passes
        for quota_key, amount in quota.charges.items():
            reservation[quota_key] = max(reservation.get(quota_key, Fraction(0)), amount)
    return QuotaDecision(
        governed=True,
        cluster_queue=cluster_queue.name,
        per_node=per_node,
        chosen_flavor=chosen,
        reservation=reservation,
        refused_groups=tuple(refused_groups),
        passed_groups=tuple(passed_groups),
    )


def _node_verdict(
    cluster_queue: ClusterQueue,
    charge: Charge,
    helds: tuple[tuple[str, ...], ...],
    choices: list[tuple[ResourceGroup, tuple[str, ...], _GroupChoice]],
    fit_memo: dict[tuple[str, tuple[tuple[str, Fraction], ...]], tuple[Fit, ...]],
    ledger: QuotaLedger,
) -> NodeQuota:
    charges: dict[QuotaKey, Fraction] = {}
    fits: list[Fit] = []
    primary = ""
    for (_group, resources, choice), held in zip(choices, helds, strict=True):
        part = tuple((r, a) for r, a in charge if r in resources)
        if not part:
            continue
        names = ", ".join(resources)
        if not held:
            skipped = f" ({'; '.join(choice.skipped)})" if choice.skipped else ""
            summary = (
                f"node is in no flavor of ClusterQueue {cluster_queue.name} that this pod may use for {names}{skipped}"
            )
            return NodeQuota(charges, tuple(fits), primary, QuotaRejection(summary, True, CATEGORY_FLAVOR))
        if not choice.flavor:
            # No flavor can take the request now: the node's own verdict in its first flavor says why.
            own = _fits_in(cluster_queue, held[0], part, ledger, fit_memo)
            worst = worst_fit(own)
            assert worst is not None
            reason = _fit_reason(worst)
            if worst.admissible:  # fits here, but the walk judged the flavor by other nodes: never passes
                reason = QuotaRejection(
                    f"ClusterQueue {cluster_queue.name} has no flavor that can take {names} for this pod now",
                    False,
                    CATEGORY_QUOTA,
                )
            return NodeQuota(charges, tuple(fits) + own, held[0], reason)
        if choice.flavor not in held and choice.admitted:
            summary = f"Kueue admitted this pod's workload to flavor {choice.flavor} for {names}"
            return NodeQuota(charges, tuple(fits), held[0], QuotaRejection(summary, True, CATEGORY_FLAVOR))
        if choice.flavor not in held:
            summary = (
                f"ClusterQueue {cluster_queue.name} assigned flavor {choice.flavor} to this pod; "
                f"node is in flavor {', '.join(held)}"
            )
            return NodeQuota(charges, tuple(fits), held[0], QuotaRejection(summary, False, CATEGORY_FLAVOR))
        primary = primary or choice.flavor
        group_fits = _fits_in(cluster_queue, choice.flavor, part, ledger, fit_memo)
        for (resource, amount), _fit in zip(part, group_fits, strict=True):
            charges[(cluster_queue.name, choice.flavor, resource)] = amount
        fits.extend(group_fits)
        if choice.mode.preemption == _PREEMPT:
            worst = worst_fit(group_fits)
            if worst is not None and worst.admissible:
                continue
            summary = (
                f"ClusterQueue {cluster_queue.name} would preempt in flavor {choice.flavor} "
                f"(whenCanPreempt: MayStopSearch); the extender does not preempt"
            )
            if worst is not None:
                return NodeQuota(charges, tuple(fits), primary, _fit_reason(worst))
            return NodeQuota(charges, tuple(fits), primary, QuotaRejection(summary, False, CATEGORY_QUOTA))
    worst = worst_fit(fits)
    rejection = _fit_reason(worst) if worst is not None and not worst.admissible else None
    return NodeQuota(charges, tuple(fits), primary, rejection)
