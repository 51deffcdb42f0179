"""Kueue's quota arithmetic (available, potentialAvailable) over ClusterQueues and hierarchical Cohorts.

The extender must say "no" exactly when Kueue would, so this is a transliteration of Kueue v0.19.2's
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
  left out of the scheduling snapshot); here it is disconnected for arithmetic and QuotaLedger.fits says INACTIVE.

Kueue saturates quota at int64 ("Unlimited"); quantities here are exact Fractions, which differ only for
quotas beyond ~9.2e18 base units.

`QuotaTree` holds the structure and the quota numbers; it is built once per change of ClusterQueues/Cohorts
and precomputes, per (ClusterQueue, flavor, resource), the path to the root with each level's quota numbers.
Usage lives in `QuotaLedger`s over it (ledger.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from extender.state.kueue.cluster_queue import ClusterQueue
from extender.state.kueue.cohort import Cohort
from extender.state.kueue.quotas import ResourceGroup, ResourceQuota

_ZERO = Fraction(0)


class FlavorResource(NamedTuple):
    flavor: str
    resource: str


@dataclass(frozen=True, slots=True)
class Level:
    """One node on a ClusterQueue's path to its root, for one flavor-resource."""

    node: int
    subtree_quota: Fraction
    local_quota: Fraction
    borrowing_limit: Fraction | None


class TreeNode:
    """A ClusterQueue or a Cohort (Kueue's ResourceNode): its own quotas and its SubtreeQuota per
    flavor-resource."""

    __slots__ = ("children", "cyclic", "depth", "explicit", "index", "is_queue", "name", "parent", "quotas", "subtree")

    def __init__(self, index: int, name: str, *, is_queue: bool, explicit: bool) -> None:
        self.index = index
        self.name = name
        self.is_queue = is_queue
        self.explicit = explicit  # False: a cohort named by others only, with no quota of its own
        self.cyclic = False  # a cohort whose parent chain never reaches a root (hierarchy.HasCycle)
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
    `QuotaLedger`s made over it.
    """

    __slots__ = ("_cohort_index", "_inactive", "_levels_cache", "_nodes", "_potential_cache", "_queue_index")

    def __init__(self, cluster_queues: Iterable[ClusterQueue], cohorts: Iterable[Cohort] = ()) -> None:
        self._nodes: list[TreeNode] = []
        self._queue_index: dict[str, int] = {}
        self._cohort_index: dict[str, int] = {}
        self._levels_cache: dict[tuple[int, FlavorResource], tuple[Level, ...]] = {}
        self._potential_cache: dict[tuple[int, FlavorResource], Fraction] = {}
        declared_parent = self._add_cohorts(list(cohorts))
        queues, queue_parent = self._add_queues(cluster_queues)
        for index in self._find_cycles(declared_parent):
            self._nodes[index].cyclic = True
        for cohort_index, parent_name in declared_parent.items():
            if parent_name and not self._nodes[cohort_index].cyclic:
                self._link(cohort_index, self._cohort_index[parent_name])
        for queue_index, parent_index in queue_parent.items():
            if not self._nodes[parent_index].cyclic:
                self._link(queue_index, parent_index)
        self._inactive: dict[str, str] = {}
        for queue_index, parent_index in queue_parent.items():
            if self._nodes[parent_index].cyclic:
                name = self._nodes[queue_index].name
                cohort_name = self._nodes[parent_index].name
                self._inactive[name] = f"cohort {cohort_name!r} is part of, or descends from, a cohort cycle"
        for name, queue in queues.items():
            if name not in self._inactive and queue.is_stopped:
                self._inactive[name] = f"ClusterQueue is stopped (stopPolicy {queue.stop_policy.value})"
        self._accumulate_subtree_quota()

    # -- construction ----------------------------------------------------------------------------------------

    def _add_cohorts(self, cohorts: list[Cohort]) -> dict[int, str | None]:
        """Every Cohort object, then the implicit parents they name; returns each one's declared parent."""
        declared_parent: dict[int, str | None] = {}
        for cohort in cohorts:
            if cohort.name in self._cohort_index:
                raise ValueError(f"duplicate Cohort {cohort.name!r}")
            node = self._add_cohort(cohort.name, explicit=True)
            node.quotas = _quotas_of(cohort.resource_groups)
            declared_parent[node.index] = cohort.parent_name
        for cohort in cohorts:
            if cohort.parent_name:
                self._cohort(cohort.parent_name)  # implicit parent
        return declared_parent

    def _add_queues(self, cluster_queues: Iterable[ClusterQueue]) -> tuple[dict[str, ClusterQueue], dict[int, int]]:
        """Every ClusterQueue (and the implicit cohorts they name); returns them by name, and each one's cohort."""
        queues: dict[str, ClusterQueue] = {}
        queue_parent: dict[int, int] = {}
        for queue in cluster_queues:
            if queue.name in self._queue_index:
                raise ValueError(f"duplicate ClusterQueue {queue.name!r}")
            index = len(self._nodes)
            node = TreeNode(index, queue.name, is_queue=True, explicit=True)
            node.quotas = _quotas_of(queue.resource_groups)
            node.subtree = {fr: quota.nominal_quota for fr, quota in node.quotas.items()}
            self._nodes.append(node)
            self._queue_index[queue.name] = index
            queues[queue.name] = queue
            if queue.cohort_name:
                queue_parent[index] = self._cohort(queue.cohort_name).index
        return queues, queue_parent

    def _add_cohort(self, name: str, *, explicit: bool) -> TreeNode:
        node = TreeNode(len(self._nodes), name, is_queue=False, explicit=explicit)
        self._nodes.append(node)
        self._cohort_index[name] = node.index
        return node

    def _cohort(self, name: str) -> TreeNode:
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
        stack = [index for index in stack if not self._nodes[index].cyclic]
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

    def inactive_reason(self, cluster_queue: str) -> str | None:
        """Why Kueue would admit nothing into this ClusterQueue now, or None when it is active."""
        if cluster_queue not in self._queue_index:
            return f"ClusterQueue {cluster_queue!r} not found"
        return self._inactive.get(cluster_queue)

    def parent_cohort(self, cluster_queue: str) -> str | None:
        """The cohort used for arithmetic (None when the ClusterQueue has none or it is in a cycle)."""
        parent = self._nodes[self.queue_index(cluster_queue)].parent
        return None if parent is None else self._nodes[parent].name

    def cohort_path(self, cluster_queue: str) -> tuple[str, ...]:
        """Cohort names from the ClusterQueue's own cohort up to its root."""
        names = []
        parent = self._nodes[self.queue_index(cluster_queue)].parent
        while parent is not None:
            names.append(self._nodes[parent].name)
            parent = self._nodes[parent].parent
        return tuple(names)

    def quota(self, cluster_queue: str, flavor: str, resource: str) -> ResourceQuota | None:
        return self._nodes[self.queue_index(cluster_queue)].quotas.get(FlavorResource(flavor, resource))

    def nominal(self, cluster_queue: str, flavor: str, resource: str) -> Fraction:
        quota = self.quota(cluster_queue, flavor, resource)
        return _ZERO if quota is None else quota.nominal_quota

    def potential_available(self, cluster_queue: str, flavor: str, resource: str) -> Fraction:
        """The largest amount this ClusterQueue could ever hold, with every other queue empty."""
        return self.potential(self.queue_index(cluster_queue), FlavorResource(flavor, resource))

    # -- the arithmetic's structure (QuotaLedger walks it) ---------------------------------------------------

    @property
    def nodes(self) -> list[TreeNode]:
        """Every ClusterQueue and Cohort, by index (never change the list)."""
        return self._nodes

    def find_queue(self, name: str) -> int | None:
        """The ClusterQueue's index, or None when there is no such ClusterQueue."""
        return self._queue_index.get(name)

    def queue_index(self, name: str) -> int:
        index = self._queue_index.get(name)
        if index is None:
            raise KeyError(f"unknown ClusterQueue {name!r}")
        return index

    def cohort_index(self, name: str) -> int:
        index = self._cohort_index.get(name)
        if index is None:
            raise KeyError(f"unknown cohort {name!r}")
        return index

    def levels(self, node: int, fr: FlavorResource) -> tuple[Level, ...]:
        """The path from `node` (an index of `nodes`) to its root, with each level's quota numbers for `fr`."""
        key = (node, fr)
        levels = self._levels_cache.get(key)
        if levels is None:
            path = []
            current: int | None = node
            while current is not None:
                level = self._nodes[current]
                path.append(
                    Level(current, level.subtree.get(fr, _ZERO), level.local_quota(fr), level.borrowing_limit(fr))
                )
                current = level.parent
            levels = tuple(path)
            self._levels_cache[key] = levels  # idempotent; a racing thread computes the same tuple
        return levels

    def potential(self, node: int, fr: FlavorResource) -> Fraction:
        """potentialAvailable of `node` (an index of `nodes`): what it could hold with every other node empty."""
        key = (node, fr)
        cached = self._potential_cache.get(key)
        if cached is not None:
            return cached
        levels = self.levels(node, fr)
        potential = levels[-1].subtree_quota
        for level in reversed(levels[:-1]):
            potential = level.local_quota + potential
            if level.borrowing_limit is not None:
                potential = min(level.subtree_quota + level.borrowing_limit, potential)
        self._potential_cache[key] = potential
        return potential
