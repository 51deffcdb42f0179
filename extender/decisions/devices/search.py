"""The depth-first search over one node's candidates: claims -> requests -> device slots, with backtracking.

Follows k8s.io/dynamic-resource-allocation structured/internal/experimental/allocator_experimental.go
(allocateOne, allocateDevice): devices in pool/slice/device order, firstAvailable subrequests strictly in
order, taints, shared counters (counters.py), constraints (constraints.py) and consumable capacity
(consumable_capacity.py) checked as a device is taken, at most 32 devices per claim. Where upstream returns an
error instead of "no solution", the search raises (FatalError, DeviceCheckError); a search that would run away
raises BudgetExhaustedError instead of hanging. The candidates come ready from candidates.py; allocator.py
runs the search and turns its end into an answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from extender.decisions.devices.candidates import Alternative, ClaimAlternatives
from extender.decisions.devices.constraints import ClaimConstraints
from extender.decisions.devices.consumable_capacity import CapacityFailure, SharedCapacity
from extender.decisions.devices.counters import SharedCounters
from extender.decisions.devices.features import Features
from extender.decisions.devices.results import (
    CATEGORY_CAPACITY,
    CATEGORY_CONSTRAINT,
    ChosenDevice,
    NodeQuestion,
    PendingClaim,
    new_chosen,
)
from extender.decisions.devices.selector_verdicts import SelectorFailure
from extender.decisions.devices.undo import Undo
from extender.state.capacity import CapacityError, request_fits
from extender.state.dra.claims import MAX_DEVICES_PER_ALLOCATION, DeviceRequest, DeviceSubRequest
from extender.state.dra.devices import BLOCKING_TAINT_EFFECTS, Device, DeviceKey


class BudgetExhaustedError(Exception):
    """The search tried more devices than its budget allows (upstream has no limit)."""


class _MaxSizeExceededError(Exception):
    """The devices still to pick for a request do not fit into the claim's 32 (upstream's
    errAllocationResultMaxSizeExceeded, structured/internal/incubating allocateOne). No other choice of
    devices for the requests before it helps, since every choice takes as many; so the search goes straight
    back to the nearest firstAvailable request, whose next subrequest may need fewer. It never crosses a
    claim boundary (a later claim's count does not depend on an earlier claim's devices)."""


class DeviceCheckError(Exception):
    """A selector or capacity check failing on a device the scan reaches: upstream's Allocate returns it as an
    error for the whole pod."""

    def __init__(self, failure: SelectorFailure | CapacityFailure, claim: str, request: str) -> None:
        super().__init__(failure.describe())
        self.failure = failure
        self.claim = claim
        self.request = request


class FatalError(Exception):
    """Upstream's allocator returns an error (not "no solution") for the whole pod."""

    def __init__(self, category: str, summary: str, claim: str, request: str) -> None:
        super().__init__(summary)
        self.category = category
        self.summary = summary
        self.claim = claim
        self.request = request


def tolerated(device: Device, sub: DeviceSubRequest) -> bool:
    """upstream taintPreventsAllocation, negated: every blocking taint of the device is tolerated."""
    for taint in device.taints:
        if taint.effect in BLOCKING_TAINT_EFFECTS and not any(tol.tolerates(taint) for tol in sub.tolerations):
            return False
    return True


class Search:
    """One search over a pod's pending claims on one node; `chosen` and `alternatives_chosen` hold the
    solution after `run` returns True."""

    def __init__(
        self,
        question: NodeQuestion,
        claims: Sequence[PendingClaim],
        alternatives: Sequence[ClaimAlternatives],
        budget: int,
        features: Features,
        capacity: SharedCapacity,
    ) -> None:
        self.claims = claims
        self.alternatives = alternatives
        self.budget = budget
        self.partitionable = features.partitionable_devices
        self.allocated = question.allocated
        self.capacity = capacity
        self.pools = question.devices.pools
        # Made when first needed: most nodes' searches take no device that consumes counters, and most claims
        # have no constraints (the search runs on every candidate node, so each object is a cost per node).
        self.counters: SharedCounters | None = None
        self.constraints: list[ClaimConstraints | None] = [None] * len(claims)
        self.taking: set[DeviceKey] = set()  # devices allowing multiple allocations are never in it
        self.claim_taking: list[set[DeviceKey]] = [set() for _ in claims]  # adminAccess only avoids these
        self.chosen: list[list[ChosenDevice]] = [[] for _ in claims]
        self.alternatives_chosen: list[dict[str, int]] = [{} for _ in claims]

    def run(self) -> bool:
        try:
            return self._request(0, 0)
        except _MaxSizeExceededError:
            # Unreachable after the candidates' pre-flight check (the smallest alternatives fit); no solution.
            return False

    def _request(self, claim_index: int, request_index: int) -> bool:
        """Upstream allocateOne at a request boundary: `exactly`, or each firstAvailable subrequest in order."""
        if claim_index == len(self.claims):
            return True
        requests = self.claims[claim_index].spec.requests
        if request_index == len(requests):
            try:
                return self._request(claim_index + 1, 0)
            except _MaxSizeExceededError:
                return False  # upstream: not propagated past the claim ("not a fatal error")
        request = requests[request_index]
        chosen = self.alternatives_chosen[claim_index]
        subrequests = request.exactly is None
        all_exceeded = True
        for alt_index, alternative in enumerate(self.alternatives[claim_index][request_index]):
            chosen[request.name] = alt_index
            try:
                if alternative.all_devices is not None:
                    found = self._take_all(claim_index, request, alternative, request_index)
                else:
                    found = self._pick(claim_index, request, alternative, request_index, 0, alternative.sub.count)
            except _MaxSizeExceededError:
                if not subrequests:
                    chosen.pop(request.name, None)
                    raise
                continue  # the next subrequest may need fewer devices
            if found:
                return True
            all_exceeded = False
        chosen.pop(request.name, None)
        if subrequests and all_exceeded:
            # Every subrequest overflowed: nothing the requests before this one choose can help.
            raise _MaxSizeExceededError
        return False

    def _pick(
        self,
        claim_index: int,
        request: DeviceRequest,
        alternative: Alternative,
        request_index: int,
        start: int,
        remaining: int,
    ) -> bool:
        if remaining == 0:
            return self._request(claim_index, request_index + 1)
        if remaining > MAX_DEVICES_PER_ALLOCATION - len(self.chosen[claim_index]):
            raise _MaxSizeExceededError
        candidates = alternative.candidates
        failures = alternative.failures
        busy = self.claim_taking[claim_index] if alternative.sub.admin_access else self.taking
        for position in range(start, len(candidates)):
            device = candidates[position]
            if device.key in busy:
                continue
            if failures and position in failures:
                # Upstream evaluates the selector now, and the error fails the whole pod.
                raise DeviceCheckError(failures[position], self.claims[claim_index].label, alternative.request_name)
            undo = self._take(claim_index, request, alternative, device)
            if undo is None:
                continue
            try:
                if self._pick(claim_index, request, alternative, request_index, position + 1, remaining - 1):
                    return True
            except _MaxSizeExceededError:
                undo()  # upstream: deallocate and return the error, trying no other device here
                raise
            undo()
        return False

    def _take_all(self, claim_index: int, request: DeviceRequest, alternative: Alternative, request_index: int) -> bool:
        devices = alternative.all_devices or []
        if not devices:
            return False
        if len(devices) > MAX_DEVICES_PER_ALLOCATION - len(self.chosen[claim_index]):
            raise _MaxSizeExceededError
        undos = []
        admin = alternative.sub.admin_access
        for device in devices:
            if admin:
                if device.key in self.claim_taking[claim_index]:
                    break
            elif (device.key in self.allocated and self.capacity.exclusively_held(device)) or device.key in self.taking:
                break
            undo = self._take(claim_index, request, alternative, device, must=True)
            if undo is None:
                break
            undos.append(undo)
        else:
            try:
                if self._request(claim_index, request_index + 1):
                    return True
            except _MaxSizeExceededError:
                for undo in reversed(undos):
                    undo()
                raise
        for undo in reversed(undos):
            undo()
        return False

    def _take(
        self,
        claim_index: int,
        request: DeviceRequest,
        alternative: Alternative,
        device: Device,
        *,
        must: bool = False,
    ) -> Undo | None:
        """Tentatively add a device (upstream allocateDevice: counters, then taints, then constraints).

        `must`: allocationMode All, which needs exactly this device; a constraint it violates is an error."""
        self.budget -= 1
        if self.budget < 0:
            raise BudgetExhaustedError
        sub = alternative.sub
        if not tolerated(device, sub):
            return None
        if device.consumes_counters and not self.partitionable:
            return None  # upstream allocateDevice: counters need DRAPartitionableDevices
        claim = self.claims[claim_index]
        undo_steps: list[Undo] = []
        multi = device.allow_multiple_allocations
        # A further share of a device already shared does not charge its counters again (upstream
        # skipCounterCheck): they were charged when the device was first allocated.
        if device.consumes_counters and not (multi and self.capacity.in_use(device.key)):
            undo = (self.counters or self._new_counters()).consume(device)
            if undo is None:
                return None
            undo_steps.append(undo)
        if claim.spec.constraints and not self._constraints_of(claim_index).add(
            request.name, alternative.request_name, device, undo_steps
        ):
            for step in reversed(undo_steps):
                step()
            if must:
                raise _constraint_violated(claim, alternative, device)
            return None
        consumed: Mapping[str, Fraction] | None = None
        capacity = self.capacity
        shared = capacity.shared
        if alternative.capacity_requests or (device.consumable and (multi or (shared and device.key in shared))):
            # What is left now, next to allocated shares and the shares this search adds (allocateDevice).
            try:
                consumed = request_fits(
                    alternative.capacity_requests,
                    device.consumable,
                    capacity.consumed(device.key, in_search=True),
                    capacity.fractional,
                )
            except CapacityError as error:  # the scan already checked the request; kept for safety
                raise FatalError(
                    CATEGORY_CAPACITY, f"{claim.label} request {alternative.request_name}: {error}", claim.label, ""
                ) from None
            if consumed is None:
                for step in reversed(undo_steps):
                    step()
                return None
        if multi:
            return self._take_share(claim_index, alternative, device, consumed or {}, undo_steps)
        chosen = self.chosen[claim_index]  # below the limit: _pick and _take_all checked before
        chosen.append(
            new_chosen((alternative.request_name, device, sub.device_class_name, sub.admin_access, False, ()))
        )
        key = device.key
        added_to_taking = key not in self.taking
        self.taking.add(key)
        claim_taking = self.claim_taking[claim_index]
        claim_taking.add(key)

        def undo_all() -> None:
            chosen.pop()
            claim_taking.discard(key)
            if added_to_taking:
                self.taking.discard(key)
            for step in reversed(undo_steps):
                step()

        return undo_all

    def _new_counters(self) -> SharedCounters:
        self.counters = SharedCounters(self.pools, self.allocated)
        return self.counters

    def _constraints_of(self, claim_index: int) -> ClaimConstraints:
        constraints = self.constraints[claim_index]
        if constraints is None:
            constraints = self.constraints[claim_index] = ClaimConstraints(self.claims[claim_index].spec.constraints)
        return constraints

    def _take_share(
        self,
        claim_index: int,
        alternative: Alternative,
        device: Device,
        consumed: Mapping[str, Fraction],
        undo_steps: list[Undo],
    ) -> Undo:
        """A share of a device that allows multiple allocations: it stays available to every other request and
        claim, so it is never marked as taken; its consumed capacity is added to what the search allocates."""
        key = device.key
        chosen = self.chosen[claim_index]
        sub = alternative.sub
        chosen.append(
            ChosenDevice(
                alternative.request_name,
                device,
                sub.device_class_name,
                sub.admin_access,
                True,
                tuple(sorted(consumed.items())),
            )
        )
        # SharedCapacity's in-search shares, kept here inline: this runs per device taken.
        shares, capacities = self.capacity.allocating_shares, self.capacity.allocating_capacity
        shares[key] = shares.get(key, 0) + 1
        adding = capacities.setdefault(key, {})
        for name, amount in consumed.items():
            adding[name] = adding.get(name, Fraction(0)) + amount

        def undo_share() -> None:
            chosen.pop()
            remaining = shares[key] - 1
            if remaining:
                shares[key] = remaining
                for name, amount in consumed.items():
                    adding[name] -= amount
            else:
                del shares[key]
                del capacities[key]
            for step in reversed(undo_steps):
                step()

        return undo_share


def _constraint_violated(claim: PendingClaim, alternative: Alternative, device: Device) -> FatalError:
    """An allocationMode All request whose device violates a constraint: upstream's allocateDevice with
    `must` returns this as an error for the pod."""
    return FatalError(
        CATEGORY_CONSTRAINT,
        f"{claim.label} request {alternative.request_name}: asks for all devices, but device "
        f"{'/'.join(device.key)} would violate a constraint of the claim",
        claim.label,
        alternative.request_name,
    )
