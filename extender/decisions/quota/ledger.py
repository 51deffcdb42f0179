"""Usage over a QuotaTree, and Kueue's answers from it: available, and whether a request fits now.

Transliterates the usage half of Kueue v0.19.2's pkg/cache/scheduler/resource_node.go (the arithmetic is
described in tree.py): a Cohort's usage is what its children use beyond their localQuota, and available() walks
from the root down. `fits` mirrors FlavorAssigner.fitsResourceQuota (pkg/scheduler/flavorassigner).

A ledger is immutable. It precomputes every node's usage once (O(entries x depth)) and answers `available` and
`fits` in O(depth); `with_usage_deltas` returns a new ledger in O(depth) per delta (a copy-on-write overlay),
so "reserve, then ask again" rebuilds nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction

from extender.decisions.quota.fit import Fit, FitOutcome
from extender.decisions.quota.tree import FlavorResource, Level, QuotaTree
from extender.state.quantity import format_quantity
from extender.state.reservations import QuotaKey

_ZERO = Fraction(0)


class QuotaLedger:
    """A usage snapshot over a QuotaTree; immutable, cheap to derive with `with_usage_deltas`.

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
    def from_usage(cls, tree: QuotaTree, usage: Mapping[QuotaKey, Fraction | int] | None = None) -> QuotaLedger:
        """Bind a usage snapshot: {(ClusterQueue, flavor, resource): amount}; unknown queues are ignored.

        Usage in a flavor-resource the queue has no quota for still counts against its cohort, as in Kueue
        (e.g. after quota was removed while workloads still run).
        """
        nodes = tree.nodes
        node_usage: dict[tuple[int, FlavorResource], Fraction] = {}
        for (queue_name, flavor, resource), amount in (usage or {}).items():
            queue = tree.find_queue(queue_name)
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
            buckets.setdefault(nodes[key[0]].depth, []).append(key)
        for depth in range(max(buckets, default=0), 0, -1):
            for index, fr in buckets.get(depth, ()):
                node = nodes[index]
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

    def _get(self, key: tuple[int, FlavorResource]) -> Fraction:
        value = self._overlay.get(key)
        if value is None:
            value = self._base.get(key, _ZERO)
        return value

    # -- reading ---------------------------------------------------------------------------------------------

    @property
    def tree(self) -> QuotaTree:
        return self._tree

    def usage(self, cluster_queue: str, flavor: str, resource: str) -> Fraction:
        return self.usage_of_node(self._tree.queue_index(cluster_queue), FlavorResource(flavor, resource))

    def usage_of_node(self, node: int, fr: FlavorResource) -> Fraction:
        """Usage charged to a tree node (QuotaTree.nodes): a ClusterQueue's own, or for a Cohort its children's
        usage beyond their localQuota."""
        return self._get((node, fr))

    def available(self, cluster_queue: str, flavor: str, resource: str) -> Fraction:
        """Kueue's ClusterQueueSnapshot.Available: what can be admitted now without preemption (>= 0)."""
        fr = FlavorResource(flavor, resource)
        return max(_ZERO, self.available_of_node(self._tree.queue_index(cluster_queue), fr))

    def available_of_node(self, node: int, fr: FlavorResource) -> Fraction:
        """Kueue's available() for a tree node (QuotaTree.nodes); negative when it is over-admitted (usage above
        what quota changes left)."""
        return self._available(node, fr)

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
            value = self._walk(self._tree.levels(queue, fr), fr)
            self._available_cache[key] = value
        return value

    def _walk(self, levels: tuple[Level, ...], fr: FlavorResource) -> Fraction:
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
        queue = tree.queue_index(cluster_queue)
        fr = FlavorResource(flavor, resource)
        quota = tree.nodes[queue].quotas.get(fr)
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
        potential = tree.potential(queue, fr)
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

    # -- deriving --------------------------------------------------------------------------------------------

    def with_usage_deltas(self, deltas: Iterable[tuple[str, str, str, Fraction | int]]) -> QuotaLedger:
        """A ledger with each (ClusterQueue, flavor, resource, delta) added to usage (negative: released);
        Kueue's addUsage/removeUsage, O(depth) each."""
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
            queue = tree.queue_index(queue_name)
            fr = FlavorResource(flavor, resource)
            current: int | None = queue
            while current is not None and delta:
                node = tree.nodes[current]
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
