"""What the allocator is asked and what it answers: a pod's claims, one node's question, an allocation or the
reason there is none.

The answer mirrors upstream's allocation result (k8s.io/dynamic-resource-allocation structured/allocator.go,
Allocate returning one resourceapi.AllocationResult per claim, each device result naming its request, or
"request/subrequest" for firstAvailable); a refusal carries what upstream only logs: which claim and request,
how many devices match, how many are free, whether preemption on the node could ever help, and whether
upstream would have returned an error for the whole pod instead of "unschedulable".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from types import MappingProxyType
from typing import NamedTuple

from extender.state.capacity import SharedUse
from extender.state.core import Node
from extender.state.dra.claims import ClaimSpec, ResourceClaim
from extender.state.dra.device_class import DeviceClass
from extender.state.dra.devices import Device, DeviceKey
from extender.state.inventory import NodeDevices

# --- inputs ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingClaim:
    """A claim of the pod that still needs devices: an existing unallocated claim, or one a template would make."""

    label: str  # for people: "claim ns/name" or "claim gpu (from template single-gpu)"
    pod_claim_name: str
    claim_key: str  # "" when the claim does not exist yet
    spec: ClaimSpec


@dataclass(frozen=True, slots=True)
class AllocatedClaim:
    label: str
    claim: ResourceClaim


_NO_SHARES: Mapping[DeviceKey, SharedUse] = MappingProxyType({})


class NodeQuestion(NamedTuple):
    """Everything the allocator needs about one node; assembled by the caller from a cluster snapshot."""

    node: Node
    devices: NodeDevices
    allocated: Mapping[DeviceKey, int]
    classes: Mapping[str, DeviceClass]
    # Of `allocated`, the shares of devices that allow multiple allocations (ClusterSnapshot.shared_allocated).
    shared: Mapping[DeviceKey, SharedUse] = _NO_SHARES


# --- outputs --------------------------------------------------------------------------------------------------


# Results are NamedTuples: built for every candidate node of every pod, and a tuple is cheaper to build than a
# frozen dataclass.
class ChosenDevice(NamedTuple):
    request: str  # "gpu" or "gpu/older-gpu", as the claim's allocation result would name it
    device: Device
    device_class: str
    admin_access: bool
    # A share of a device that allows multiple allocations (the result gets a shareID), and what it consumes
    # of the device's capacities (name as written -> amount, sorted pairs).
    shared: bool = False
    consumed_capacity: tuple[tuple[str, Fraction], ...] = ()


class ClaimAllocation(NamedTuple):
    claim: PendingClaim
    devices: tuple[ChosenDevice, ...]
    chosen_alternatives: Mapping[str, int]  # request name -> index of the subrequest chosen (0 for `exactly`)


class Allocation(NamedTuple):
    node: str
    claims: tuple[ClaimAllocation, ...]
    # Devices taken per DeviceClass, sorted by class; None means "count them from `claims`".
    known_class_counts: tuple[tuple[str, int], ...] | None = None

    def class_counts(self) -> tuple[tuple[str, int], ...]:
        """Devices taken per DeviceClass, sorted; adminAccess devices are not taken from anyone."""
        if self.known_class_counts is not None:
            return self.known_class_counts
        counts: dict[str, int] = {}
        for claim in self.claims:
            for chosen in claim.devices:
                if not chosen.admin_access:
                    counts[chosen.device_class] = counts.get(chosen.device_class, 0) + 1
        return tuple(sorted(counts.items()))

    def devices_by_class(self) -> dict[str, int]:
        return dict(self.class_counts())

    @property
    def alternative_rank(self) -> int:
        """Sum of the chosen firstAvailable positions: 0 when every request got its first choice."""
        return sum(index for claim in self.claims for index in claim.chosen_alternatives.values())

    @property
    def device_count(self) -> int:
        return sum(len(claim.devices) for claim in self.claims)


# Hot-path constructors: tuple.__new__ without the NamedTuple's Python-level __new__.
new_chosen = partial(tuple.__new__, ChosenDevice)
new_claim_allocation = partial(tuple.__new__, ClaimAllocation)
new_allocation = partial(tuple.__new__, Allocation)

# Why a node cannot serve the pod. `unresolvable`: no amount of preemption on this node could help.
CATEGORY_NO_DEVICES = "no-matching-devices"
CATEGORY_TAKEN = "devices-in-use"
CATEGORY_CONSTRAINT = "constraint"
CATEGORY_SELECTOR = "selector-error"
CATEGORY_CLASS = "class-missing"
CATEGORY_CLAIM_NODE = "claim-on-other-node"
CATEGORY_POOL = "pool-not-ready"
CATEGORY_BUDGET = "search-budget"
CATEGORY_TOO_MANY = "too-many-devices"
CATEGORY_CLAIM_SPEC = "unsupported-claim"  # a field value this client does not know (a newer API's)
CATEGORY_CAPACITY = "capacity-request"  # a capacity request upstream refuses outright (not representable...)
CATEGORY_FEATURE_GATE = "feature-gate"  # the claim uses a field whose feature gate is off (config `features:`)


class NotAllocatable(NamedTuple):
    node: str
    category: str
    summary: str  # the same text on every node where the same thing fails: kube-scheduler aggregates it
    detail: str  # with this node's numbers, for diagnostics
    unresolvable: bool
    claim: str = ""
    request: str = ""
    needed: int = 0
    matching: int = 0
    free: int = 0
    # Upstream's Allocate would return an error here, not "unschedulable": kube-scheduler then fails the whole
    # pod (a CEL runtime error, allocationMode All over a pool being updated, more than 32 devices...).
    fatal: bool = False


AllocationOutcome = Allocation | NotAllocatable
new_not_allocatable = partial(tuple.__new__, NotAllocatable)


def not_allocatable(
    node: str,
    category: str,
    summary: str,
    detail: str = "",
    *,
    unresolvable: bool,
    claim: PendingClaim | None = None,
    request: str = "",
    needed: int = 0,
    matching: int = 0,
    free: int = 0,
    fatal: bool = False,
) -> NotAllocatable:
    """A refusal on `node`; `detail` defaults to the summary."""
    return NotAllocatable(
        node=node,
        category=category,
        summary=summary,
        detail=detail or summary,
        unresolvable=unresolvable,
        claim=claim.label if claim else "",
        request=request,
        needed=needed,
        matching=matching,
        free=free,
        fatal=fatal,
    )
