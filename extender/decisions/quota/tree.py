"""Kueue's quota arithmetic (available, potentialAvailable) over ClusterQueues and hierarchical Cohorts.

The extender must say "no" exactly when Kueue would, so this is a transliteration of Kueue v0.19's
pkg/cache/scheduler/resource_node.go, not an approximation of it:

- Every node (ClusterQueue or Cohort) has, per (flavor, resource), a SubtreeQuota: a ClusterQueue's is its
  nominalQuota; a Cohort's is its own nominalQuota plus, for every child, child.SubtreeQuota -
  child.localQuota.
- localQuota = max(0, SubtreeQuota - lendingLimit) when lendingLimit is set, else 0. It is what the node keeps
  for its own subtree and never lends. Note SubtreeQuota, not nominalQuota: for a Cohort with a lendingLimit
  the lendable amount is measured against everything its subtree pooled.
- A Cohort's usage is the sum over its children of max(0, child.usage - child.localQuota): only usage beyond
  what a child keeps for itself is charged to the parent.
- available(root) = SubtreeQuota - usage. available(node) = max(0, localQuota - usage) +
  min(available(parent), cap) where cap = (SubtreeQuota - localQuota) - max(0, usage - localQuota) +
  borrowingLimit, applied only when borrowingLimit is set. Intermediate values may be negative
  (over-admission after quota shrank); the ClusterQueue's answer is clamped to 0 only at the end.
- potentialAvailable(root) = SubtreeQuota; potentialAvailable(node) = localQuota +
  potentialAvailable(parent), capped at SubtreeQuota + borrowingLimit when borrowingLimit is set.
- A cohort named by a ClusterQueue or by a Cohort's parentName but without a Cohort object exists implicitly,
  with no quota of its own. A ClusterQueue whose cohort chain contains a cycle is inactive in Kueue (it is
  left out of the scheduling snapshot); here it is disconnected for arithmetic and `fits` says INACTIVE.

Kueue saturates quota at int64 ("Unlimited"); quantities here are exact Fractions, which differ only for
quotas beyond ~9.2e18 base units.

Performance: `QuotaTree` is built once per change of ClusterQueues/Cohorts and precomputes, per
(ClusterQueue, flavor, resource), the path to the root with each level's quota numbers. `QuotaLedger` binds
a usage snapshot to a tree: it precomputes every node's usage once (O(entries x depth)), answers
`available`/`fits` in O(depth), and `with_usage_delta` returns a new ledger in O(depth) (copy-on-write
overlay), so "reserve, then ask again" does not rebuild anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import NamedTuple

from extender.state.kueue.cluster_queue import ClusterQueue
from extender.state.kueue.cohort import Cohort
from extender.state.kueue.quotas import ResourceGroup, ResourceQuota
from extender.state.quantity import format_quantity
from extender.state.reservations import QuotaKey

_ZERO = Fraction(0)


class FlavorResource(NamedTuple):
    flavor: str
    resource: str


class FitOutcome(StrEnum):
    FITS = "Fits"
    FITS_BY_BORROWING = "FitsByBorrowing"
    NEEDS_PREEMPTION = "NeedsPreemption"
    NEVER_FITS = "NeverFits"
    NOT_COVERED = "NotCovered"
    INACTIVE = "Inactive"


# Worst first: when one pod needs several resources, its verdict is the worst of theirs.
_SEVERITY = {
    FitOutcome.INACTIVE: 5,
    FitOutcome.NOT_COVERED: 4,
    FitOutcome.NEVER_FITS: 3,
    FitOutcome.NEEDS_PREEMPTION: 2,
    FitOutcome.FITS_BY_BORROWING: 1,
    FitOutcome.FITS: 0,
}


@dataclass(frozen=True, slots=True)
class Fit:
    """A verdict with the numbers behind it, so that the explanation layer never recomputes them."""

    outcome: FitOutcome
    cluster_queue: str
    flavor: str
    resource: str
    requested: Fraction
    usage: Fraction = _ZERO
    nominal: Fraction = _ZERO
    available: Fraction = _ZERO
    potential_available: Fraction = _ZERO
    borrowing_limit: Fraction | None = None
    lending_limit: Fraction | None = None
    cohort: str | None = None
    reason: str = ""

    @property
    def admissible(self) -> bool:
        return self.outcome in (FitOutcome.FITS, FitOutcome.FITS_BY_BORROWING)

    @property
    def borrowing(self) -> Fraction:
        """How far past its nominal quota the ClusterQueue would be after this request (Kueue: borrowing)."""
        return max(_ZERO, self.usage + self.requested - self.nominal)

    @property
    def shortfall(self) -> Fraction:
        """How much more would have to be freed (by preemption or completion) for the request to fit."""
        return max(_ZERO, self.requested - self.available)

    @property
    def severity(self) -> int:
        return _SEVERITY[self.outcome]


def worst_fit(fits: Iterable[Fit]) -> Fit | None:
    """The verdict that decides a multi-resource request: the most severe one, first in order on ties."""
    worst: Fit | None = None
    for fit in fits:
        if worst is None or fit.severity > worst.severity:
            worst = fit
    return worst


@dataclass(frozen=True, slots=True)
class _Level:
    """One node on a ClusterQueue's path to its root, for one flavor-resource."""

    node: int
    subtree_quota: Fraction
    local_quota: Fraction
    borrowing_limit: Fraction | None


class _Node:
    __slots__ = ("children", "depth", "explicit", "index", "is_queue", "name", "parent", "quotas", "subtree")

    def __init__(self, index: int, name: str, *, is_queue: bool, explicit: bool) -> None:
        self.index = index
        self.name = name
        self.is_queue = is_queue
        self.explicit = explicit
        self.parent: int | None = None  # the arithmetic parent; None for roots and cycle-disconnected nodes
        self.children: list[int] = []
        self.depth = 0
        self.quotas: dict[FlavorResource, ResourceQuota] = {}
        self.subtree: dict[FlavorResource, Fraction] = {}

    def local_quota(self, fr: FlavorResource) -> Fraction:
        quota = self.quotas.get(fr)
        if quota is None or quota.lending_limit is None:
            return _ZERO
        return max(_ZERO, self.subtree.get(fr, _ZERO) - quota.lending_limit)

    def borrowing_limit(self, fr: FlavorResource) -> Fraction | None:
        quota = self.quotas.get(fr)
        return None if quota is None else quota.borrowing_limit


def _quotas_of(groups: tuple[ResourceGroup, ...]) -> dict[FlavorResource, ResourceQuota]:
    quotas = {}
    for group in groups:
        for flavor in group.flavors:
            for quota in flavor.resources:
                quotas[FlavorResource(flavor.name, quota.name)] = quota
    return quotas


class QuotaTree:
    """The quota structure of all ClusterQueues and Cohorts; immutable once built.

    Build one per change of ClusterQueues/Cohorts and share it between threads; usage lives in
    `QuotaLedger`s made by `ledger()`.
    """

    __slots__ = (
        "_cohort_index",
        "_cyclic",
        "_inactive",
        "_levels_cache",
        "_nodes",
        "_potential_cache",
        "_queue_index",
        "_queues",
    )

    def __init__(self, cluster_queues: Iterable[ClusterQueue], cohorts: Iterable[Cohort] = ()) -> None:
        self._nodes: list[_Node] = []
        self._queue_index: dict[str, int] = {}
        self._cohort_index: dict[str, int] = {}
        self._queues: dict[str, ClusterQueue] = {}
        self._levels_cache: dict[tuple[int, FlavorResource], tuple[_Level, ...]] = {}
        self._potential_cache: dict[tuple[int, FlavorResource], Fraction] = {}

        cohort_list = list(cohorts)
        declared_parent: dict[int, str | None] = {}
        for cohort in cohort_list:
            if cohort.name in self._cohort_index:
                raise ValueError(f"duplicate Cohort {cohort.name!r}")
            node = self._add_cohort(cohort.name, explicit=True)
            node.quotas = _quotas_of(cohort.resource_groups)
            declared_parent[node.index] = cohort.parent_name
        for cohort in cohort_list:
            if cohort.parent_name:
                self._cohort(cohort.parent_name)  # implicit parent
        queue_parent: dict[int, int] = {}
        for queue in cluster_queues:
            if queue.name in self._queue_index:
                raise ValueError(f"duplicate ClusterQueue {queue.name!r}")
            index = len(self._nodes)
            node = _Node(index, queue.name, is_queue=True, explicit=True)
            node.quotas = _quotas_of(queue.resource_groups)
            node.subtree = {fr: quota.nominal_quota for fr, quota in node.quotas.items()}
            self._nodes.append(node)
            self._queue_index[queue.name] = index
            self._queues[queue.name] = queue
            if queue.cohort_name:
                queue_parent[index] = self._cohort(queue.cohort_name).index

        self._cyclic = self._find_cycles(declared_parent)
        for cohort_index, parent_name in declared_parent.items():
            if parent_name and cohort_index not in self._cyclic:
                self._link(cohort_index, self._cohort_index[parent_name])
        for queue_index, parent_index in queue_parent.items():
            if parent_index not in self._cyclic:
                self._link(queue_index, parent_index)
        self._inactive: dict[str, str] = {}
        for queue_index, parent_index in queue_parent.items():
            if parent_index in self._cyclic:
                name = self._nodes[queue_index].name
                cohort_name = self._nodes[parent_index].name
                self._inactive[name] = f"cohort {cohort_name!r} is part of, or descends from, a cohort cycle"
        for name, queue in self._queues.items():
            if name not in self._inactive and queue.is_stopped:
                self._inactive[name] = f"ClusterQueue is stopped (stopPolicy {queue.stop_policy.value})"
        self._accumulate_subtree_quota()

    # -- construction ----------------------------------------------------------------------------------------

    def _add_cohort(self, name: str, *, explicit: bool) -> _Node:
        node = _Node(len(self._nodes), name, is_queue=False, explicit=explicit)
        self._nodes.append(node)
        self._cohort_index[name] = node.index
        return node

    def _cohort(self, name: str) -> _Node:
        index = self._cohort_index.get(name)
        return self._nodes[index] if index is not None else self._add_cohort(name, explicit=False)

    def _find_cycles(self, declared_parent: Mapping[int, str | None]) -> frozenset[int]:
        """Cohorts whose parent chain never reaches a root, as hierarchy.HasCycle decides.

        Kueue treats a cohort that merely leads *into* a cycle as cyclic too, so we do the same.
        """
        state: dict[int, bool] = {}  # cohort index -> reaches a root
        for start in declared_parent:
            chain: list[int] = []
            on_chain: set[int] = set()
            current: int | None = start
            reaches_root = True
            while current is not None and current not in state:
                if current in on_chain:
                    reaches_root = False
                    break
                chain.append(current)
                on_chain.add(current)
                parent_name = declared_parent.get(current)
                current = self._cohort_index[parent_name] if parent_name else None
            else:
                reaches_root = True if current is None else state[current]
            for index in chain:
                state[index] = reaches_root
        return frozenset(index for index, ok in state.items() if not ok)

    def _link(self, child: int, parent: int) -> None:
        self._nodes[child].parent = parent
        self._nodes[parent].children.append(child)

    def _accumulate_subtree_quota(self) -> None:
        """updateCohortResourceNode: bottom-up over every acyclic cohort tree."""
        order: list[int] = []
        stack = [node.index for node in self._nodes if node.parent is None and not node.is_queue]
        stack = [index for index in stack if index not in self._cyclic]
        while stack:
            index = stack.pop()
            order.append(index)
            node = self._nodes[index]
            for child in node.children:
                self._nodes[child].depth = node.depth + 1
                if not self._nodes[child].is_queue:
                    stack.append(child)
        for index in reversed(order):  # children before parents
            node = self._nodes[index]
            subtree = {fr: quota.nominal_quota for fr, quota in node.quotas.items()}
            for child_index in node.children:
                child_node = self._nodes[child_index]
                for fr, child_quota in child_node.subtree.items():
                    subtree[fr] = subtree.get(fr, _ZERO) + child_quota - child_node.local_quota(fr)
            node.subtree = subtree

    # -- structure -------------------------------------------------------------------------------------------

    @property
    def cluster_queue_names(self) -> frozenset[str]:
        return frozenset(self._queue_index)

    @property
    def cohort_names(self) -> frozenset[str]:
        return frozenset(self._cohort_index)

    @property
    def implicit_cohorts(self) -> frozenset[str]:
        """Cohorts referenced by name only; Kueue creates them with no quota of their own."""
        return frozenset(name for name, index in self._cohort_index.items() if not self._nodes[index].explicit)

    @property
    def cyclic_cohorts(self) -> frozenset[str]:
        return frozenset(self._nodes[index].name for index in self._cyclic)

    def cluster_queue(self, name: str) -> ClusterQueue | None:
        return self._queues.get(name)

    def inactive_reason(self, cluster_queue: str) -> str | None:
        """Why Kueue would admit nothing into this ClusterQueue now, or None when it is active."""
        if cluster_queue not in self._queue_index:
            return f"ClusterQueue {cluster_queue!r} not found"
        return self._inactive.get(cluster_queue)

    def parent_cohort(self, cluster_queue: str) -> str | None:
        """The cohort used for arithmetic (None when the ClusterQueue has none or it is in a cycle)."""
        parent = self._nodes[self._queue(cluster_queue)].parent
        return None if parent is None else self._nodes[parent].name

    def cohort_path(self, cluster_queue: str) -> tuple[str, ...]:
        """Cohort names from the ClusterQueue's own cohort up to its root."""
        names = []
        parent = self._nodes[self._queue(cluster_queue)].parent
        while parent is not None:
            names.append(self._nodes[parent].name)
            parent = self._nodes[parent].parent
        return tuple(names)

    def quota(self, cluster_queue: str, flavor: str, resource: str) -> ResourceQuota | None:
        return self._nodes[self._queue(cluster_queue)].quotas.get(FlavorResource(flavor, resource))

    def covers(self, cluster_queue: str, flavor: str, resource: str) -> bool:
        return self.quota(cluster_queue, flavor, resource) is not None

    def nominal(self, cluster_queue: str, flavor: str, resource: str) -> Fraction:
        quota = self.quota(cluster_queue, flavor, resource)
        return _ZERO if quota is None else quota.nominal_quota

    def local_quota(self, cluster_queue: str, flavor: str, resource: str) -> Fraction:
        return self._nodes[self._queue(cluster_queue)].local_quota(FlavorResource(flavor, resource))

    def cohort_subtree_quota(self, cohort: str, flavor: str, resource: str) -> Fraction:
        return self._nodes[self._cohort_node(cohort)].subtree.get(FlavorResource(flavor, resource), _ZERO)

    def cohort_local_quota(self, cohort: str, flavor: str, resource: str) -> Fraction:
        return self._nodes[self._cohort_node(cohort)].local_quota(FlavorResource(flavor, resource))

    def cohort_quota(self, cohort: str, flavor: str, resource: str) -> ResourceQuota | None:
        """The Cohort's own resourceGroups entry (None for implicit cohorts and uncovered resources)."""
        return self._nodes[self._cohort_node(cohort)].quotas.get(FlavorResource(flavor, resource))

    def potential_available(self, cluster_queue: str, flavor: str, resource: str) -> Fraction:
        """The largest amount this ClusterQueue could ever hold, with every other queue empty."""
        return self._potential(self._queue(cluster_queue), FlavorResource(flavor, resource))

    # -- usage -----------------------------------------------------------------------------------------------

    def ledger(self, usage: Mapping[QuotaKey, Fraction | int] | None = None) -> QuotaLedger:
        """Bind a usage snapshot: {(ClusterQueue, flavor, resource): amount}; unknown queues are ignored.

        Usage in a flavor-resource the queue has no quota for still counts against its cohort, as in Kueue
        (e.g. after quota was removed while workloads still run).
        """
        return QuotaLedger._from_usage(self, usage or {})

    # -- internals -------------------------------------------------------------------------------------------

    def _queue(self, name: str) -> int:
        index = self._queue_index.get(name)
        if index is None:
            raise KeyError(f"unknown ClusterQueue {name!r}")
        return index

    def _cohort_node(self, name: str) -> int:
        index = self._cohort_index.get(name)
        if index is None:
            raise KeyError(f"unknown cohort {name!r}")
        return index

    def _levels(self, queue: int, fr: FlavorResource) -> tuple[_Level, ...]:
        key = (queue, fr)
        levels = self._levels_cache.get(key)
        if levels is None:
            path = []
            current: int | None = queue
            while current is not None:
                node = self._nodes[current]
                path.append(
                    _Level(current, node.subtree.get(fr, _ZERO), node.local_quota(fr), node.borrowing_limit(fr))
                )
                current = node.parent
            levels = tuple(path)
            self._levels_cache[key] = levels  # idempotent; a racing thread computes the same tuple
        return levels

    def _potential(self, queue: int, fr: FlavorResource) -> Fraction:
        key = (queue, fr)
        cached = self._potential_cache.get(key)
        if cached is not None:
            return cached
        levels = self._levels(queue, fr)
        potential = levels[-1].subtree_quota
        for level in reversed(levels[:-1]):
            potential = level.local_quota + potential
            if level.borrowing_limit is not None:
                potential = min(level.subtree_quota + level.borrowing_limit, potential)
        self._potential_cache[key] = potential
        return potential


class QuotaLedger:
    """A usage snapshot over a QuotaTree; immutable, cheap to derive with `with_usage_delta`.

    Node usage is stored copy-on-write: a shared base dict plus a small overlay holding what deltas touched,
    folded into a new base once it grows, so a chain of reservations costs O(depth) each.
    """

    __slots__ = ("_available_cache", "_base", "_overlay", "_tree")

    _COMPACT_AT = 64

    def __init__(
        self,
        tree: QuotaTree,
        base: dict[tuple[int, FlavorResource], Fraction],
        overlay: dict[tuple[int, FlavorResource], Fraction],
    ) -> None:
        self._tree = tree
        self._base = base
        self._overlay = overlay
        # The ledger never changes, so per-queue answers can be memoised: a scheduling decision asks the
        # same (queue, flavor, resource) once per candidate node.
        self._available_cache: dict[tuple[int, FlavorResource], Fraction] = {}

    @classmethod
    def _from_usage(cls, tree: QuotaTree, usage: Mapping[QuotaKey, Fraction | int]) -> QuotaLedger:
        node_usage: dict[tuple[int, FlavorResource], Fraction] = {}
        for (queue_name, flavor, resource), amount in usage.items():
            queue = tree._queue_index.get(queue_name)
            if queue is None:
                continue  # a deleted ClusterQueue's workloads no longer count anywhere
            value = Fraction(amount)
            if value < 0:
                raise ValueError(f"negative usage {value} for {(queue_name, flavor, resource)}")
            key = (queue, FlavorResource(flavor, resource))
            node_usage[key] = node_usage.get(key, _ZERO) + value
        # Push usage beyond localQuota up, deepest level first, so each cohort sums finished children.
        buckets: dict[int, list[tuple[int, FlavorResource]]] = {}
        for key in node_usage:
            buckets.setdefault(tree._nodes[key[0]].depth, []).append(key)
        for depth in range(max(buckets, default=0), 0, -1):
            for index, fr in buckets.get(depth, ()):
                node = tree._nodes[index]
                if node.parent is None:
                    continue
                excess = node_usage[(index, fr)] - node.local_quota(fr)
                if excess > 0:
                    parent_key = (node.parent, fr)
                    if parent_key not in node_usage:
                        node_usage[parent_key] = _ZERO
                        buckets.setdefault(depth - 1, []).append(parent_key)
                    node_usage[parent_key] += excess
        return cls(tree, node_usage, {})

    @property
    def tree(self) -> QuotaTree:
        return self._tree

    def _get(self, key: tuple[int, FlavorResource]) -> Fraction:
        value = self._overlay.get(key)
        if value is None:
            value = self._base.get(key, _ZERO)
        return value

    # -- reading ---------------------------------------------------------------------------------------------

    def usage(self, cluster_queue: str, flavor: str, resource: str) -> Fraction:
        return self._get((self._tree._queue(cluster_queue), FlavorResource(flavor, resource)))

    def cohort_usage(self, cohort: str, flavor: str, resource: str) -> Fraction:
        """Usage charged to the cohort: its children's usage beyond their localQuota."""
        return self._get((self._tree._cohort_node(cohort), FlavorResource(flavor, resource)))

    def cluster_queue_usage(self) -> dict[QuotaKey, Fraction]:
        """Non-zero usage per (ClusterQueue, flavor, resource); `tree.ledger()` of it equals this ledger."""
        merged = {**self._base, **self._overlay}
        nodes = self._tree._nodes
        return {
            (nodes[index].name, fr.flavor, fr.resource): value
            for (index, fr), value in merged.items()
            if nodes[index].is_queue and value
        }

    def available(self, cluster_queue: str, flavor: str, resource: str) -> Fraction:
        """Kueue's ClusterQueueSnapshot.Available: what can be admitted now without preemption (>= 0)."""
        return max(_ZERO, self._available(self._tree._queue(cluster_queue), FlavorResource(flavor, resource)))

    def cohort_available(self, cohort: str, flavor: str, resource: str) -> Fraction:
        """Kueue's available() for a cohort node; negative when the cohort is over-admitted."""
        index = self._tree._cohort_node(cohort)
        fr = FlavorResource(flavor, resource)
        nodes = self._tree._nodes
        path = []
        current: int | None = index
        while current is not None:
            node = nodes[current]
            path.append(_Level(current, node.subtree.get(fr, _ZERO), node.local_quota(fr), node.borrowing_limit(fr)))
            current = node.parent
        return self._walk(tuple(path), fr)

    def potential_available(self, cluster_queue: str, flavor: str, resource: str) -> Fraction:
        return self._tree.potential_available(cluster_queue, flavor, resource)

    def borrowed(self, cluster_queue: str, flavor: str, resource: str) -> Fraction:
        """How far usage already exceeds nominal (Kueue reports this as 'borrowed' in flavorsUsage)."""
        return max(
            _ZERO,
            self.usage(cluster_queue, flavor, resource) - self._tree.nominal(cluster_queue, flavor, resource),
        )

    def _available(self, queue: int, fr: FlavorResource) -> Fraction:
        key = (queue, fr)
        value = self._available_cache.get(key)
        if value is None:
            value = self._walk(self._tree._levels(queue, fr), fr)
            self._available_cache[key] = value
        return value

    def _walk(self, levels: tuple[_Level, ...], fr: FlavorResource) -> Fraction:
        # available() unrolled: start at the root, then come down, each level adding what it keeps locally
        # and limiting what it may take from above by its borrowingLimit.
        root = levels[-1]
        available = root.subtree_quota - self._get((root.node, fr))
        for level in reversed(levels[:-1]):
            used = self._get((level.node, fr))
            if level.borrowing_limit is not None:
                stored_in_parent = level.subtree_quota - level.local_quota
                used_in_parent = max(_ZERO, used - level.local_quota)
                available = min(stored_in_parent - used_in_parent + level.borrowing_limit, available)
            available = max(_ZERO, level.local_quota - used) + available
        return available

    # -- deciding --------------------------------------------------------------------------------------------

    def fits(self, cluster_queue: str, flavor: str, resource: str, request: Fraction | int) -> Fit:
        """Would Kueue admit `request` more of (flavor, resource) into this ClusterQueue now?

        Mirrors FlavorAssigner.fitsResourceQuota: beyond potentialAvailable it can never fit; within
        available it fits (by borrowing when usage would pass nominal); in between only preemption or
        completions could make room. A zero request always fits an active queue: nothing is charged.
        """
        requested = Fraction(request)
        if requested < 0:
            raise ValueError(f"negative request {requested}")
        tree = self._tree
        inactive = tree.inactive_reason(cluster_queue)
        if inactive is not None:
            return Fit(FitOutcome.INACTIVE, cluster_queue, flavor, resource, requested, reason=inactive)
        queue = tree._queue(cluster_queue)
        fr = FlavorResource(flavor, resource)
        quota = tree._nodes[queue].quotas.get(fr)
        usage = self._get((queue, fr))
        cohort = tree.parent_cohort(cluster_queue)
        if quota is None:
            outcome = FitOutcome.FITS if requested == 0 else FitOutcome.NOT_COVERED
            reason = (
                ""
                if requested == 0
                else (f"resource {resource} in flavor {flavor} is not covered by ClusterQueue {cluster_queue}")
            )
            return Fit(outcome, cluster_queue, flavor, resource, requested, usage=usage, cohort=cohort, reason=reason)
        available = max(_ZERO, self._available(queue, fr))
        potential = tree._potential(queue, fr)
        nominal = quota.nominal_quota
        if requested > potential:
            outcome = FitOutcome.NEVER_FITS
            reason = (
                f"insufficient quota for {resource} in flavor {flavor}, request ({_fmt(requested)}) > "
                f"maximum capacity ({_fmt(potential)})"
            )
        elif requested <= available:
            if usage + requested > nominal:
                outcome = FitOutcome.FITS_BY_BORROWING
                reason = f"fits by borrowing {_fmt(usage + requested - nominal)} from cohort {cohort}"
            else:
                outcome = FitOutcome.FITS
                reason = ""
        else:
            outcome = FitOutcome.NEEDS_PREEMPTION
            reason = (
                f"insufficient unused quota for {resource} in flavor {flavor}, "
                f"{_fmt(requested - available)} more needed"
            )
        return Fit(
            outcome,
            cluster_queue,
            flavor,
            resource,
            requested,
            usage=usage,
            nominal=nominal,
            available=available,
            potential_available=potential,
            borrowing_limit=quota.borrowing_limit,
            lending_limit=quota.lending_limit,
            cohort=cohort,
            reason=reason,
        )

    def fits_all(self, cluster_queue: str, flavor: str, requests: Mapping[str, Fraction | int]) -> tuple[Fit, ...]:
        """One verdict per resource; flavor-resources are independent in Kueue's arithmetic."""
        return tuple(self.fits(cluster_queue, flavor, resource, amount) for resource, amount in requests.items())

    # -- deriving --------------------------------------------------------------------------------------------

    def with_usage_delta(self, cluster_queue: str, flavor: str, resource: str, delta: Fraction | int) -> QuotaLedger:
        """A ledger with `delta` more (or, negative, less) usage; Kueue's addUsage/removeUsage in O(depth)."""
        return self.with_usage_deltas(((cluster_queue, flavor, resource, delta),))

    def with_usage_deltas(self, deltas: Iterable[tuple[str, str, str, Fraction | int]]) -> QuotaLedger:
        tree = self._tree
        overlay = dict(self._overlay)
        changed = False

        def get(key: tuple[int, FlavorResource]) -> Fraction:
            value = overlay.get(key)
            return self._base.get(key, _ZERO) if value is None else value

        for queue_name, flavor, resource, amount in deltas:
            delta = Fraction(amount)
            if not delta:
                continue
            queue = tree._queue_index.get(queue_name)
            if queue is None:
                raise KeyError(f"unknown ClusterQueue {queue_name!r}")
            fr = FlavorResource(flavor, resource)
            current: int | None = queue
            while current is not None and delta:
                node = tree._nodes[current]
                key = (current, fr)
                old = get(key)
                new = old + delta
                if node.is_queue and new < 0:
                    raise ValueError(
                        f"usage of {queue_name} in {flavor}/{resource} would become negative ({_fmt(new)})"
                    )
                overlay[key] = new
                changed = True
                local = node.local_quota(fr)
                delta = max(_ZERO, new - local) - max(_ZERO, old - local)
                current = node.parent
        if not changed:
            return self
        if len(overlay) > max(self._COMPACT_AT, len(self._base) // 4):
            return QuotaLedger(tree, {**self._base, **overlay}, {})
        return QuotaLedger(tree, self._base, overlay)


def _fmt(value: Fraction) -> str:
    return format_quantity(value)
