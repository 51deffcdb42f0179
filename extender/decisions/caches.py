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
| searched | search-shape token / NodeDevices | as free: the full search's allocation for a one-claim pod shape |
| | | (partitionable devices, consumable capacity, constraints, firstAvailable), with the node's versions |
| device_room | - / NodeDevices | as above (state/indexes/device_room.py) |
| device_layout | - / NodeDevices | a slice or node-label event (the units a node's devices form) |
| node_scores | strategy / devices taken (a tuple of one free-list entry) | slice or claim event on the node |
| allocation_scores | strategy / an allocation (of one free-list entry) | as node_scores |
| score_parts | - / (device fit, firstAvailable) | nothing: interning only |
| empty_allocations | - / node name | nothing: interning only (a pod that takes no device: the same allocation |
| | | on a node whatever the pod) |
| gated | Features / NodeDevices | as selectable; only filled when a gate that changes devices is off |
| request_shapes | - / request shape | nothing: a shape always stands for the same allocation (a cleared memo hands |
| | | out new tokens; answers under the old ones are never found again and leave with their entries) |
| settled | - / (class signature, request-shape token) | carries its snapshot version; a later snapshot drops |
| | | the nodes its change list names (claim, slice, Node events on them), or all (pools spanning nodes); |
| | | it holds the shortcut's answers and, where the full search serves the shape, the search's allocations; |
| | | its score groups (ScoreGroups) follow it, less the nodes dropped |

The gates (decisions/devices/features.py) are one value for the service's life; the memos whose answers depend on
them are keyed by objects of the gated view (`gated` hands out one NodeDevices, with its own Device objects,
per original NodeDevices and Features), so a verdict or free list computed under one gate set is never read
under another, even when tests run several gate sets through one DecisionCaches.

The sizes cover a 5000-node cluster: verdicts for ~40k devices times a dozen expressions, selectable and free
lists for every node times a few dozen pod shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from extender.decisions.devices.cel import ActivationCache, ProgramCache, new_program_cache
from extender.decisions.devices.free_entries import FreeEntry, SearchedEntry
from extender.decisions.devices.results import Allocation, ChosenDevice
from extender.decisions.devices.selector_verdicts import ClassSignature, Selectable, Verdict
from extender.decisions.devices.settled import SettledNodes
from extender.memo import BoundedMemo
from extender.state.dra.devices import Device
from extender.state.indexes.device_room import DeviceRoomIndex, FitParts
from extender.state.inventory import NodeDevices

# Sized for the largest clusters (65,000 nodes x 8 devices): a memo clears itself wholesale when full, so one
# smaller than the live set it serves would be cleared again every few pods and every filter would recompute.
MAX_VERDICTS = 2_000_000  # 65,000 nodes x 8 devices x ~4 class signatures
MAX_NODE_LISTS = 400_000  # 65,000 nodes x ~6 class signatures
MAX_REQUEST_SHAPES = 10_000
MAX_ALLOCATION_SCORES = 700_000  # 65,000 nodes x 10 request shapes


@dataclass(frozen=True, slots=True)
class DecisionCaches:
    programs: ProgramCache = field(default_factory=new_program_cache)
    activations: ActivationCache = field(default_factory=ActivationCache)
    verdicts: BoundedMemo[Device, Verdict] = field(default_factory=lambda: BoundedMemo("verdicts", MAX_VERDICTS))
    selectable: BoundedMemo[NodeDevices, Selectable | None] = field(
        default_factory=lambda: BoundedMemo("selectable", MAX_NODE_LISTS)
    )
    free: BoundedMemo[NodeDevices, FreeEntry] = field(default_factory=lambda: BoundedMemo("free", MAX_NODE_LISTS))
    searched: BoundedMemo[NodeDevices, SearchedEntry] = field(
        default_factory=lambda: BoundedMemo("searched", MAX_NODE_LISTS)
    )
    device_room: DeviceRoomIndex = field(default_factory=DeviceRoomIndex)
    gated: BoundedMemo[NodeDevices, NodeDevices] = field(default_factory=lambda: BoundedMemo("gated", MAX_NODE_LISTS))
    # Keyed by id() of the devices taken: hashing the tuple would hash every ChosenDevice (and its Device) per
    # node; the entry holds the tuple itself, so its id is not reused while the entry lives.
    node_scores: BoundedMemo[int, tuple[tuple[ChosenDevice, ...], tuple[FitParts, float]]] = field(
        default_factory=lambda: BoundedMemo("node_scores", MAX_NODE_LISTS)
    )
    # The same parts by the allocation's identity (the commonest pod's allocation lives in a free-list entry and
    # is handed to every pod of its shape): one lookup per node in score_nodes. Allocations built afresh per pod
    # (several requests in one claim) also land here until the memo clears: hence its own, smaller bound. Keyed
    # by id() for the reason node_scores is; the entry holds the allocation.
    allocation_scores: BoundedMemo[int, tuple[Allocation, tuple[FitParts, float]]] = field(
        default_factory=lambda: BoundedMemo("allocation_scores", MAX_ALLOCATION_SCORES)
    )
    # (device fit, firstAvailable) -> itself: one object per distinct pair, so that score_nodes can combine per
    # pair by identity (a handful of distinct pairs among thousands of nodes)
    score_parts: BoundedMemo[tuple[FitParts, float], tuple[FitParts, float]] = field(
        default_factory=lambda: BoundedMemo("score_parts", MAX_REQUEST_SHAPES)
    )
    # Node name -> the allocation of a pod that takes no device there (decisions/devices/feasibility.py
    # empty_allocations): copied per call in C rather than made per node, a thousand of them for each claim-less
    # pod at 1000 nodes. Bounded by the node names a cluster has had.
    empty_allocations: BoundedMemo[str, Allocation] = field(
        default_factory=lambda: BoundedMemo("empty_allocations", MAX_NODE_LISTS)
    )
    # A request shape (what the commonest pod's allocation on a node depends on) -> a token standing for it in
    # every node's free-list entry: hashing the token costs nothing, hashing the shape (a claim spec) a lot.
    request_shapes: BoundedMemo[tuple[object, ...], object] = field(
        default_factory=lambda: BoundedMemo("request_shapes", MAX_REQUEST_SHAPES)
    )
    # (class signature, request-shape token) -> the answers of its nodes
    # (decisions/devices/pod_allocator.py settle_remembered)
    settled: BoundedMemo[tuple[ClassSignature, object], SettledNodes] = field(
        default_factory=lambda: BoundedMemo("settled", MAX_REQUEST_SHAPES)
    )

    def request_shape(self, shape: tuple[object, ...]) -> object:
        """The token of a request shape (one per shape while the memo keeps it)."""
        token = self.request_shapes.get(shape)
        if token is None:
            token = self.request_shapes.put(shape, object())
        return token

    def score_part(self, parts: tuple[FitParts, float]) -> tuple[FitParts, float]:
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
            self.searched,
            self.device_room.memo,
            self.device_room.layouts,
            self.node_scores,
            self.allocation_scores,
            self.score_parts,
            self.empty_allocations,
            self.gated,
            self.request_shapes,
            self.settled,
        )
