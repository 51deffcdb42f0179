"""A node's free-list entry: the devices a (class, selectors) could still take there, and what is derived
from them, valid while the node's allocation versions stay as they were (free_devices.py fills them).

Upstream's allocator walks a node's devices on every call (structured/internal/experimental
allocator_experimental.go, allocateOne); these entries keep the walk's outcome for the plain case (no taints,
counters or shared devices) per node until its devices or allocations change."""

from __future__ import annotations

from typing import NamedTuple

from extender.decisions.devices.results import Allocation, AllocationOutcome, ChosenDevice
from extender.decisions.devices.settled import Shortfall
from extender.state.dra.devices import Device


class FreeSelectable(NamedTuple):
    free: tuple[Device, ...]  # selectable and not allocated, in upstream order
    selectable: int  # how many the selectors select at all (free or not)
    # Results derived from `free` (the devices a request of N takes), dropped with this entry.
    derived: dict[tuple[str, str, int], tuple[ChosenDevice, ...]]
    # Every free device serves a request without capacity requests (its requestPolicy allows the default).
    default_requests_fit: bool
    # The whole answer of the commonest pod (one claim, one ExactCount request) on this node, per request
    # shape (decisions/devices/pod_allocator.py, PodAllocator._one_request): shared by every pod of that shape until the
    # node's allocations change, so a node costs those pods one lookup and no new objects (a full node: one
    # lookup and one refusal).
    allocations: dict[object, Allocation | Shortfall]


class FreeEntry(NamedTuple):
    local_version: int  # the node's allocation version the entry was computed at
    shared_version: int  # the version of allocations on pools spanning nodes
    result: FreeSelectable | None  # None: the plain answer does not apply (taints, counters, selector errors)


class SearchedEntry(NamedTuple):
    """The full search's answer for a one-claim pod shape on a node (decisions/devices/pod_allocator.py,
    PodAllocator._searched_outcome), under the same validity rule as FreeEntry: the node's devices (the memo's
    key) and its allocation versions. Partitionable devices, consumable capacity, constraints and firstAvailable
    all go to the search, which upstream runs per node on every call (allocator_experimental.go, Allocate); its
    answer changes only when what it reads changes."""

    local_version: int
    shared_version: int
    # Made for the shape's claim (pod_allocator.SHAPE_LABEL): an allocation is positional, as the shortcut's
    # (FreeSelectable.allocations); a refusal's texts are told of each pod's own claim when read.
    outcome: AllocationOutcome
