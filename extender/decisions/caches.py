"""The caches the decision functions read and fill, owned by whoever calls them (the service, a test, a bench).

Decisions keep no state of their own: like upstream's structured allocator, which receives its CEL cache and
its view of allocated devices from the scheduler plugin (k8s.io/dynamic-resource-allocation/structured,
NewAllocator), every memo a decision uses is one of these explicit objects, passed in. Each is a
`BoundedMemo` (extender/memo.py: one eviction rule, one locking rule). What invalidates each:

| memo | key (part / entry) | retired by |
| --- | --- | --- |
| programs | - / expression text | nothing: a text always compiles to the same program |
| verdicts | expression / Device object | a ResourceSlice event (its devices are new objects) |
| selectable | class signature / NodeDevices | a slice, node-label or DeviceTaintRule event (new NodeDevices) |
| free | class signature / NodeDevices | as above, and entries carry the node's allocation versions (an entry also |
| | | holds the commonest pod's allocation on the node, shared by every pod of that request shape) |
| driver_usage | - / NodeDevices | as above (state/indexes/driver_usage.py) |
| node_scores | strategy / devices taken (a tuple of one free-list entry) | slice or claim event on the node |
| allocation_scores | strategy / an allocation (of one free-list entry) | as node_scores |
| score_parts | - / (device fit, firstAvailable) | nothing: interning only |
| gated | Features / NodeDevices | as selectable; only filled when a gate that changes devices is off |
| request_shapes | - / request shape | nothing: a shape always stands for the same allocation (a cleared memo hands |
| | | out new tokens; answers under the old ones are never found again and leave with their entries) |
| settled | - / (class signature, request-shape token) | carries its snapshot version; a later snapshot drops |
| | | the nodes its change list names (claim, slice, Node events on them), or all (pools spanning nodes); |
| | | its score groups (ScoreGroups) follow it, less the nodes dropped |

The gates (decisions/devices/features.py) are one value for the service's life; the memos whose answers depend on
them are keyed by objects of the gated view (`gated` hands out one NodeDevices, with its own Device objects,
per original NodeDevices and Features), so a verdict or free list computed under one gate set is never read
under another, even when tests run several gate sets through one DecisionCaches.

Sizes were chosen against the 5000-node benchmark (bench/allocator_bench.py): verdicts for ~40k devices times a
dozen expressions, selectable and free lists for every node times a few dozen pod shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from extender.decisions.devices.cel import ActivationCache, ProgramCache, new_program_cache
from extender.memo import BoundedMemo
from extender.state.dra.devices import Device
from extender.state.indexes.driver_usage import DriverUsageIndex
from extender.state.inventory import NodeDevices
from extender.state.snapshot import NODE_CHANGE_KINDS, ClusterSnapshot

if TYPE_CHECKING:
    from extender.decisions.devices.allocator import Allocation, ChosenDevice
    from extender.decisions.devices.selection import Selectable, Verdict

MAX_VERDICTS = 500_000
MAX_NODE_LISTS = 200_000
MAX_REQUEST_SHAPES = 10_000
MAX_ALLOCATION_SCORES = 50_000  # 5000 nodes x 10 request shapes

# DeviceClass name, the class's selectors, the request's selectors: what a node's selectable devices depend on.
ClassSignature = tuple[str, tuple[str, ...], tuple[str, ...]]


class Shortfall(NamedTuple):
    """The commonest pod's answer on a node whose free list cannot give it its count, without the pod's claim
    name (pods of one shape share it; each pod's refusal names its own claim: PodAllocator._refusal)."""

    node: str
    selectable: int  # how many devices the selectors select on the node
    free: int  # how many of those are free


class ScoreGroups(NamedTuple):
    """The nodes of one SettledNodes grouped by their score parts (device fit, firstAvailable; interned), for
    one strategy: nodes with equal parts and equal quota headroom get the same score, so score_nodes
    answers a group at a time in C instead of a node at a time. Never changed: a new value replaces it."""

    by_parts: Mapping[tuple[float, float], frozenset[str]]
    scored: frozenset[str]  # every node in by_parts

    def without(self, names: set[str]) -> ScoreGroups:
        if self.scored.isdisjoint(names):
            return self
        kept = {parts: nodes - names for parts, nodes in self.by_parts.items()}
        return ScoreGroups({parts: nodes for parts, nodes in kept.items() if nodes}, self.scored - names)

    def with_nodes(self, found: Mapping[str, tuple[float, float]]) -> ScoreGroups:
        """These plus `found` (node -> its parts)."""
        added: dict[tuple[float, float], list[str]] = {}
        for node, parts in found.items():
            added.setdefault(parts, []).append(node)
        by_parts = dict(self.by_parts)
        for parts, nodes in added.items():
            by_parts[parts] = by_parts.get(parts, frozenset()).union(nodes)
        return ScoreGroups(by_parts, self.scored.union(found))


NO_SCORE_GROUPS = ScoreGroups({}, frozenset())


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
    allocations: Mapping[str, Allocation]
    shortfalls: Mapping[str, Shortfall]
    # strategy -> the score groups of `allocations`' nodes (score_nodes publishes a completed value)
    scores: dict[str, ScoreGroups]

    def brought_to(self, snapshot: ClusterSnapshot) -> SettledNodes:
        """The answers that hold for `snapshot`: these less the nodes its change list names since; none when
        pools spanning nodes changed, the history does not reach back, or the snapshot is older."""
        shared = (snapshot.shared_alloc_version, snapshot.topology.shared_version)
        if self.version == snapshot.version and self.shared_versions == shared:
            return self
        changes = snapshot.changes_since(self.version) if self.version < snapshot.version else None
        if changes is None or self.shared_versions != shared:
            return SettledNodes(snapshot.version, shared, {}, {}, {})
        changed = {change.key for change in changes if change.kind in NODE_CHANGE_KINDS}
        if not changed:
            return self._replace(version=snapshot.version)
        allocations, shortfalls = self.allocations, self.shortfalls
        if not changed.isdisjoint(allocations):
            allocations = dict(allocations)
            for name in changed:
                allocations.pop(name, None)
        if not changed.isdisjoint(shortfalls):
            shortfalls = dict(shortfalls)
            for name in changed:
                shortfalls.pop(name, None)
        scores = {part: groups.without(changed) for part, groups in self.scores.items()}
        return SettledNodes(snapshot.version, shared, allocations, shortfalls, scores)

    def with_answers(self, found: Mapping[str, Allocation | Shortfall]) -> SettledNodes:
        if not found:
            return self
        allocations, shortfalls = dict(self.allocations), dict(self.shortfalls)
        for name, answer in found.items():
            if type(answer) is Shortfall:
                shortfalls[name] = answer
                allocations.pop(name, None)
            else:
                allocations[name] = answer  # type: ignore[assignment]  # the other kind of answer
                shortfalls.pop(name, None)
        scores = {part: groups.without(set(found)) for part, groups in self.scores.items()}
        return self._replace(allocations=allocations, shortfalls=shortfalls, scores=scores)


class FreeSelectable(NamedTuple):
    free: tuple[Device, ...]  # selectable and not allocated, in upstream order
    selectable: int  # how many the selectors select at all (free or not)
    # Results derived from `free` (the devices a request of N takes), dropped with this entry.
    derived: dict[tuple[str, str, int], tuple[ChosenDevice, ...]]
    # Every free device serves a request without capacity requests (its requestPolicy allows the default).
    default_requests_fit: bool
    # The whole answer of the commonest pod (one claim, one ExactCount request) on this node, per request
    # shape (decisions/devices/allocator.py, PodAllocator._one_request): shared by every pod of that shape until the
    # node's allocations change, so a node costs those pods one lookup and no new objects (a full node: one
    # lookup and one refusal).
    allocations: dict[object, Allocation | Shortfall]


class FreeEntry(NamedTuple):
    local_version: int  # the node's allocation version the entry was computed at
    shared_version: int  # the version of allocations on pools spanning nodes
    result: FreeSelectable | None  # None: the plain answer does not apply (taints, counters, selector errors)


@dataclass(frozen=True, slots=True)
class DecisionCaches:
    programs: ProgramCache = field(default_factory=new_program_cache)
    activations: ActivationCache = field(default_factory=ActivationCache)
    verdicts: BoundedMemo[Device, Verdict] = field(default_factory=lambda: BoundedMemo("verdicts", MAX_VERDICTS))
    selectable: BoundedMemo[NodeDevices, Selectable | None] = field(
        default_factory=lambda: BoundedMemo("selectable", MAX_NODE_LISTS)
    )
    free: BoundedMemo[NodeDevices, FreeEntry] = field(default_factory=lambda: BoundedMemo("free", MAX_NODE_LISTS))
    driver_usage: DriverUsageIndex = field(default_factory=DriverUsageIndex)
    gated: BoundedMemo[NodeDevices, NodeDevices] = field(default_factory=lambda: BoundedMemo("gated", MAX_NODE_LISTS))
    node_scores: BoundedMemo[int, tuple[tuple[ChosenDevice, ...], tuple[float, float]]] = field(
        default_factory=lambda: BoundedMemo("node_scores", MAX_NODE_LISTS)
    )
    # The same parts by the allocation's identity (the commonest pod's allocation lives in a free-list entry and
    # is handed to every pod of its shape): one lookup per node in score_nodes. Allocations built afresh per pod
    # (several requests in one claim) also land here until the memo clears: hence its own, smaller bound.
    allocation_scores: BoundedMemo[int, tuple[Allocation, tuple[float, float]]] = field(
        default_factory=lambda: BoundedMemo("allocation_scores", MAX_ALLOCATION_SCORES)
    )
    # (device fit, firstAvailable) -> itself: one object per distinct pair, so that score_nodes can combine per
    # pair by identity (a handful of distinct pairs among thousands of nodes)
    score_parts: BoundedMemo[tuple[float, float], tuple[float, float]] = field(
        default_factory=lambda: BoundedMemo("score_parts", MAX_REQUEST_SHAPES)
    )
    # A request shape (what the commonest pod's allocation on a node depends on) -> a token standing for it in
    # every node's free-list entry: hashing the token costs nothing, hashing the shape (a claim spec) a lot.
    request_shapes: BoundedMemo[tuple[object, ...], object] = field(
        default_factory=lambda: BoundedMemo("request_shapes", MAX_REQUEST_SHAPES)
    )
    # (class signature, request-shape token) -> the answers of its nodes
    # (decisions/devices/allocator.py settle_remembered)
    settled: BoundedMemo[tuple[ClassSignature, object], SettledNodes] = field(
        default_factory=lambda: BoundedMemo("settled", MAX_REQUEST_SHAPES)
    )

    def request_shape(self, shape: tuple[object, ...]) -> object:
        """The token of a request shape (one per shape while the memo keeps it)."""
        token = self.request_shapes.get(shape)
        if token is None:
            token = self.request_shapes.put(shape, object())
        return token

    def score_part(self, parts: tuple[float, float]) -> tuple[float, float]:
        """The interned (device fit, firstAvailable) pair equal to `parts`."""
        interned = self.score_parts.get(parts)
        return interned if interned is not None else self.score_parts.put(parts, parts)

    def memos(self) -> tuple[BoundedMemo[Any, Any], ...]:
        """Every memo, for the metrics that show their sizes and clears."""
        return (
            self.programs,
            self.verdicts,
            self.selectable,
            self.free,
            self.driver_usage.memo,
            self.node_scores,
            self.allocation_scores,
            self.score_parts,
            self.gated,
            self.request_shapes,
            self.settled,
        )
