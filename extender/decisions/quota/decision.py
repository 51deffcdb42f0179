"""Quota verdicts for one pod over its device-feasible nodes: the charge on each node, the flavors chosen
Kueue's way, and whether the charge is left in the ClusterQueue.

Kueue v0.19.2 assigns flavors to a Workload before any node is chosen (pkg/scheduler/flavorassigner). The
extender knows the devices the allocator would take on each node, so it charges each node exactly and walks
the flavors (flavor_walk.py) judging each flavor by its best device-feasible node: a pod is sent where both
devices and quota exist.

Thousands of candidate nodes fall into a handful of charges (nodes differ only by the devices taken per class,
or for counter and capacity mappings by the devices themselves), and the nodes of one charge into a handful of
flavor sets. So the work is per bucket of nodes sharing a charge and the flavors holding them; per node it is a
lookup and an append. The steps:

1. `_nodes_by_charge`: each node's charge, nodes bucketed by it (a charge that cannot be made refuses its nodes).
2. `_charged_groups`: the charged resources by ClusterQueue resource group (an uncovered resource refuses).
3. `_walk_groups`: per group, the buckets split by the flavors holding their nodes, then the flavor walk.
4. `_decision`: one verdict per bucket against the chosen flavors, and the reservation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

from extender.decisions.devices.extended_resources import (
    NO_EXTENDED,
    ExtendedRequests,
    extended_charges,
)
from extender.decisions.devices.results import Allocation
from extender.decisions.devices.selection import DeviceMatcher
from extender.decisions.quota.attribution import foreign_claim
from extender.decisions.quota.charges import (
    UNMAPPED_IGNORE,
    Charge,
    class_count_charges,
    counts_devices_only,
    node_charges,
)
from extender.decisions.quota.context import QuotaContext
from extender.decisions.quota.fit import Fit, worst_fit
from extender.decisions.quota.flavor_walk import (
    FitMemo,
    FlavorAssignmentMode,
    FlavorSet,
    GroupChoice,
    ModeJudge,
    fits_in,
    walk_group,
)
from extender.decisions.quota.ledger import QuotaLedger
from extender.decisions.quota.preemption_oracle import HolderLookup, PreemptionOracle, Preemptor
from extender.decisions.quota.verdicts import (
    CATEGORY_FLAVOR,
    CATEGORY_QUEUE,
    CATEGORY_QUOTA,
    CATEGORY_STOPPED,
    CATEGORY_UNCOVERED,
    CATEGORY_UNMAPPED,
    NOT_GOVERNED,
    NodeQuota,
    QuotaDecision,
    QuotaRejection,
    fit_rejection,
    reject_pod,
)
from extender.decisions.quota.waiting_reasons import group_refusal
from extender.decisions.quota.workload_holds import own_flavors
from extender.state.bookings import NO_BOOKINGS, BookingView
from extender.state.core import Node, Pod, Toleration
from extender.state.kueue.cluster_queue import ClusterQueue
from extender.state.kueue.local_queue import pod_queue_name
from extender.state.kueue.pod_workload import pod_workload
from extender.state.kueue.quotas import ResourceGroup
from extender.state.reservations import QuotaKey
from extender.state.snapshot import ClusterSnapshot

ClassCounts = tuple[tuple[str, int], ...]  # devices taken per DeviceClass, sorted (Allocation.class_counts)


@dataclass(frozen=True, slots=True)
class GroupCharge:
    """What the rest of a pod's gang adds to the pod's charge on each node (decisions/gang/quota.py), so that
    Kueue's flavor walk and fit judge the whole group at once, as Kueue admits a pod set whole
    (pkg/scheduler/flavorassigner: the pod count times the per-pod request, in one flavor per resource group).

    `copies`: other members shaped like the pod (same claims and extended resources): each takes what the pod
    takes on the node, less `shared`, the part of the pod's charge that is the group's own claims (charged
    once for the group). Sized per node, so a charge that depends on the node (firstAvailable, counters,
    capacity) is the one of the flavor the node is in, never the flavor the pod alone would take.
    `extra`: quota resource -> the other counted members' charge (members shaped otherwise, the group claims
    the pod does not carry), the same on every node."""

    copies: int = 0
    shared: Mapping[str, Fraction] = field(default_factory=dict)
    extra: Mapping[str, Fraction] = field(default_factory=dict)

    def total(self, own: Mapping[str, Fraction]) -> dict[str, Fraction]:
        """The group's charge on a node where the pod itself takes `own`."""
        total = dict(own)
        if self.copies:
            for resource, amount in own.items():
                each = amount - self.shared.get(resource, Fraction(0))
                if each > 0:
                    total[resource] = amount + self.copies * each
        for resource, amount in self.extra.items():
            total[resource] = total.get(resource, Fraction(0)) + amount
        return total


def queue_problem(
    snapshot: ClusterSnapshot, pod: Pod, context: QuotaContext
) -> tuple[ClusterQueue | None, QuotaDecision | None]:
    """The pod's ClusterQueue, or a decision rejecting the pod on every node."""
    queue = pod_queue_name(pod.labels)
    local_queue = context.local_queues.get(f"{pod.namespace}/{queue}")
    if local_queue is None:
        return None, reject_pod(f"LocalQueue {pod.namespace}/{queue} does not exist", CATEGORY_QUEUE)
    if local_queue.stop_policy.value != "None":
        return None, reject_pod(
            f"LocalQueue {local_queue.key} is stopped ({local_queue.stop_policy.value})", CATEGORY_STOPPED
        )
    cluster_queue = context.cluster_queues.get(local_queue.cluster_queue)
    if cluster_queue is None:
        return None, reject_pod(
            f"ClusterQueue {local_queue.cluster_queue} of LocalQueue {local_queue.key} does not exist", CATEGORY_QUEUE
        )
    if cluster_queue.is_stopped:
        return None, reject_pod(
            f"ClusterQueue {cluster_queue.name} is stopped ({cluster_queue.stop_policy.value})", CATEGORY_STOPPED
        )
    problem = context.problems.get(cluster_queue.name)
    if problem:
        return None, reject_pod(problem, CATEGORY_QUEUE)
    namespace = snapshot.namespaces.get(pod.namespace)
    labels = namespace.labels if namespace is not None else {"kubernetes.io/metadata.name": pod.namespace}
    if not cluster_queue.selects_namespace(labels):
        return None, reject_pod(
            f"ClusterQueue {cluster_queue.name} does not admit workloads from namespace {pod.namespace}",
            CATEGORY_QUEUE,
        )
    return cluster_queue, None


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
    holders: HolderLookup | None = None,
    group: GroupCharge | None = None,
    bookings: BookingView = NO_BOOKINGS,
) -> QuotaDecision:
    """Quota verdicts for the device-feasible nodes (`allocations`), with flavors chosen Kueue's way.

    Per node: the charge of what the allocator would take there. Per resource group of the charged
    resources: Kueue's flavor walk over the flavors the pod may use (taints), each flavor judged by its best
    node. A node passes when, for every group, it belongs to the group's chosen flavor and its own charge
    fits there. `ledger_for` holds usage plus every other pod's reservation, so the answer is what this pod
    may still take.

    `same_counts`: every allocation takes the same devices per class (the remembered answers of the pod's
    shape, settled.SettledNodes), so a charge made of class counts alone is the same on every node and the
    nodes join its bucket with one list copy instead of a look at each. Every allocation is for a node of
    `snapshot.nodes` (decide_pod's device step refuses unknown nodes before any allocator runs), so no node is
    looked up here.

    `holders`: who holds each (ClusterQueue, flavor, resource), for the preemption oracle the flavor walk asks
    when a flavor does not fit as it stands; None when they are not known (a request within nominal quota then
    counts as one preemption could make room for).
    `group`: what the rest of the pod's gang needs besides it (GroupCharge), added to each node's charge, so that
    the flavor walk and the fit judge the whole group at once; the decision's `own_reservation` is then the
    pod's own part of its reservation, in the flavors the group's walk chose.
    `bookings`: the queues allocated claims were booked in (attribution.py claim_charge): a pod using a claim
    that counts against another ClusterQueue is refused on every node (`foreign_claim`).
    """
    if context is None or not context.enabled or not pod_queue_name(pod.labels):
        return NOT_GOVERNED
    cluster_queue, rejection = queue_problem(snapshot, pod, context)
    if rejection is not None:
        return rejection
    assert cluster_queue is not None and ledger_for is not None
    foreign = foreign_claim(snapshot, pod, context, cluster_queue.name, bookings)
    if foreign:
        return reject_pod(foreign, CATEGORY_QUEUE)
    extra, problem = extended_charges(extended, context.mappings)
    if problem:
        return reject_pod(problem, CATEGORY_UNMAPPED)
    charged = _nodes_by_charge(
        allocations,
        context,
        unmapped,
        extra,
        matcher,
        counts_only=not extended.resources,
        one_charge_for_all=same_counts and len(allocations) > 1,
        group=group,
    )
    groups = _charged_groups(cluster_queue, charged)
    make_oracle = None
    if holders is not None:
        found_holders, ledger = holders, ledger_for

        def make_oracle() -> PreemptionOracle:
            preemptor = _preemptor(snapshot, pod)
            return PreemptionOracle(context.tree, ledger, found_holders, preemptor, context.fair_sharing)

    walked = _walk_groups(
        groups,
        charged.nodes_of_charge,
        context,
        snapshot.nodes,
        pod.tolerations,
        ModeJudge(cluster_queue, ledger_for, make_oracle),
        _admitted_flavors(snapshot, pod, cluster_queue),
    )
    return _decision(cluster_queue, walked, charged, ledger_for)


def _preemptor(snapshot: ClusterSnapshot, pod: Pod) -> Preemptor:
    """The pod's priority as Kueue's preemption compares it: its Workload's (Kueue fills the Workload's
    spec.priority from a WorkloadPriorityClass or PriorityClass), else the pod's spec.priority (0 when absent,
    Kueue's default). Made only when the oracle runs: finding a Workload not admitted yet may read them all."""
    workload = pod_workload(pod, snapshot.workloads, snapshot.admitted_workloads, admitted=False)
    if workload is not None:
        return Preemptor(workload.priority, workload.created)
    return Preemptor(pod.priority or 0, pod.created)


def _admitted_flavors(snapshot: ClusterSnapshot, pod: Pod, cluster_queue: ClusterQueue) -> dict[str, str]:
    """Resource -> flavor that Kueue admitted the pod's own pod set to in this ClusterQueue (empty when none)."""
    return own_flavors(snapshot, pod, cluster_queue.name)


# --- 1. each node's charge ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _ChargedNodes:
    """Step 1's result: the nodes bucketed by the charge they would take, and the nodes no charge can be made
    for (refused, by the reason)."""

    nodes_of_charge: dict[Charge, list[str]] = field(default_factory=dict)
    per_node: dict[str, NodeQuota] = field(default_factory=dict)  # every node's NodeQuota, as steps 1, 2, 4 say
    refused_groups: list[tuple[NodeQuota, list[str]]] = field(default_factory=list)  # QuotaDecision's
    refused_by_error: dict[str, tuple[list[str], NodeQuota]] = field(default_factory=dict)
    # With a GroupCharge: each bucket's charge (the group's) -> the pod's own part of it. One own charge makes
    # one group charge (GroupCharge.total grows with each amount), so the bucket's charge names it.
    own_of: dict[Charge, Mapping[str, Fraction]] = field(default_factory=dict)

    def bucket(self, charge: Charge) -> list[str]:
        return self.nodes_of_charge.setdefault(charge, [])

    def refusal(self, error: str) -> tuple[list[str], NodeQuota]:
        """The refused group of nodes whose charge fails with `error` (one per error)."""
        found = self.refused_by_error.get(error)
        if found is None:
            refused = NodeQuota({}, (), "", QuotaRejection(error, True, CATEGORY_UNMAPPED))
            found = self.refused_by_error[error] = ([], refused)
            self.refused_groups.append((refused, found[0]))
        return found


def _nodes_by_charge(
    allocations: Mapping[str, Allocation],
    context: QuotaContext,
    unmapped: str,
    extra: Mapping[str, Fraction],
    matcher: DeviceMatcher | None,
    *,
    counts_only: bool,
    one_charge_for_all: bool,
    group: GroupCharge | None = None,
) -> _ChargedNodes:
    """Each node's charge, computed once per distinct cause and looked up per node. A charge is caused by the
    devices taken per class when every class is charged per device (counts_devices_only, and no
    extended-resource charge varies per node: `counts_only`), else by the devices taken."""
    charged = _ChargedNodes()
    per_node = charged.per_node
    # What a node joins, by the cause of its charge: its bucket, or the refused nodes with the refusal.
    joined_by_cause: dict[object, tuple[list[str], NodeQuota | None]] = {}
    bucket_of_counts: dict[ClassCounts, list[str]] = {}  # the allocator's class counts whose charge was made
    charged_per_device: dict[str, bool] = {}
    for node_name, allocation in allocations.items():
        counts = allocation.known_class_counts
        same_counts_nodes = bucket_of_counts.get(counts) if counts is not None else None
        if same_counts_nodes is not None:
            if one_charge_for_all:  # the first node's charge holds for all: the rest join its bucket at once
                same_counts_nodes.extend(list(allocations)[len(same_counts_nodes) :])
                break
            same_counts_nodes.append(node_name)  # the common case: one lookup, one append
            continue
        by_class = counts if counts is not None else allocation.class_counts()
        by_counts = counts_only
        for class_name, _ in by_class:
            per_device = charged_per_device.get(class_name)
            if per_device is None:
                per_device = charged_per_device[class_name] = counts_devices_only(context, class_name)
            if not per_device:
                by_counts = False
                break
        # Devices by identity: the snapshot holds them through the call, and a Device's value hash would hash
        # every attribute of it for each node.
        cause: object = (
            by_class
            if by_counts
            else tuple(id(chosen.device) for claim in allocation.claims for chosen in claim.devices)
        )
        joined = joined_by_cause.get(cause)
        if joined is None:
            joined = joined_by_cause[cause] = _join_new_charge(
                charged, allocation, by_class, by_counts, context, unmapped, extra, matcher, group
            )
        nodes, refused = joined
        nodes.append(node_name)
        if refused is not None:
            per_node[node_name] = refused
        elif by_counts and counts is not None:
            bucket_of_counts[counts] = nodes
    return charged


def _join_new_charge(
    charged: _ChargedNodes,
    allocation: Allocation,
    by_class: ClassCounts,
    by_counts: bool,
    context: QuotaContext,
    unmapped: str,
    extra: Mapping[str, Fraction],
    matcher: DeviceMatcher | None,
    group: GroupCharge | None,
) -> tuple[list[str], NodeQuota | None]:
    """The charge of a node whose cause was not seen yet: its bucket, or the refused group its error names."""
    if by_counts:
        computed, error = class_count_charges(by_class, context, unmapped, extra)
    else:
        computed, error = node_charges(allocation, context, unmapped, extra=extra, matcher=matcher)
    if error:
        return charged.refusal(error)
    if group is None:
        return charged.bucket(tuple(sorted(computed.items()))), None
    charge = tuple(sorted(group.total(computed).items()))
    charged.own_of[charge] = computed
    return charged.bucket(charge), None


# --- 2. the charged resources by resource group -------------------------------------------------------------


class _ChargedGroup(NamedTuple):
    group: ResourceGroup
    resources: list[str]  # the group's resources some charge names, in the order first named


def _charged_groups(cluster_queue: ClusterQueue, charged: _ChargedNodes) -> list[_ChargedGroup]:
    """The charged resources by the ClusterQueue's resource group, in the order first charged. A resource no
    group covers refuses every node charged it (on a node whose charge names several such resources, the last
    one found says it); those buckets leave `charged.nodes_of_charge`."""
    # By covered resources: a resource belongs to one group of a ClusterQueue (validateResourceGroups).
    groups: dict[tuple[str, ...], _ChargedGroup] = {}
    uncovered: dict[Charge, NodeQuota] = {}
    nodes_of_charge = charged.nodes_of_charge
    for charge in nodes_of_charge:
        for resource, _amount in charge:
            group = cluster_queue.resource_group_for(resource)
            if group is None:
                summary = f"ClusterQueue {cluster_queue.name} has no quota for {resource}"
                refusal = NodeQuota({}, (), "", QuotaRejection(summary, True, CATEGORY_UNCOVERED))
                for other in nodes_of_charge:
                    if any(name == resource for name, _ in other):
                        uncovered[other] = refusal
                continue
            entry = groups.setdefault(group.covered_resources, _ChargedGroup(group, []))
            if resource not in entry.resources:
                entry.resources.append(resource)
    for charge, refusal in uncovered.items():
        uncovered_nodes = nodes_of_charge.pop(charge)
        charged.per_node.update(dict.fromkeys(uncovered_nodes, refusal))
        charged.refused_groups.append((refusal, uncovered_nodes))
    return list(groups.values())


# --- 3. the flavor walk per group ---------------------------------------------------------------------------


class _Bucket(NamedTuple):
    """Nodes sharing a charge and, per group walked, the flavors holding them: they share a verdict."""

    charge: Charge
    flavor_sets: tuple[FlavorSet, ...]  # per group walked so far; () for a group the charge does not touch
    nodes: list[str]


class _GroupWalk(NamedTuple):
    resources: tuple[str, ...]
    choice: GroupChoice
    refusal: QuotaRejection | None  # every node's, when the chosen flavor does not fit as it stands


@dataclass(frozen=True, slots=True)
class _Walked:
    buckets: list[_Bucket]
    walks: list[_GroupWalk]  # one per group, in the order of the buckets' flavor sets
    fit_memo: FitMemo


def _walk_groups(
    groups: list[_ChargedGroup],
    nodes_of_charge: Mapping[Charge, list[str]],
    context: QuotaContext,
    nodes: Mapping[str, Node],
    tolerations: tuple[Toleration, ...],
    judge: ModeJudge,
    admitted_flavors: Mapping[str, str],
) -> _Walked:
    """Each group walks its flavors independently. Before its walk, the buckets are split by the flavors
    holding their nodes in that group, so the buckets end as one per (charge, flavors per group)."""
    fit_memo: FitMemo = {}
    walks: list[_GroupWalk] = []
    buckets = [_Bucket(charge, (), bucket_nodes) for charge, bucket_nodes in nodes_of_charge.items()]
    for group, resources in groups:
        partition = context.flavor_partition(judge.cluster_queue, group, nodes, tolerations)
        buckets, candidates = _split_by_flavors(buckets, frozenset(resources), partition)
        admitted = next((admitted_flavors[r] for r in resources if r in admitted_flavors), "")
        choice = walk_group(group, context, tolerations, candidates, judge, admitted, fit_memo)
        refusal = group_refusal(judge.cluster_queue.name, choice, ", ".join(resources))
        walks.append(_GroupWalk(tuple(resources), choice, refusal))
    return _Walked(buckets, walks, fit_memo)


def _split_by_flavors(
    buckets: list[_Bucket], resources: frozenset[str], partition: Mapping[FlavorSet, frozenset[str]]
) -> tuple[list[_Bucket], list[tuple[FlavorSet, Charge]]]:
    """The buckets split by the flavor sets of `partition` (every node of the cluster by the flavors of one
    group holding it), and the walk's candidates: each flavor set with the group's part of a charge its nodes
    take."""
    candidates: list[tuple[FlavorSet, Charge]] = []
    # Keyed by the charges' identity: each is one object held by its buckets for the call, and hashing one by
    # value hashes every Fraction in it (Fraction.__hash__ computes a modular inverse each time).
    seen: set[tuple[FlavorSet, int]] = set()
    group_charges: dict[int, Charge] = {}  # id(charge) -> its part in the group's resources
    split: list[_Bucket] = []
    # Every bucket holds only nodes of the partition's Node mapping (allocations are on known nodes only): with
    # one flavor set, it holds the whole bucket, which then stays one list (the commonest case, one flavor per
    # group, costs no set intersection per node).
    only_flavor_set = next(iter(partition)) if len(partition) == 1 else None
    for charge, flavor_sets, bucket_nodes in buckets:
        group_charge = group_charges.get(id(charge))
        if group_charge is None:
            group_charge = group_charges[id(charge)] = tuple((r, a) for r, a in charge if r in resources)
        if not group_charge:
            split.append(_Bucket(charge, (*flavor_sets, ()), bucket_nodes))
            continue
        nodes_by_flavor_set: Iterable[tuple[FlavorSet, list[str]]]
        if only_flavor_set is not None:
            nodes_by_flavor_set = ((only_flavor_set, bucket_nodes),)
        else:
            remaining = set(bucket_nodes)
            nodes_by_flavor_set = ((flavors, list(remaining & members)) for flavors, members in partition.items())
        for flavor_set, nodes_held in nodes_by_flavor_set:
            if not nodes_held:
                continue
            split.append(_Bucket(charge, (*flavor_sets, flavor_set), nodes_held))
            if (flavor_set, id(group_charge)) not in seen:
                seen.add((flavor_set, id(group_charge)))
                candidates.append((flavor_set, group_charge))
    return split, candidates


# --- 4. one verdict per bucket ------------------------------------------------------------------------------


def _decision(
    cluster_queue: ClusterQueue, walked: _Walked, charged: _ChargedNodes, ledger: QuotaLedger
) -> QuotaDecision:
    """Each bucket's verdict against the chosen flavors (every node of it shares it), and what to reserve: the
    largest charge of any node that passes."""
    per_node, refused_groups = charged.per_node, charged.refused_groups
    admissible: list[tuple[NodeQuota, Charge]] = []
    passed_groups: list[tuple[NodeQuota, list[str]]] = []
    for charge, flavor_sets, bucket_nodes in walked.buckets:
        quota = _bucket_verdict(cluster_queue, charge, flavor_sets, walked.walks, walked.fit_memo, ledger)
        per_node.update(dict.fromkeys(bucket_nodes, quota))
        if quota.rejection is None:
            admissible.append((quota, charge))
            passed_groups.append((quota, bucket_nodes))
        else:
            refused_groups.append((quota, bucket_nodes))
    # A flavor the walk kept without anyone to preempt there is no choice to show: the pod fits in none.
    chosen = ",".join(
        dict.fromkeys(
            walk.choice.flavor
            for walk in walked.walks
            if walk.choice.flavor and walk.choice.mode.preemption > FlavorAssignmentMode.NO_CANDIDATES
        )
    )
    reservation: dict[QuotaKey, Fraction] = {}
    own: dict[QuotaKey, Fraction] = {}
    own_of = charged.own_of
    for quota, bucket_charge in admissible:
        for quota_key, amount in quota.charges.items():
            reservation[quota_key] = max(reservation.get(quota_key, Fraction(0)), amount)
        if own_of:
            pod_part = own_of.get(bucket_charge, {})
            for quota_key in quota.charges:
                amount = pod_part.get(quota_key[2], Fraction(0))
                own[quota_key] = max(own.get(quota_key, Fraction(0)), amount)
    return QuotaDecision(
        governed=True,
        cluster_queue=cluster_queue.name,
        per_node=per_node,
        chosen_flavor=chosen,
        reservation=reservation,
        refused_groups=tuple(refused_groups),
        passed_groups=tuple(passed_groups),
        own_reservation=own if own_of else None,
    )


def _bucket_verdict(
    cluster_queue: ClusterQueue,
    charge: Charge,
    flavor_sets: tuple[FlavorSet, ...],
    walks: list[_GroupWalk],
    fit_memo: FitMemo,
    ledger: QuotaLedger,
) -> NodeQuota:
    """The verdict of nodes taking `charge`, held by `flavor_sets` (one per group): for every group they must
    be in its chosen flavor, that flavor must fit as it stands, and their part of the charge must fit there.
    When several groups refuse, one that waiting cannot help decides (Kueue: NoFit for the workload when any
    group can never fit, whatever the others could do with preemption); else the first in order."""
    charges: dict[QuotaKey, Fraction] = {}
    fits: list[Fit] = []
    primary = ""
    refusal: NodeQuota | None = None
    for (resources, choice, group_refused), flavor_set in zip(walks, flavor_sets, strict=True):
        group_charge = tuple((r, a) for r, a in charge if r in resources)
        if not group_charge:
            continue
        names = ", ".join(resources)
        if not flavor_set or group_refused is not None or choice.flavor not in flavor_set:
            refused = _not_in_chosen_flavor(
                cluster_queue, group_charge, names, flavor_set, choice, group_refused, fit_memo, ledger
            )
            refusal = _more_severe(refusal, refused)
            continue
        primary = primary or choice.flavor
        group_fits = fits_in(cluster_queue, choice.flavor, group_charge, ledger, fit_memo)
        for (resource, amount), _fit in zip(group_charge, group_fits, strict=True):
            charges[(cluster_queue.name, choice.flavor, resource)] = amount
        fits.extend(group_fits)
        worst = worst_fit(group_fits)
        if worst is not None and not worst.admissible:
            refusal = _more_severe(refusal, NodeQuota(charges, tuple(group_fits), choice.flavor, fit_rejection(worst)))
    if refusal is not None:
        assert refusal.rejection is not None
        return NodeQuota(charges, tuple(fits) + refusal.fits, refusal.flavor or primary, refusal.rejection)
    return NodeQuota(charges, tuple(fits), primary, None)


def _more_severe(current: NodeQuota | None, other: NodeQuota) -> NodeQuota:
    """The first refusal, unless a later one is unresolvable and it is not."""
    if current is None:
        return other
    assert current.rejection is not None and other.rejection is not None
    if other.rejection.unresolvable and not current.rejection.unresolvable:
        return other
    return current


def _not_in_chosen_flavor(
    cluster_queue: ClusterQueue,
    group_charge: Charge,
    names: str,
    flavor_set: FlavorSet,
    choice: GroupChoice,
    group_refused: QuotaRejection | None,
    fit_memo: FitMemo,
    ledger: QuotaLedger,
) -> NodeQuota:
    """Why nodes are refused by one group: in no flavor the pod may use, the group's own refusal when its walk
    found no flavor that fits as it stands (waiting_reasons.py), or in another flavor than the chosen one. Its
    charges are empty, its fits the node's own verdicts in its first flavor, its flavor that one ("" when the
    node is in none)."""
    if not flavor_set:
        skipped = f" ({'; '.join(choice.skipped)})" if choice.skipped else ""
        summary = (
            f"node is in no flavor of ClusterQueue {cluster_queue.name} that this pod may use for {names}{skipped}"
        )
        return NodeQuota({}, (), "", QuotaRejection(summary, True, CATEGORY_FLAVOR))
    if group_refused is not None:
        own = fits_in(cluster_queue, flavor_set[0], group_charge, ledger, fit_memo)
        worst = worst_fit(own) if not group_refused.unresolvable else None
        if worst is not None and fit_rejection(worst).unresolvable:  # this node's own charge can never fit
            return NodeQuota({}, own, flavor_set[0], fit_rejection(worst))
        return NodeQuota({}, own, flavor_set[0], group_refused)
    if not choice.flavor:  # nothing judged (every flavor skipped or unknown): the node's own verdict says why
        own = fits_in(cluster_queue, flavor_set[0], group_charge, ledger, fit_memo)
        worst = worst_fit(own)
        assert worst is not None
        reason = fit_rejection(worst)
        if worst.admissible:
            reason = QuotaRejection(
                f"ClusterQueue {cluster_queue.name} has no flavor that can take {names} for this pod now",
                False,
                CATEGORY_QUOTA,
            )
        return NodeQuota({}, own, flavor_set[0], reason)
    if choice.admitted:
        summary = f"Kueue admitted this pod's workload to flavor {choice.flavor} for {names}"
        return NodeQuota({}, (), flavor_set[0], QuotaRejection(summary, True, CATEGORY_FLAVOR))
    summary = (
        f"ClusterQueue {cluster_queue.name} assigned flavor {choice.flavor} to this pod; "
        f"node is in flavor {', '.join(flavor_set)}"
    )
    return NodeQuota({}, (), flavor_set[0], QuotaRejection(summary, False, CATEGORY_FLAVOR))
