"""Could preemption make room for this pod in one flavor, and would it still borrow: Kueue's PreemptionOracle.

Kueue v0.19.2's flavor assigner (pkg/scheduler/flavorassigner fitsResourceQuota) asks
pkg/scheduler/preemption/preemption_oracle.go SimulatePreemption when a request does not fit as it stands but is
within nominal quota, may reclaim in the cohort hierarchy, or may preempt while borrowing. The oracle looks for
workloads to preempt under the ClusterQueue's `spec.preemption` and answers:

- NoCandidates: nothing may be preempted (the walk treats the flavor like no fit and tries the next one);
- Preempt: a target is in the pod's own ClusterQueue; Reclaim: every target is elsewhere in the cohort;

with the borrowing level the pod would have once they are gone (classical.FindHeightOfLowestSubtreeThatFits).

This module follows pkg/scheduler/preemption/classical (candidate_generator.go, hierarchical_preemption.go: same
queue, hierarchy and priority candidates, the variants, the borrow/no-borrow attempts, the candidate validity
walk) and preemption.go classicalPreemptions / fillBackWorkloads, for the one flavor-resource asked about.
Where it simplifies (docs/preemption-oracle.md):
- A holder is the unit Kueue would evict: an admitted Workload (its pods' usage and its remaining hold
  together), or a pod without one. Its queue-order timestamp is its creation time; nothing here is evicted yet,
  so Kueue's "evicted first" ordering never applies.
- With fair sharing, candidates are Kueue's findCandidates (own queue by withinClusterQueue, borrowing queues of
  the cohort by reclaimWithinCohort), taken in the classical order until the pod fits; the dominant resource
  share strategies are not simulated, so the answer may say Reclaim where fair sharing would refuse.
The extender evicts nothing: the answer only decides the flavor walk and the reason the pod waits with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from fractions import Fraction
from typing import NamedTuple

from extender.decisions.quota.ledger import QuotaLedger
from extender.decisions.quota.tree import FlavorResource, QuotaTree
from extender.state.kueue.cluster_queue import ClusterQueue
from extender.state.kueue.preemption import PreemptionPolicy

_ZERO = Fraction(0)


class PreemptionPossibility(IntEnum):
    """preemptioncommon.PreemptionPossibility."""

    NO_CANDIDATES = 1
    PREEMPT = 2
    RECLAIM = 3


class Holder(NamedTuple):
    """What one evictable unit holds of one (ClusterQueue, flavor, resource)."""

    unit: str  # "Workload ns/name" or "Pod ns/name", for people and as the unit's identity
    cluster_queue: str
    priority: int
    created: str  # RFC 3339 creationTimestamp; "" when unknown
    amount: Fraction  # > 0: a lookup leaves out whoever holds nothing there


# (ClusterQueue, flavor, resource) -> its holders; the service's quota view answers it per watch-kept index.
HolderLookup = Callable[[str, str, str], Sequence[Holder]]


class Preemptor(NamedTuple):
    priority: int
    created: str = ""


class OracleAnswer(NamedTuple):
    possibility: PreemptionPossibility
    borrow: int  # borrowing level once the targets are gone (0: within nominal)
    targets: tuple[Holder, ...]  # whom Kueue would preempt (empty for NoCandidates)


class _Variant(IntEnum):
    """classical.preemptionVariant."""

    WITHIN_CQ = 1
    HIERARCHICAL_RECLAIM = 2
    RECLAIM_WITHOUT_BORROWING = 3
    RECLAIM_WHILE_BORROWING = 4


class _Candidate(NamedTuple):
    holder: Holder
    lca: int | None  # the cohort (tree index) the candidate was found under; None for the pod's own queue
    variant: _Variant


def satisfies_policy(preemptor: Preemptor, candidate: Holder, policy: PreemptionPolicy) -> bool:
    """preemptioncommon.SatisfiesPreemptionPolicy (without the priority boost and timestamp buffer gates)."""
    if policy is PreemptionPolicy.ANY:
        return True
    lower = preemptor.priority > candidate.priority
    if policy is PreemptionPolicy.LOWER_PRIORITY:
        return lower
    if policy is PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
        newer_equal = (
            preemptor.priority == candidate.priority
            and bool(preemptor.created and candidate.created)
            and preemptor.created < candidate.created
        )
        return lower or newer_equal
    return False


def node_height(tree: QuotaTree, node: int) -> int:
    """classical.getNodeHeight of a cohort: 1 with any child, +1 per level of child cohorts."""
    tree_node = tree.nodes[node]
    height = min(len(tree_node.children), 1)
    for child in tree_node.children:
        if not tree.nodes[child].is_queue:
            height = max(height, node_height(tree, child) + 1)
    return height


def _path_to_root(tree: QuotaTree, node: int) -> list[int]:
    """The cohorts above `node`, nearest first (PathParentToRoot)."""
    path = []
    parent = tree.nodes[node].parent
    while parent is not None:
        path.append(parent)
        parent = tree.nodes[parent].parent
    return path


def _borrowing_with(tree: QuotaTree, ledger: QuotaLedger, node: int, fr: FlavorResource, value: Fraction) -> bool:
    """BorrowingWith: a ClusterQueue's SubtreeQuota is its nominal quota, a Cohort's what its subtree pools."""
    return tree.nodes[node].subtree.get(fr, _ZERO) < ledger.usage_of_node(node, fr) + value


def _local_available(tree: QuotaTree, ledger: QuotaLedger, node: int, fr: FlavorResource) -> Fraction:
    return max(_ZERO, tree.nodes[node].local_quota(fr) - ledger.usage_of_node(node, fr))


def height_that_fits(
    tree: QuotaTree, ledger: QuotaLedger, queue: int, fr: FlavorResource, value: Fraction
) -> tuple[int, bool]:
    """classical.FindHeightOfLowestSubtreeThatFits: the borrowing level of `value` more in the queue, and whether
    reclaiming in the hierarchy may help (the subtree that fits has a parent)."""
    parent = tree.nodes[queue].parent
    if not _borrowing_with(tree, ledger, queue, fr, value) or parent is None:
        return 0, parent is not None
    remaining = value - _local_available(tree, ledger, queue, fr)
    path = _path_to_root(tree, queue)
    for cohort in path:
        if not _borrowing_with(tree, ledger, cohort, fr, remaining):
            return node_height(tree, cohort), tree.nodes[cohort].parent is not None
        remaining -= _local_available(tree, ledger, cohort, fr)
    return node_height(tree, path[-1]), False


@dataclass
class PreemptionOracle:
    """One pod's oracle for one decision: answers are remembered per (flavor, resource, amount)."""

    tree: QuotaTree
    ledger: QuotaLedger
    holders: HolderLookup
    preemptor: Preemptor
    fair_sharing: bool = False
    _answers: dict[tuple[str, str, str, Fraction], OracleAnswer] = field(default_factory=dict)

    def simulate(self, cluster_queue: ClusterQueue, flavor: str, resource: str, amount: Fraction) -> OracleAnswer:
        """SimulatePreemption for `amount` of (flavor, resource) in the queue."""
        key = (cluster_queue.name, flavor, resource, amount)
        answer = self._answers.get(key)
        if answer is None:
            answer = self._answers[key] = self._simulate(cluster_queue, FlavorResource(flavor, resource), amount)
        return answer

    def may_preempt(self, cluster_queue: ClusterQueue, flavor: str, resource: str, amount: Fraction) -> bool:
        """fitsResourceQuota's condition for asking: within nominal, reclaim possible in the hierarchy, or the
        queue may preempt while borrowing."""
        fr = FlavorResource(flavor, resource)
        queue = self.tree.queue_index(cluster_queue.name)
        if self.tree.nominal(cluster_queue.name, flavor, resource) >= amount:
            return True
        _, may_reclaim = height_that_fits(self.tree, self.ledger, queue, fr, amount)
        policy = cluster_queue.preemption
        return (
            may_reclaim
            or not policy.borrowing_within_cohort_forbidden
            or (self.fair_sharing and policy.reclaim_within_cohort is not PreemptionPolicy.NEVER)
        )

    def _simulate(self, cluster_queue: ClusterQueue, fr: FlavorResource, amount: Fraction) -> OracleAnswer:
        queue = self.tree.queue_index(cluster_queue.name)
        if self.fair_sharing:
            targets = self._fair_targets(cluster_queue, queue, fr, amount)
        else:
            targets = self._classical_targets(cluster_queue, queue, fr, amount)
        if not targets:
            borrow, _ = height_that_fits(self.tree, self.ledger, queue, fr, amount)
            return OracleAnswer(PreemptionPossibility.NO_CANDIDATES, borrow, ())
        after = self._without(self.ledger, fr, targets)
        borrow, _ = height_that_fits(self.tree, after, queue, fr, amount)
        own = any(target.cluster_queue == cluster_queue.name for target in targets)
        possibility = PreemptionPossibility.PREEMPT if own else PreemptionPossibility.RECLAIM
        return OracleAnswer(possibility, borrow, tuple(targets))

    # -- the simulation ------------------------------------------------------------------------------------------

    @staticmethod
    def _without(ledger: QuotaLedger, fr: FlavorResource, holders: Sequence[Holder]) -> QuotaLedger:
        deltas = []
        for holder in holders:
            held = ledger.usage(holder.cluster_queue, fr.flavor, fr.resource)
            deltas.append((holder.cluster_queue, fr.flavor, fr.resource, -min(holder.amount, held)))
        return ledger.with_usage_deltas(deltas)

    def _fits(self, ledger: QuotaLedger, queue: int, fr: FlavorResource, amount: Fraction, borrow: bool) -> bool:
        """workloadFits for the one flavor-resource."""
        if not borrow and _borrowing_with(self.tree, ledger, queue, fr, amount):
            return False
        return amount <= max(_ZERO, ledger.available_of_node(queue, fr))

    def _order(self, candidates: list[_Candidate], own_queue: str) -> list[_Candidate]:
        """CandidatesOrdering: other queues' first, lower priority first, the newest first, then by name."""
        by_name = sorted(candidates, key=lambda c: c.holder.unit)
        by_newest = sorted(by_name, key=lambda c: c.holder.created, reverse=True)
        return sorted(by_newest, key=lambda c: (c.holder.cluster_queue == own_queue, c.holder.priority))

    def _classify(self, cluster_queue: ClusterQueue, holder: Holder, advantage: bool) -> _Variant | None:
        """classifyPreemptionVariant."""
        policy = cluster_queue.preemption
        same = holder.cluster_queue == cluster_queue.name
        rule = policy.within_cluster_queue if same else policy.reclaim_within_cohort
        if not satisfies_policy(self.preemptor, holder, rule):
            return None
        if same:
            return _Variant.WITHIN_CQ
        if advantage:
            return _Variant.HIERARCHICAL_RECLAIM
        if policy.borrowing_within_cohort_forbidden:
            return _Variant.RECLAIM_WITHOUT_BORROWING
        threshold = policy.max_priority_threshold
        if holder.priority >= self.preemptor.priority or (threshold is not None and holder.priority > threshold):
            return _Variant.RECLAIM_WITHOUT_BORROWING
        return _Variant.RECLAIM_WHILE_BORROWING

    def _queue_candidates(
        self, cluster_queue: ClusterQueue, node: int, fr: FlavorResource, lca: int | None, advantage: bool
    ) -> list[_Candidate]:
        found = []
        for holder in self.holders(self.tree.nodes[node].name, fr.flavor, fr.resource):
            variant = self._classify(cluster_queue, holder, advantage)
            if variant is not None:
                found.append(_Candidate(holder, lca, variant))
        return found

    def _within_nominal(self, ledger: QuotaLedger, node: int, fr: FlavorResource) -> bool:
        return not self.tree.nodes[node].subtree.get(fr, _ZERO) < ledger.usage_of_node(node, fr)

    def _collect_subtree(
        self,
        cq: ClusterQueue,
        queue: int,
        current: int,
        root: int,
        skip: int | None,
        advantage: bool,
        fr: FlavorResource,
    ) -> list[_Candidate]:
        """collectCandidatesInSubtree."""
        found: list[_Candidate] = []
        for child in self.tree.nodes[current].children:
            child_node = self.tree.nodes[child]
            if child in (skip, queue) or self._within_nominal(self.ledger, child, fr):
                continue
            if child_node.is_queue:
                found.extend(self._queue_candidates(cq, child, fr, root, advantage))
            else:
                found.extend(self._collect_subtree(cq, queue, child, root, skip, advantage, fr))
        return found

    def _cohort_candidates(
        self, cq: ClusterQueue, queue: int, fr: FlavorResource, amount: Fraction
    ) -> tuple[list[_Candidate], list[_Candidate]]:
        """collectCandidatesForHierarchicalReclaim: (hierarchy candidates, priority candidates)."""
        hierarchy: list[_Candidate] = []
        by_priority: list[_Candidate] = []
        if self.tree.nodes[queue].parent is None or cq.preemption.reclaim_within_cohort is PreemptionPolicy.NEVER:
            return hierarchy, by_priority
        advantage = not _borrowing_with(self.tree, self.ledger, queue, fr, amount)
        remaining = max(_ZERO, amount - _local_available(self.tree, self.ledger, queue, fr))
        previous: int | None = None
        for cohort in _path_to_root(self.tree, queue):
            target = hierarchy if advantage else by_priority
            target.extend(self._collect_subtree(cq, queue, cohort, cohort, previous, advantage, fr))
            fits = not _borrowing_with(self.tree, self.ledger, cohort, fr, remaining)
            remaining = max(_ZERO, remaining - _local_available(self.tree, self.ledger, cohort, fr))
            advantage = advantage or fits
            previous = cohort
        return hierarchy, by_priority

    def _valid(
        self, cq: ClusterQueue, candidate: _Candidate, borrow: bool, ledger: QuotaLedger, fr: FlavorResource
    ) -> bool:
        """candidateIterator.candidateIsValid, against the simulation so far."""
        if candidate.holder.cluster_queue == cq.name:
            return True
        if borrow and candidate.variant is _Variant.RECLAIM_WITHOUT_BORROWING:
            return False
        node = self.tree.queue_index(candidate.holder.cluster_queue)
        if self._within_nominal(ledger, node, fr):
            return False
        for cohort in _path_to_root(self.tree, node):
            if cohort == candidate.lca:
                break
            if self._within_nominal(ledger, cohort, fr):
                return False
        return True

    def _classical_targets(self, cq: ClusterQueue, queue: int, fr: FlavorResource, amount: Fraction) -> list[Holder]:
        """classicalPreemptions for one flavor-resource."""
        same: list[_Candidate] = []
        if cq.preemption.within_cluster_queue is not PreemptionPolicy.NEVER:
            same = self._queue_candidates(cq, queue, fr, None, False)
        hierarchy, by_priority = self._cohort_candidates(cq, queue, fr, amount)
        ordered = self._order(hierarchy, cq.name) + self._order(by_priority, cq.name) + self._order(same, cq.name)
        forbidden = cq.preemption.borrowing_within_cohort_forbidden
        under_nominal = self.tree.nominal(cq.name, fr.flavor, fr.resource) > self.ledger.usage_of_node(queue, fr)
        attempts: tuple[bool, ...]
        if (not hierarchy and not by_priority) or (forbidden and not under_nominal):
            attempts = (True,)
        elif forbidden and not hierarchy:
            attempts = (False, True)
        else:
            attempts = (True, False)
        for borrow in attempts:
            ledger = self.ledger
            targets: list[Holder] = []
            for candidate in ordered:
                if not self._valid(cq, candidate, borrow, ledger, fr):
                    continue
                ledger = self._without(ledger, fr, (candidate.holder,))
                targets.append(candidate.holder)
                if self._fits(ledger, queue, fr, amount, borrow):
                    return self._fill_back(targets, queue, fr, amount, borrow)
        return []

    def _fill_back(
        self, targets: list[Holder], queue: int, fr: FlavorResource, amount: Fraction, borrow: bool
    ) -> list[Holder]:
        """fillBackWorkloads: give back every target but the last that the pod does not need gone."""
        for index in range(len(targets) - 2, -1, -1):
            others = targets[:index] + targets[index + 1 :]
            if self._fits(self._without(self.ledger, fr, others), queue, fr, amount, borrow):
                targets[index] = targets[-1]
                targets.pop()
        return targets

    def _fair_targets(self, cq: ClusterQueue, queue: int, fr: FlavorResource, amount: Fraction) -> list[Holder]:
        """fairPreemptions' candidates (findCandidates), taken in order until the pod fits (no share strategy)."""
        policy = cq.preemption
        candidates: list[_Candidate] = []
        if policy.within_cluster_queue is not PreemptionPolicy.NEVER:
            candidates.extend(self._queue_candidates(cq, queue, fr, None, False))
        path = _path_to_root(self.tree, queue)
        if path and policy.reclaim_within_cohort is not PreemptionPolicy.NEVER:
            for node in self._subtree_queues(path[-1]):
                if node != queue and not self._within_nominal(self.ledger, node, fr):
                    candidates.extend(
                        _Candidate(h, None, _Variant.HIERARCHICAL_RECLAIM)
                        for h in self.holders(self.tree.nodes[node].name, fr.flavor, fr.resource)
                        if satisfies_policy(self.preemptor, h, policy.reclaim_within_cohort)
                    )
        ledger = self.ledger
        targets: list[Holder] = []
        for candidate in self._order(candidates, cq.name):
            ledger = self._without(ledger, fr, (candidate.holder,))
            targets.append(candidate.holder)
            if self._fits(ledger, queue, fr, amount, True):
                return self._fill_back(targets, queue, fr, amount, True)
        return []

    def _subtree_queues(self, root: int) -> list[int]:
        queues: list[int] = []
        stack = [root]
        while stack:
            node = self.tree.nodes[stack.pop()]
            for child in node.children:
                (queues if self.tree.nodes[child].is_queue else stack).append(child)
        return queues
