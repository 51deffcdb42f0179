"""The commonest pod's answers per node, remembered per request shape across pods and snapshots, and the
score groups of those nodes.

A pod with one claim and one ExactCount request (the commonest shape) gets the same answer on a node as the
previous pod of its shape until the node's allocations or devices change; kube-scheduler then asks about every
node again. Upstream's scheduler plugin asks the allocator per node on every cycle
(pkg/scheduler/framework/plugins/dynamicresources, Filter); remembering the answers per shape, and dropping
only the nodes a snapshot's change list names (state/snapshot.py NODE_CHANGE_KINDS), keeps a pod's per-node cost
to a dict copy on the common path (devices/pod_allocator.py settle_remembered). The answers are persistent maps
(immutables.Map): a binding drops its node and a filter adds what it found in O(log n) each, so in the largest
clusters, where kube-scheduler asks about a sample of the nodes (5 % at 65,000), a call costs what its sample
does rather than a copy of every remembered node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple, TypeVar

import immutables

from extender.decisions.devices.results import Allocation
from extender.state.indexes.device_room import FitParts
from extender.state.snapshot import NODE_CHANGE_KINDS, ClusterSnapshot


class Shortfall(NamedTuple):
    """The commonest pod's answer on a node whose free list cannot give it its count, without the pod's claim
    name (pods of one shape share it; each pod's refusal names its own claim: pod_allocator.PodAllocator._refusal)."""

    node: str
    selectable: int  # how many devices the selectors select on the node
    free: int  # how many of those are free


class ScoreGroups(NamedTuple):
    """The score parts (device fit, firstAvailable; interned) of one SettledNodes' nodes, for one strategy, node
    by node: nodes with equal parts and equal quota headroom get the same score, so score_nodes makes one
    breakdown per distinct parts and maps the nodes asked to it in C. A persistent map, as the answers are: a
    binding drops its node and a call adds the nodes it scored in O(log n) each, never a copy of every node.
    Never changed: a new value replaces it."""

    parts: immutables.Map[str, tuple[FitParts, float]]

    def without(self, names: Iterable[str]) -> ScoreGroups:
        smaller = _without(self.parts, names)
        return self if smaller is self.parts else ScoreGroups(smaller)

    def with_nodes(self, found: Mapping[str, tuple[FitParts, float]]) -> ScoreGroups:
        """These plus `found` (node -> its parts)."""
        return ScoreGroups(self.parts.update(found)) if found else self


NO_ALLOCATIONS: immutables.Map[str, Allocation] = immutables.Map()
NO_SHORTFALLS: immutables.Map[str, Shortfall] = immutables.Map()
NO_SCORE_GROUPS = ScoreGroups(immutables.Map())

V = TypeVar("V")


def _without(entries: immutables.Map[str, V], names: Iterable[str]) -> immutables.Map[str, V]:
    """`entries` less `names`, in O(len(names) log n); the same map when it holds none of them."""
    present = [name for name in names if name in entries]
    if not present:
        return entries
    with entries.mutate() as mutation:
        for name in present:
            del mutation[name]
        smaller = mutation.finish()
    return smaller


class SettledNodes(NamedTuple):
    """The commonest pod's remembered answers for one request shape and (class, selectors), node by node, as
    of one snapshot (PodAllocator.settle_remembered). A later snapshot keeps those of the nodes its change list
    does not name (state/snapshot.py NODE_CHANGE_KINDS) while the versions of pools spanning nodes stay as they
    were: one lookup per node, no per-node version checks. The nodes that can take the pod and the full ones
    are kept apart, so that a pod asked about every remembered node (kube-scheduler asks about all of them)
    gets its allocations as one copy of `allocations`, with no Python work per node; `scores` groups those
    nodes by their score parts per strategy, filled by score_nodes when it first needs them (each
    group a pure function of the allocations here) and carried to later snapshots less the nodes that changed."""

    version: int  # the snapshot version the answers hold at
    shared_versions: tuple[int, int]  # (allocations on, devices of) pools spanning nodes at that version
    # never changed: additions make a new SettledNodes
    allocations: immutables.Map[str, Allocation]
    shortfalls: immutables.Map[str, Shortfall]
    # strategy -> the score groups of `allocations`' nodes (score_nodes publishes a completed value)
    scores: dict[str, ScoreGroups]

    @staticmethod
    def empty(version: int, shared_versions: tuple[int, int]) -> SettledNodes:
        return SettledNodes(version, shared_versions, NO_ALLOCATIONS, NO_SHORTFALLS, {})

    def brought_to(self, snapshot: ClusterSnapshot) -> SettledNodes:
        """The answers that hold for `snapshot`: these less the nodes its change list names since; none when
        pools spanning nodes changed, the history does not reach back, or the snapshot is older."""
        shared = (snapshot.shared_alloc_version, snapshot.topology.shared_version)
        if self.version == snapshot.version and self.shared_versions == shared:
            return self
        changes = snapshot.changes_since(self.version) if self.version < snapshot.version else None
        if changes is None or self.shared_versions != shared:
            return SettledNodes.empty(snapshot.version, shared)
        changed = {change.key for change in changes if change.kind in NODE_CHANGE_KINDS}
        if not changed:
            return self._replace(version=snapshot.version)
        allocations, shortfalls = _without(self.allocations, changed), _without(self.shortfalls, changed)
        scores = {strategy: groups.without(changed) for strategy, groups in self.scores.items()}
        return SettledNodes(snapshot.version, shared, allocations, shortfalls, scores)

    def with_answers(self, found: Mapping[str, Allocation | Shortfall]) -> SettledNodes:
        if not found:
            return self
        with self.allocations.mutate() as allocating, self.shortfalls.mutate() as short:
            for name, answer in found.items():
                if type(answer) is Shortfall:
                    short[name] = answer
                    allocating.pop(name, None)
                else:
                    allocating[name] = answer  # type: ignore[assignment]  # the other kind of answer
                    short.pop(name, None)
            allocations, shortfalls = allocating.finish(), short.finish()
        scores = {strategy: groups.without(found) for strategy, groups in self.scores.items()}
        return self._replace(allocations=allocations, shortfalls=shortfalls, scores=scores)
