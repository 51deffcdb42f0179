"""Device feasibility of one pod across candidate nodes: the allocator asked once per node.

Work per call is proportional to the candidate nodes: each node's device list comes ready-made from the
snapshot, selector verdicts come from the shared matcher's memo, and pods without claims never get here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, KeysView, Sequence
from itertools import repeat
from typing import NamedTuple

from extender.decisions.devices.allocator import DEFAULT_SEARCH_BUDGET
from extender.decisions.devices.features import DEFAULT_FEATURES, Features
from extender.decisions.devices.pod_allocator import PodAllocator
from extender.decisions.devices.pod_claims import PodClaims
from extender.decisions.devices.results import Allocation, AllocationOutcome, NotAllocatable, new_allocation
from extender.decisions.devices.selection import DeviceMatcher
from extender.decisions.devices.settled import SettledNodes
from extender.memo import BoundedMemo
from extender.state.snapshot import ClusterSnapshot

CATEGORY_UNKNOWN_NODE = "unknown-node"
CATEGORY_DEADLINE = "deadline"
# How many nodes are decided between two looks at the clock.
DEADLINE_CHECK_EVERY = 32
CATEGORY_CLAIM_MISSING = "claim-missing"


def unknown_node(node_name: str) -> NotAllocatable:
    return NotAllocatable(
        node=node_name,
        category=CATEGORY_UNKNOWN_NODE,
        summary="node is not known to the extender",
        detail=f"node {node_name} is not in the extender's view of the cluster (not created yet, or deleted)",
        unresolvable=False,
    )


class DeviceOutcomes(NamedTuple):
    """One pod's device answers over candidate nodes: the nodes that can take it and the ones that cannot,
    the latter node by node or in groups (nodes full the same way for the commonest pod: one refusal with no
    node, and its nodes; a cluster half full refuses hundreds of nodes per pod, each a refusal built and
    thrown away)."""

    allocations: dict[str, Allocation]
    refusals: dict[str, NotAllocatable]
    refused_groups: tuple[tuple[NotAllocatable, list[str]], ...] = ()
    # The remembered answers of the pod's shape when every allocation in `allocations` is theirs (the commonest
    # pod): score_nodes reads its score groups from there.
    settled: SettledNodes | None = None

    def by_node(self, node_names: Iterable[str]) -> dict[str, AllocationOutcome]:
        """Each node's outcome in one mapping, in the order given (for callers that read nodes one by one)."""
        allocations, refusals, groups, _settled = self
        grouped = {name: template for template, names in groups for name in names}
        return {
            name: allocations.get(name) or refusals.get(name) or grouped[name]._replace(node=name)
            for name in node_names
        }


def empty_allocations(names: Sequence[str], interned: BoundedMemo[str, Allocation]) -> dict[str, Allocation]:
    """Each node's allocation for a pod that takes no device, by node name: the answer allocator.py allocate
    gives a node for no pending claim and no allocated one. It depends on the node's name alone, so each is made
    once and kept (`interned`, the caller's DecisionCaches.empty_allocations); a call copies them in C, where
    making a thousand tuples cost a claim-less pod's call at 1000 nodes about a third of its CPU."""
    table = interned.table()  # a clear drops the table from the memo: the one read here keeps its entries
    if not all(map(table.__contains__, names)):
        for name in names:
            if name not in table:
                interned.put(name, new_allocation((name, (), ())))
        table = interned.table()
        if not all(map(table.__contains__, names)):  # the memo filled up and cleared on the way: make them here
            return dict(zip(names, map(new_allocation, zip(names, repeat(()), repeat(()))), strict=True))
    return dict(zip(names, map(table.__getitem__, names), strict=True))


def device_outcomes(
    snapshot: ClusterSnapshot,
    pod_claims: PodClaims,
    node_names: Sequence[str],
    matcher: DeviceMatcher,
    *,
    budget: int = DEFAULT_SEARCH_BUDGET,
    deadline: float | None = None,
    features: Features = DEFAULT_FEATURES,
    asked: KeysView[str] | None = None,
) -> DeviceOutcomes:
    """`deadline` (a time.perf_counter() instant): nodes not reached by then fail with a resolvable reason, so
    the answer still arrives before kube-scheduler's httpTimeout and those nodes are tried again next cycle.
    `features`: the DRA feature gates the allocator honours (decisions/devices/features.py). `asked`: `node_names` as
    a dict's keys, when the caller has them. Kept apart as they are found, so that the caller reads each kind
    without a pass over every node."""
    if pod_claims.problems:
        summary = "; ".join(pod_claims.problems)
        refused = {name: NotAllocatable(name, CATEGORY_CLAIM_MISSING, summary, summary, True) for name in node_names}
        return DeviceOutcomes({}, refused)
    nodes = snapshot.nodes
    if not pod_claims.pending and not pod_claims.allocated:
        # Nothing to allocate (a pod of a LocalQueue without claims): every known node holds it as it is, the
        # answer allocator.py allocate gives each node for no pending claim and no allocated one, without a
        # question built per node (kube-scheduler's own DynamicResources plugin skips such a pod in PreFilter).
        # Its class counts are known (none), so quota charges the first node once and every other joins its
        # bucket (decisions/quota/decision.py _nodes_by_charge) instead of counting each node's devices.
        every_known = all(map(nodes.__contains__, node_names))  # the usual case
        known = node_names if every_known else [name for name in node_names if name in nodes]
        allocations = empty_allocations(known, matcher.caches.empty_allocations)
        unknown = {} if every_known else {name: unknown_node(name) for name in node_names if name not in allocations}
        return DeviceOutcomes(allocations, unknown)
    allocated = snapshot.allocated
    classes = snapshot.device_classes
    allocator = PodAllocator(
        pod_claims.pending, pod_claims.allocated, classes, matcher, snapshot, budget=budget, features=features
    )
    node_devices = snapshot.node_devices
    decide = allocator.decide
    allocations, refused_groups, names = allocator.settle_remembered(node_names, asked)
    refusals: dict[str, NotAllocatable] = {}
    for start in range(0, len(names), DEADLINE_CHECK_EVERY):
        if deadline is not None and time.perf_counter() > deadline:
            late = NotAllocatable(
                "", CATEGORY_DEADLINE, "the extender ran out of time before evaluating this node", "", False
            )
            for remaining in names[start:]:
                if remaining not in allocations:
                    refusals.setdefault(remaining, late._replace(node=remaining, detail=late.summary))
            break
        for name in names[start : start + DEADLINE_CHECK_EVERY]:
            node = nodes.get(name)
            if node is None:
                refusals[name] = unknown_node(name)
                continue
            outcome = decide(node, node_devices(name), allocated, classes)
            if type(outcome) is Allocation:
                allocations[name] = outcome
            else:
                refusals[name] = outcome  # type: ignore[assignment]  # the other kind of outcome
    settled = allocator.remember(names)
    # The allocations of the nodes settle_remembered answered are the remembered ones; only the nodes decided
    # here may hold others (a full search): then the answers are not all the memo's.
    if settled is not None and any(name not in settled.allocations for name in names if name in allocations):
        settled = None
    return DeviceOutcomes(allocations, refusals, tuple(refused_groups), settled)
