"""The decision for one pod over candidate nodes: devices, then quota. Pure: no I/O, no Flask.

This is the API the service calls for filter and explain (prioritize ranks a decision with ranking.py). It
needs a cluster snapshot, the caches the caller owns (decisions/caches.py), the quota context and a ledger that
already includes every other pod's reservation; it returns per-node verdicts with everything a person needs to
understand them, plus the reservation to hold if the pod passes. Devices are judged per node as
kube-scheduler's DynamicResources plugin does in Filter (pkg/scheduler/framework/plugins/dynamicresources), and
Kueue's quota (pkg/scheduler/flavorassigner) only on the nodes the devices allow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from extender.decisions.devices.allocator import DEFAULT_SEARCH_BUDGET
from extender.decisions.devices.extended_resources import ExtendedRequests, is_dra_backed, resolve_extended
from extender.decisions.devices.feasibility import DeviceOutcomes, device_outcomes, unknown_node
from extender.decisions.devices.features import DEFAULT_FEATURES, Features
from extender.decisions.devices.pod_claims import PodClaims, resolve_pod_claims
from extender.decisions.devices.results import NotAllocatable
from extender.decisions.devices.selection import DeviceMatcher
from extender.decisions.gang.features import WORKLOAD_FEATURES_OFF, WorkloadFeatures
from extender.decisions.gang.members import member_estimator, member_shape_in
from extender.decisions.gang.quota import GangNeed, GangQuota, decide_gang_quota
from extender.decisions.pod_decision import (
    NO_FAILURES,
    NodeFailures,
    NodeVerdict,
    NodeVerdicts,
    PodDecision,
    failed_verdict,
    refused_verdict,
)
from extender.decisions.quota.charges import UNMAPPED_IGNORE
from extender.decisions.quota.context import QuotaContext
from extender.decisions.quota.decision import GroupCharge, decide_quota
from extender.decisions.quota.ledger import QuotaLedger
from extender.decisions.quota.preemption_oracle import HolderLookup
from extender.decisions.quota.verdicts import QuotaDecision
from extender.decisions.scoring import STRATEGIES, STRATEGY_ANNOTATION, STRATEGY_MOST, ScoringWeights
from extender.state.bookings import NO_BOOKINGS, BookingView
from extender.state.core import Pod
from extender.state.kueue.local_queue import pod_queue_name
from extender.state.snapshot import ClusterSnapshot


@dataclass(frozen=True, slots=True)
class DecisionOptions:
    scoring_strategy: str = STRATEGY_MOST
    weights: ScoringWeights = ScoringWeights()
    unmapped_classes: str = UNMAPPED_IGNORE
    search_budget: int = DEFAULT_SEARCH_BUDGET
    allow_strategy_annotation: bool = True
    # The DRA feature gates (config `features:`), one value for the service's life; see decisions/devices/features.py.
    features: Features = DEFAULT_FEATURES
    # The workload-aware scheduling gates (config `features:` too); see decisions/gang/features.py.
    workload: WorkloadFeatures = WORKLOAD_FEATURES_OFF


def needs_our_decision(pod: Pod, snapshot: ClusterSnapshot) -> bool:
    """Pods without claims, without a queue and without a DRA-backed extended resource pass every known node:
    nothing to reserve or record. An extended resource a DeviceClass backs is a claim in all but name."""
    return bool(pod.claims) or bool(pod_queue_name(pod.labels)) or is_dra_backed(snapshot.device_classes, pod)


def pod_strategy(pod: Pod, options: DecisionOptions) -> str:
    requested = pod.annotations.get(STRATEGY_ANNOTATION, "")
    if options.allow_strategy_annotation and requested in STRATEGIES:
        return requested
    return options.scoring_strategy


def decide_pod(
    snapshot: ClusterSnapshot,
    pod: Pod,
    node_names: Iterable[str],
    *,
    matcher: DeviceMatcher,
    quota_context: QuotaContext | None,
    ledger: QuotaLedger | None,
    options: DecisionOptions = DecisionOptions(),
    deadline: float | None = None,
    holders: HolderLookup | None = None,
    gang: GangNeed | None = None,
    bookings: BookingView = NO_BOOKINGS,
) -> PodDecision:
    """The pod's verdict on each of `node_names`: the devices it needs (allocator per node), then quota on the
    nodes the devices allow. `deadline` (a time.perf_counter() instant): nodes the allocator has not reached by
    then fail with a resolvable reason, so the answer arrives before kube-scheduler's httpTimeout."""
    order = dict.fromkeys(node_names)  # each node once, in the order asked
    asked = node_names if isinstance(node_names, list) else None
    strategy = pod_strategy(pod, options)
    extended = resolve_extended(snapshot.device_classes, pod)
    if not pod.claims and not pod_queue_name(pod.labels) and not extended:
        return _nothing_to_decide(snapshot, pod, order, asked, strategy)
    pod_claims = resolve_pod_claims(snapshot, pod)
    if extended.problems:
        pod_claims = PodClaims(pod_claims.pending, pod_claims.allocated, pod_claims.problems + extended.problems)
    names = list(order)
    # No device to take: every node's allocation is the same empty one (device_outcomes), one charge for all.
    takes_no_devices = not (pod_claims.pending or pod_claims.allocated or pod_claims.problems or extended.resources)
    if not extended.resources:
        devices = device_outcomes(
            snapshot,
            pod_claims,
            names,
            matcher,
            budget=options.search_budget,
            deadline=deadline,
            features=options.features,
            asked=order.keys(),
        )
    else:
        devices = _device_outcomes_per_variant(snapshot, pod_claims, extended, names, matcher, options, deadline)

    def quota_for(rest_of_gang: GroupCharge | None = None) -> QuotaDecision:
        """Quota on the device-feasible nodes; with `rest_of_gang`, for the pod and the rest of its gang at once."""
        return decide_quota(
            snapshot,
            pod,
            devices.allocations,
            quota_context,
            ledger,
            unmapped=options.unmapped_classes,
            extended=extended,
            matcher=matcher,
            same_counts=devices.settled is not None or takes_no_devices,
            holders=holders,
            group=rest_of_gang,
            bookings=bookings,
        )

    quota = quota_for()
    gang_quota = None
    if gang is not None and quota_context is not None:
        gang_quota = _decide_for_group(snapshot, pod, names, quota, gang, quota_for, quota_context, matcher, options)
    if gang_quota is not None:
        quota = gang_quota.quota
    verdicts = NodeVerdicts(order, devices.allocations, quota.per_node, _failures(devices, quota), asked)
    held = gang_quota.own if gang_quota is not None else quota.reservation
    return PodDecision(
        pod.key,
        pod.uid,
        snapshot.version,
        verdicts,
        quota=quota,
        strategy=strategy,
        reservation=held if len(verdicts.failures) < len(order) else {},
        claim_labels=tuple(claim.label for claim in pod_claims.pending),
        settled=devices.settled,
        takes_no_devices=takes_no_devices,
        gang=gang_quota,
    )


def _decide_for_group(
    snapshot: ClusterSnapshot,
    pod: Pod,
    names: list[str],
    quota: QuotaDecision,
    gang: GangNeed,
    quota_for: Callable[[GroupCharge | None], QuotaDecision],
    context: QuotaContext,
    matcher: DeviceMatcher,
    options: DecisionOptions,
) -> GangQuota:
    """The pod's quota decided for its gang (decisions/gang/quota.py), the other members charged by their own
    shapes (decisions/gang/members.py) on the nodes asked about."""
    estimate = member_estimator(
        snapshot,
        names,
        context,
        matcher,
        gang.group_claims,
        unmapped=options.unmapped_classes,
        budget=options.search_budget,
        features=options.features,
    )
    group_entries = {ref.name for ref in pod.claims if ref in gang.group_claims}
    return decide_gang_quota(
        quota,
        gang,
        quota_for,
        own_shape=member_shape_in(snapshot, pod, gang.group_claims),
        shape=lambda member: member_shape_in(snapshot, member, gang.group_claims),
        estimate=estimate,
        carries_group_claims=bool(group_entries) and bool(gang.claims_demand),
        pod_uid=pod.uid,
    )


def _nothing_to_decide(
    snapshot: ClusterSnapshot, pod: Pod, order: dict[str, None], asked: list[str] | None, strategy: str
) -> PodDecision:
    """A pod with no claim, no queue and no extended resource a DeviceClass backs: every known node passes.
    Unknown nodes are still refused, never an error."""
    nodes = snapshot.nodes
    unknown: dict[str, NodeVerdict] = {}
    if not all(map(nodes.__contains__, order)):  # the snapshot's maps are persistent, not dicts
        unknown = {name: failed_verdict(unknown_node(name)) for name in order if name not in nodes}
    verdicts = NodeVerdicts(order, {}, {}, NodeFailures(unknown) if unknown else NO_FAILURES, asked)
    return PodDecision(pod.key, pod.uid, snapshot.version, verdicts, fast_path=True, strategy=strategy)


def _device_outcomes_per_variant(
    snapshot: ClusterSnapshot,
    pod_claims: PodClaims,
    extended: ExtendedRequests,
    names: list[str],
    matcher: DeviceMatcher,
    options: DecisionOptions,
    deadline: float | None,
) -> DeviceOutcomes:
    """Device outcomes for a pod asking for extended resources a DeviceClass backs. The scheduler's
    <extended-resources> claim differs per node: it asks only for what the node does not advertise as
    allocatable (kube-scheduler's DynamicResources plugin, extended resources backed by DRA). Nodes fall into
    a few variants; each is one allocator run over its nodes."""
    nodes = snapshot.nodes
    variants: dict[tuple[str, ...], list[str]] = {}
    for name in names:
        node = nodes.get(name)
        served = extended.served_by_dra(node) if node is not None else extended.resources
        variants.setdefault(tuple(item.resource for item in served), []).append(name)
    outcomes = DeviceOutcomes({}, {})
    refused_groups: list[tuple[NotAllocatable, list[str]]] = []
    for served_names, variant_nodes in variants.items():
        claim = extended.claim_for(tuple(i for i in extended.resources if i.resource in served_names))
        claims_here = (
            pod_claims
            if claim is None
            else PodClaims((*pod_claims.pending, claim), pod_claims.allocated, pod_claims.problems)
        )
        found = device_outcomes(
            snapshot,
            claims_here,
            variant_nodes,
            matcher,
            budget=options.search_budget,
            deadline=deadline,
            features=options.features,
        )
        outcomes.allocations.update(found.allocations)
        outcomes.refusals.update(found.refusals)
        refused_groups.extend(found.refused_groups)
    return outcomes._replace(refused_groups=tuple(refused_groups))


def _failures(devices: DeviceOutcomes, quota: QuotaDecision) -> NodeFailures:
    """The failed nodes: refused by the devices (node by node, or nodes full alike a group at a time), or by
    quota (every device-feasible node, or a bucket's nodes). The nodes that pass need nothing here:
    NodeVerdicts builds their verdicts when read."""
    built = {name: failed_verdict(refusal) for name, refusal in devices.refusals.items()}
    groups: list[tuple[NodeVerdict, Sequence[str]]] = [
        (failed_verdict(template), names) for template, names in devices.refused_groups
    ]
    allocations = devices.allocations
    if quota.pod_rejection is not None:
        if allocations:
            groups.append((refused_verdict("", quota.pod_rejection, None, None), list(allocations)))
    else:
        for node_quota, refused_names in quota.refused_groups:
            assert node_quota.rejection is not None
            groups.append((refused_verdict("", node_quota.rejection, None, None), refused_names))
    return NodeFailures(built, groups, allocations, quota.per_node)
