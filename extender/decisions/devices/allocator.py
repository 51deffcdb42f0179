"""Can a pod's pending ResourceClaims be allocated on one node? The structured allocator's rules, in Python.

Follows k8s.io/dynamic-resource-allocation/structured: depth-first search with backtracking over claims ->
requests -> device slots, devices in pool/slice/device order, firstAvailable subrequests strictly in order,
in-use devices skipped before selectors run, constraints, taints and shared counters checked as a device is
taken, at most 32 devices per claim, only devices of complete and valid pools (as the node sees them, see
state/inventory.node_view). Where upstream's Allocate returns an error instead of "no solution" (a selector
failing on a device the search reaches, allocationMode All over a pool being updated or against a constraint,
more than 32 devices) the NotAllocatable is `fatal`. tests/differential checks all this against the real
allocator. Unlike upstream it says *why not* (which claim and request, how many devices match, how many are
free, which constraint failed), and a search that would run away ends with a reason instead of a hang.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, KeysView, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import partial
from types import MappingProxyType
from typing import NamedTuple

from extender.decisions.caches import FreeSelectable, SettledNodes, Shortfall
from extender.decisions.devices.features import DEFAULT_FEATURES, Features, gated_devices
from extender.decisions.devices.free_devices import FreeView, free_selectable
from extender.decisions.devices.selection import DeviceMatcher, SelectorFailure
from extender.state.capacity import CapacityError, SharedUse, request_fits
from extender.state.core import Node
from extender.state.dra.claims import (
    ALLOCATION_MODE_ALL,
    ALLOCATION_MODE_EXACT,
    MAX_DEVICES_PER_ALLOCATION,
    ClaimSpec,
    DeviceConstraint,
    DeviceRequest,
    DeviceSubRequest,
    ResourceClaim,
)
from extender.state.dra.device_class import DeviceClass
from extender.state.dra.devices import BLOCKING_TAINT_EFFECTS, Attribute, Device, DeviceKey
from extender.state.inventory import NodeDevices, Pool, PoolKey, consumed_counters
from extender.state.quantity import format_quantity
from extender.state.snapshot import ClusterSnapshot

# Devices tried before the search gives up on one node. Upstream has no limit; a pathological claim (many
# matchAttribute requests over many devices) must cost a reason, not the scheduler's httpTimeout.
DEFAULT_SEARCH_BUDGET = 20_000
# Devices a capacity shortfall names in its detail (which device, what is left, who holds it).
MAX_CAPACITY_EXAMPLES = 3


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


# Results are NamedTuples: built for every candidate node of every pod, and tuple construction is several
# times cheaper than a frozen dataclass's.
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


# Hot-path constructors: tuple.__new__ without the NamedTuple's Python-level __new__ (about 3x cheaper).
_new_chosen = partial(tuple.__new__, ChosenDevice)
_new_claim_allocation = partial(tuple.__new__, ClaimAllocation)
_new_allocation = partial(tuple.__new__, Allocation)

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
_new_not_allocatable = partial(tuple.__new__, NotAllocatable)


# --- the search -----------------------------------------------------------------------------------------------


Undo = Callable[[], object]  # what it returns is ignored
# Who holds a device (claims, with the pods they are reserved for), for reasons only.
Holders = Callable[[DeviceKey], Sequence[str]]


class _BudgetExhaustedError(Exception):
    pass


class _MaxSizeExceededError(Exception):
    """The devices still to pick for a request do not fit into the claim's 32 (upstream's
    errAllocationResultMaxSizeExceeded, structured/internal/incubating allocateOne). No other choice of
    devices for the requests before it helps, since every choice takes as many; so the search goes straight
    back to the nearest firstAvailable request, whose next subrequest may need fewer. It never crosses a
    claim boundary (a later claim's count does not depend on an earlier claim's devices)."""


class _SelectorError(Exception):
    def __init__(self, failure: SelectorFailure | _CapacityFailure, claim: str, request: str) -> None:
        super().__init__(failure.describe())
        self.failure = failure
        self.claim = claim
        self.request = request


class _FatalError(Exception):
    """Upstream's allocator returns an error (not "no solution") for the whole pod."""

    def __init__(self, category: str, summary: str, claim: str, request: str) -> None:
        super().__init__(summary)
        self.category = category
        self.summary = summary
        self.claim = claim
        self.request = request


class _CapacityFailure(NamedTuple):
    """A capacity request that upstream's allocator turns into an error when its scan reaches the device
    (CmpRequestOverCapacity failing, structured/internal/incubating allocateOne): fatal, like a selector
    failure, and only when reached."""

    device: str
    message: str
    category: str = CATEGORY_CAPACITY

    def describe(self) -> str:
        return f"checking capacity for device {self.device}: {self.message}"


def _tolerated(device: Device, sub: DeviceSubRequest) -> bool:
    for taint in device.taints:
        if taint.effect in BLOCKING_TAINT_EFFECTS and not any(tol.tolerates(taint) for tol in sub.tolerations):
            return False
    return True


@dataclass(slots=True)
class _Alternative:
    """One subrequest's candidates on this node, scanned lazily in device order like upstream."""

    sub: DeviceSubRequest
    request_name: str  # as it appears in results
    device_class: DeviceClass | None
    # Free (or adminAccess) devices in order that the selectors select, or on which a selector fails: upstream
    # only evaluates selectors when its scan reaches a device that is not in use, so a failing device is an
    # error only if the search gets to it while no other request of the pod holds it.
    candidates: list[Device] = field(default_factory=list)
    # position in `candidates` -> why the device fails the pod when reached
    failures: dict[int, SelectorFailure | _CapacityFailure] = field(default_factory=dict)
    all_devices: list[Device] | None = None  # allocationMode All: every selectable device
    capacity_requests: dict[str, Fraction] = field(default_factory=dict)

    def selectable_candidates(self) -> list[Device]:
        if not self.failures:
            return self.candidates
        return [d for i, d in enumerate(self.candidates) if i not in self.failures]


class _Search:
    def __init__(
        self,
        question: NodeQuestion,
        claims: Sequence[PendingClaim],
        matcher: DeviceMatcher,
        budget: int,
        features: Features = DEFAULT_FEATURES,
        holders: Holders | None = None,
    ) -> None:
        self.question = question
        self.holders = holders
        self.claims = claims
        self.matcher = matcher
        self.budget = budget
        self.features = features
        self.fractional = features.fractional_capacity_range
        self.allocated = question.allocated
        # With DRAConsumableCapacity off a share held by another claim blocks the whole device (the plugin's
        # foreachAllocatedDevice calls the dedicated-device callback for it).
        self.shared: Mapping[DeviceKey, SharedUse] = question.shared if features.consumable_capacity else {}
        # Shares this search is adding (devices that allow multiple allocations are never in `taking`): how many
        # per device and the capacity they consume (upstream's allocatingCapacity).
        self.allocating_shares: dict[DeviceKey, int] = {}
        self.allocating_capacity: dict[DeviceKey, dict[str, Fraction]] = {}
        self.taking: set[DeviceKey] = set()
        self.claim_taking: list[set[DeviceKey]] = [set() for _ in claims]  # adminAccess only avoids these
        self.chosen: list[list[ChosenDevice]] = [[] for _ in claims]
        self.alternatives_chosen: list[dict[str, int]] = [{} for _ in claims]
        self.match_values: list[dict[int, tuple[Attribute, int]]] = [{} for _ in claims]
        self.distinct_values: list[dict[int, set[Attribute]]] = [{} for _ in claims]
        self.pools: dict[PoolKey, Pool] = {pool.key: pool for pool in question.devices.pools}
        self.counter_use: dict[tuple[PoolKey, str], dict[str, Fraction]] = {}
        self.counter_base: dict[PoolKey, dict[str, dict[str, Fraction]]] = {}
        self.overdrawn: dict[PoolKey, bool] = {}
        self.alternatives: list[list[list[_Alternative]]] = []
        self.usable = question.devices.usable

    # candidates ---------------------------------------------------------------------------------------------

    def prepare(self) -> NotAllocatable | None:
        """Candidates per subrequest. Like upstream, first every class must exist (PreFilter), then every
        allocationMode All request is resolved before the search starts, so that its errors (a pool being
        updated, a failing selector, more than 32 devices) fail the pod whatever the other requests do."""
        classes = self.question.classes
        for claim in self.claims:
            for request in claim.spec.requests:
                for sub in request.alternatives:
                    name = request.name if request.exactly is not None else f"{request.name}/{sub.name}"
                    if not sub.device_class_name:
                        # The plugin's PreFilter (dynamicresources.go validateDeviceClass): an error for the pod.
                        return self._fail(
                            CATEGORY_CLASS,
                            f"{claim.label} request {name}: no deviceClassName (unsupported request type)",
                            "",
                            unresolvable=True,
                            claim=claim,
                            request=name,
                            fatal=True,
                        )
                    if sub.device_class_name not in classes:
                        return self._fail(
                            CATEGORY_CLASS,
                            f"{claim.label} request {name}: DeviceClass {sub.device_class_name} does not exist",
                            "",
                            unresolvable=True,
                            claim=claim,
                            request=name,
                        )
        for claim in self.claims:
            per_request: list[list[_Alternative]] = []
            devices_at_least = 0
            for request in claim.spec.requests:
                alternatives: list[_Alternative] = []
                fewest: int | None = None
                for sub in request.alternatives:
                    name = request.name if request.exactly is not None else f"{request.name}/{sub.name}"
                    # With DRAConsumableCapacity off only the stable allocator gets here (gate_failure): it does
                    # not read capacity requests.
                    requests = dict(sub.capacity_requests) if self.features.consumable_capacity else {}
                    alternative = _Alternative(sub, name, classes[sub.device_class_name], capacity_requests=requests)
                    if sub.allocation_mode not in (ALLOCATION_MODE_ALL, ALLOCATION_MODE_EXACT):
                        return self._fail(
                            CATEGORY_CLAIM_SPEC,
                            f"{claim.label} request {name}: unsupported allocationMode {sub.allocation_mode}",
                            "",
                            unresolvable=True,
                            claim=claim,
                            request=name,
                            fatal=True,
                        )
                    if sub.allocation_mode == ALLOCATION_MODE_ALL:
                        failure = self._collect_all(claim, alternative)
                        if failure is not None:
                            return failure
                        needs = len(alternative.all_devices or ())
                    else:
                        # Candidates only for subrequests that can fit: one over the limit is skipped in the
                        # search before it looks at a device.
                        if sub.count <= MAX_DEVICES_PER_ALLOCATION:
                            self._collect_free(alternative)
                        needs = sub.count
                    fewest = needs if fewest is None else min(fewest, needs)
                    alternatives.append(alternative)
                per_request.append(alternatives)
                assert fewest is not None  # the parser guarantees one alternative at least
                # Upstream's pre-flight check (incubating Allocate): a request is worth at least its smallest
                # alternative; compared, not added, so that a huge count cannot overflow.
                if fewest > MAX_DEVICES_PER_ALLOCATION - devices_at_least:
                    return self._fail(
                        CATEGORY_TOO_MANY,
                        f"{claim.label} request {request.name}: adding {fewest} devices exceeds the claim limit "
                        f"of {MAX_DEVICES_PER_ALLOCATION}, with {devices_at_least} already accounted for",
                        "",
                        unresolvable=True,
                        claim=claim,
                        request=request.name,
                        fatal=True,
                    )
                devices_at_least += fewest
            for index, constraint in enumerate(claim.spec.constraints):
                if not constraint.match_attribute and not constraint.distinct_attribute:
                    return self._fail(
                        CATEGORY_CLAIM_SPEC,
                        f"{claim.label} constraint #{index}: neither matchAttribute nor distinctAttribute "
                        "(unsupported constraint type)",
                        "",
                        unresolvable=True,
                        claim=claim,
                        fatal=True,
                    )
            self.alternatives.append(per_request)
        return None

    def _selectable(self, alternative: _Alternative, device: Device) -> bool | SelectorFailure:
        assert alternative.device_class is not None
        verdict = self.matcher.class_verdict(alternative.device_class, device)
        if verdict is True and alternative.sub.selectors:
            verdict = self.matcher.all_verdict(alternative.sub.selectors, device)
        return verdict

    def _exclusively_held(self, device: Device) -> bool:
        """Held by another claim's result without a shareID (upstream: in AllocatedDevices): nobody else may
        use it, even if it allows multiple allocations."""
        held = self.allocated.get(device.key, 0)
        if not held:
            return False
        use = self.shared.get(device.key)
        return held > (use.shares if use is not None else 0)

    def _held_capacity(self, key: DeviceKey, *, in_search: bool) -> Mapping[str, Fraction]:
        """Capacity of the device that allocated shares (and, `in_search`, the shares this search adds) consume."""
        use = self.shared.get(key)
        adding = self.allocating_capacity.get(key) if in_search else None
        if not adding:
            return use.consumed if use is not None else {}
        if use is None:
            return adding
        total = dict(use.consumed)
        for name, amount in adding.items():
            total[name] = total.get(name, Fraction(0)) + amount
        return total

    def _capacity_verdict(self, alternative: _Alternative, device: Device) -> bool | _CapacityFailure:
        """CmpRequestOverCapacity at scan time, against what allocated shares already consume."""
        requests = alternative.capacity_requests
        if not requests and device.default_request_fits and device.key not in self.shared:
            return True  # the commonest case: nothing asked, nothing shared, the default consumption is valid
        try:
            held = self._held_capacity(device.key, in_search=False)
            return request_fits(requests, device.consumable, held, self.fractional) is not None
        except CapacityError as error:
            return _CapacityFailure("/".join(device.key), str(error))

    def _collect_free(self, alternative: _Alternative) -> None:
        admin = alternative.sub.admin_access
        allocated = self.allocated
        candidates = alternative.candidates
        shared = self.shared
        requests = alternative.capacity_requests
        for device in self.usable:
            if not admin and device.key in allocated and (not shared or self._exclusively_held(device)):
                continue  # upstream checks "in use" first: selectors never run on taken devices
            verdict = self._selectable(alternative, device)
            if verdict is True:
                if requests or not device.default_request_fits or (shared and device.key in shared):
                    capacity = self._capacity_verdict(alternative, device)
                    if capacity is not True:
                        if capacity is not False:
                            alternative.failures[len(candidates)] = capacity
                            candidates.append(device)
                        continue
                candidates.append(device)
            elif verdict is not False:
                alternative.failures[len(candidates)] = verdict
                candidates.append(device)

    def _collect_all(self, claim: PendingClaim, alternative: _Alternative) -> NotAllocatable | None:
        """Every selectable device, in use or not; upstream refuses outright when any pool is not ready."""
        for pool in self.question.devices.pools:
            if pool.incomplete or pool.invalid_reason:
                state = f"is invalid: {pool.invalid_reason}" if pool.invalid_reason else "is being updated"
                return self._fail(
                    CATEGORY_POOL,
                    f"{claim.label} request {alternative.request_name}: asks for all devices, but resource pool "
                    f"{pool.driver}/{pool.name} {state}",
                    "",
                    unresolvable=False,
                    claim=claim,
                    request=alternative.request_name,
                    fatal=True,
                )
        selectable: list[Device] = []
        for device in self.usable:
            verdict = self._selectable(alternative, device)
            if verdict is True:
                # Static capacity only (upstream validateDeviceRequest): a device that could never serve the
                # request is not part of "all"; one whose capacity others use up stays, so All then fails.
                try:
                    fits = (
                        request_fits(alternative.capacity_requests, device.consumable, {}, self.fractional) is not None
                    )
                except CapacityError as error:
                    return self._fail(
                        CATEGORY_CAPACITY,
                        f"{claim.label} request {alternative.request_name}: checking capacity for device "
                        f"{device.name}: {error}",
                        "",
                        unresolvable=True,
                        claim=claim,
                        request=alternative.request_name,
                        fatal=True,
                    )
                if fits:
                    selectable.append(device)
            elif verdict is not False:
                return self._fail(
                    CATEGORY_SELECTOR,
                    f"{claim.label} request {alternative.request_name}: {verdict.describe()}",
                    "",
                    unresolvable=True,
                    claim=claim,
                    request=alternative.request_name,
                    fatal=True,
                )
        alternative.all_devices = selectable
        return None

    def can_still_fail(self) -> bool:
        """Whether the search may end in an error: a failing selector among the candidates, or an All request
        under a constraint (a device it must take may violate the constraint)."""
        for claim, per_request in zip(self.claims, self.alternatives, strict=True):
            for alternatives in per_request:
                for alternative in alternatives:
                    if alternative.failures or (alternative.all_devices and claim.spec.constraints):
                        return True
        return False

    # search -------------------------------------------------------------------------------------------------

    def run(self) -> bool:
        try:
            return self._request(0, 0)
        except _MaxSizeExceededError:
            # Unreachable after prepare()'s pre-flight check (the smallest alternatives fit); no solution.
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
        alternative: _Alternative,
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
                raise _SelectorError(failures[position], self.claims[claim_index].label, alternative.request_name)
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

    def _take_all(
        self, claim_index: int, request: DeviceRequest, alternative: _Alternative, request_index: int
    ) -> bool:
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
            elif (device.key in self.allocated and self._exclusively_held(device)) or device.key in self.taking:
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
        alternative: _Alternative,
        device: Device,
        *,
        must: bool = False,
    ) -> Undo | None:
        """Tentatively add a device (upstream allocateDevice: counters, then taints, then constraints).

        `must`: allocationMode All, which needs exactly this device; a constraint it violates is an error."""
        self.budget -= 1
        if self.budget < 0:
            raise _BudgetExhaustedError
        sub = alternative.sub
        if not _tolerated(device, sub):
            return None
        if device.consumes_counters and not self.features.partitionable_devices:
            return None  # upstream allocateDevice: counters need DRAPartitionableDevices
        chosen = self.chosen[claim_index]  # below the limit: _pick and _take_all checked before
        claim = self.claims[claim_index]
        undo_steps = []
        multi = device.allow_multiple_allocations
        # A further share of a device already shared does not charge its counters again (upstream
        # skipCounterCheck): they were charged when the device was first allocated.
        if device.consumes_counters and not (multi and self._capacity_in_use(device.key)):
            undo = self._consume_counters(device)
            if undo is None:
                return None
            undo_steps.append(undo)
        for constraint_index, constraint in enumerate(claim.spec.constraints):
            if not _constraint_applies(constraint, request.name, alternative.request_name):
                continue
            undo = self._apply_constraint(claim_index, constraint_index, constraint, device)
            if undo is None:
                for step in reversed(undo_steps):
                    step()
                if must:
                    raise _FatalError(
                        CATEGORY_CONSTRAINT,
                        f"{claim.label} request {alternative.request_name}: asks for all devices, but device "
                        f"{'/'.join(device.key)} would violate a constraint of the claim",
                        claim.label,
                        alternative.request_name,
                    )
                return None
            undo_steps.append(undo)
        consumed: dict[str, Fraction] | None = None
        shared = self.shared
        if alternative.capacity_requests or (device.consumable and (multi or (shared and device.key in shared))):
            # What is left now, next to allocated shares and the shares this search adds (allocateDevice).
            try:
                consumed = request_fits(
                    alternative.capacity_requests,
                    device.consumable,
                    self._held_capacity(device.key, in_search=True),
                    self.fractional,
                )
            except CapacityError as error:  # the scan already checked the request; kept for safety
                raise _FatalError(
                    CATEGORY_CAPACITY, f"{claim.label} request {alternative.request_name}: {error}", claim.label, ""
                ) from None
            if consumed is None:
                for step in reversed(undo_steps):
                    step()
                return None
        if multi:
            return self._take_share(claim_index, alternative, device, consumed or {}, undo_steps)
        chosen.append(
            _new_chosen((alternative.request_name, device, sub.device_class_name, sub.admin_access, False, ()))
        )
        added_to_taking = device.key not in self.taking
        self.taking.add(device.key)
        claim_taking = self.claim_taking[claim_index]
        claim_taking.add(device.key)

        def undo_all() -> None:
            chosen.pop()
            claim_taking.discard(device.key)
            if added_to_taking:
                self.taking.discard(device.key)
            for step in reversed(undo_steps):
                step()

        return undo_all

    def _capacity_in_use(self, key: DeviceKey) -> bool:
        """upstream deviceCapacityInUse: allocated shares, or shares this search adds."""
        return key in self.shared or self.allocating_shares.get(key, 0) > 0

    def _take_share(
        self,
        claim_index: int,
        alternative: _Alternative,
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
        self.allocating_shares[key] = self.allocating_shares.get(key, 0) + 1
        adding = self.allocating_capacity.setdefault(key, {})
        for name, amount in consumed.items():
            adding[name] = adding.get(name, Fraction(0)) + amount

        def undo_share() -> None:
            chosen.pop()
            remaining = self.allocating_shares[key] - 1
            if remaining:
                self.allocating_shares[key] = remaining
                for name, amount in consumed.items():
                    adding[name] -= amount
            else:
                del self.allocating_shares[key]
                del self.allocating_capacity[key]
            for step in reversed(undo_steps):
                step()

        return undo_share

    def _apply_constraint(
        self, claim_index: int, constraint_index: int, constraint: DeviceConstraint, device: Device
    ) -> Undo | None:
        if constraint.match_attribute:
            value = device.attributes.get(constraint.match_attribute)
            if value is None:
                return None
            held = self.match_values[claim_index].get(constraint_index)
            if held is None:
                self.match_values[claim_index][constraint_index] = (value, 1)
                return lambda: self.match_values[claim_index].pop(constraint_index, None)
            if held[0] != value:
                return None
            self.match_values[claim_index][constraint_index] = (held[0], held[1] + 1)

            def release() -> None:
                current = self.match_values[claim_index][constraint_index]
                if current[1] <= 1:
                    del self.match_values[claim_index][constraint_index]
                else:
                    self.match_values[claim_index][constraint_index] = (current[0], current[1] - 1)

            return release
        value = device.attributes.get(constraint.distinct_attribute)
        if value is None:
            return None
        seen = self.distinct_values[claim_index].setdefault(constraint_index, set())
        if value in seen:
            return None
        seen.add(value)
        return lambda: seen.discard(value)

    def _consume_counters(self, device: Device) -> Undo | None:
        pool_key = (device.driver, device.pool)
        pool = self.pools.get(pool_key)
        if pool is None:
            return None
        base = self.counter_base.get(pool_key)
        if base is None:
            base = consumed_counters(pool, self.allocated)
            self.counter_base[pool_key] = base
            # Upstream re-checks every counter of the pool after each device: one that allocated devices already
            # overdraw blocks every device of the pool that consumes counters.
            self.overdrawn[pool_key] = any(
                used > pool.shared_counters.get(counter_set, {}).get(counter, used)
                for counter_set, counters in base.items()
                for counter, used in counters.items()
            )
        if self.overdrawn[pool_key]:
            return None
        added: list[tuple[dict[str, Fraction], str, Fraction]] = []
        for consumption in device.consumes_counters:
            available = pool.shared_counters.get(consumption.counter_set)
            if available is None:
                return None
            in_search = self.counter_use.setdefault((pool_key, consumption.counter_set), {})
            already = base.get(consumption.counter_set, {})
            for counter, value in consumption.counters.items():
                limit = available.get(counter)
                if limit is None or already.get(counter, 0) + in_search.get(counter, 0) + value > limit:
                    for bucket, name, amount in added:
                        bucket[name] -= amount
                    return None
                in_search[counter] = in_search.get(counter, Fraction(0)) + value
                added.append((in_search, counter, value))

        def release() -> None:
            for bucket, name, amount in added:
                bucket[name] -= amount

        return release

    # reasons ------------------------------------------------------------------------------------------------

    def _fail(
        self,
        category: str,
        summary: str,
        detail: str,
        *,
        unresolvable: bool,
        claim: PendingClaim | None = None,
        request: str = "",
        needed: int = 0,
        matching: int = 0,
        free: int = 0,
        fatal: bool = False,
    ) -> NotAllocatable:
        return NotAllocatable(
            node=self.question.node.name,
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

    def explain_failure(self) -> NotAllocatable:
        """After a failed search: the first request that cannot be met even on its own, else a joint reason;
        with the node's unusable devices that some request would have matched."""
        reason = self._explain_failure()
        every = [alternative for per_claim in self.alternatives for request in per_claim for alternative in request]
        return self._note_unusable(every, reason)

    def _explain_failure(self) -> NotAllocatable:
        for pool in self.question.devices.pools:
            if pool.invalid_reason:
                # Upstream's reason whenever the node has an invalid pool (whose devices it never uses).
                return self._fail(
                    CATEGORY_POOL,
                    f"resource pool {pool.driver}/{pool.name} is invalid: {pool.invalid_reason}",
                    "",
                    unresolvable=True,
                )
        for claim_index, claim in enumerate(self.claims):
            for request_index in range(len(claim.spec.requests)):
                alternatives = self.alternatives[claim_index][request_index]
                shortfalls = [self._shortfall(claim, alt) for alt in alternatives]
                if all(s is not None for s in shortfalls):
                    # Report the alternative that came closest (most free devices), unresolvable only if all are.
                    unresolvable = all(s.unresolvable for s in shortfalls if s is not None)
                    best = max(shortfalls, key=lambda s: (not s.unresolvable, s.free))  # type: ignore[union-attr]
                    assert best is not None
                    if best.unresolvable != unresolvable:
                        return _replace_unresolvable(best, unresolvable)
                    return best
        for claim in self.claims:
            for constraint in claim.spec.constraints:
                kind = "matchAttribute" if constraint.match_attribute else "distinctAttribute"
                attribute = constraint.match_attribute or constraint.distinct_attribute
                return self._fail(
                    CATEGORY_CONSTRAINT,
                    f"{claim.label}: no set of free devices satisfies {kind} {attribute}",
                    "",
                    unresolvable=False,
                    claim=claim,
                )
        if self.features.partitionable_devices and any(device.consumes_counters for device in self.usable):
            return self._fail(
                CATEGORY_TAKEN,
                "shared counters of the partitionable devices are exhausted",
                "",
                unresolvable=False,
            )
        labels = ", ".join(claim.label for claim in self.claims)
        never = self._never_enough_together()
        if never is not None:
            selectable, needed = never
            return self._fail(
                CATEGORY_NO_DEVICES,
                f"not enough devices on the node for all requests of {labels} together",
                f"the requests of {labels} need {needed} distinct devices together; {selectable} on this node "
                f"match any of them",
                unresolvable=True,
            )
        return self._fail(
            CATEGORY_TAKEN,
            f"not enough distinct free devices for all requests of {labels} together",
            "",
            unresolvable=False,
        )

    def _never_enough_together(self) -> tuple[int, int] | None:
        """(devices any request selects, devices the requests need) when even an empty node could not hold
        them: only ExactCount requests without alternatives, more devices needed than the node has for any of
        them. No amount of preemption helps then, so the reason is unresolvable (kube-scheduler stops retrying
        the node)."""
        needed = 0
        selectable: set[DeviceKey] = set()
        for claim_alternatives in self.alternatives:
            for alternatives in claim_alternatives:
                if len(alternatives) != 1 or alternatives[0].all_devices is not None:
                    return None
                alternative = alternatives[0]
                if alternative.sub.admin_access:
                    return None
                needed += alternative.sub.count
                for device in self.usable:
                    if self._selectable(alternative, device) is True:
                        if device.allow_multiple_allocations:
                            return None  # one shared device can serve several requests
                        selectable.add(device.key)
        return (len(selectable), needed) if len(selectable) < needed else None

    def _note_unusable(self, alternatives: Sequence[_Alternative], reason: NotAllocatable) -> NotAllocatable:
        """The reason with the node's unusable devices that the request would have matched (a malformed
        requestPolicy: Device.unusable_reason names slice, device and field), so that the person fixing the
        slice learns why a matching device was not counted. Other nodes' reasons are untouched."""
        notes: list[str] = []
        for device in self.question.devices.devices:
            if device.unusable_reason and any(
                alternative.device_class is not None and self._selectable(alternative, device) is True
                for alternative in alternatives
            ):
                notes.append(device.unusable_reason)
        if not notes:
            return reason
        shown = "; ".join(notes[:3]) + (f"; and {len(notes) - 3} more" if len(notes) > 3 else "")
        suffix = f" ({len(notes)} matching device(s) unusable: {shown})"
        return reason._replace(summary=reason.summary + suffix, detail=reason.detail + suffix)

    def _shortfall(self, claim: PendingClaim, alternative: _Alternative) -> NotAllocatable | None:
        """Why this subrequest alone cannot be met on this node, or None if it could be."""
        sub = alternative.sub
        selectable = self._count_selectable(alternative)
        usable = [d for d in alternative.selectable_candidates() if _tolerated(d, sub)]
        gated_out = 0
        if not self.features.partitionable_devices:
            allowed = [d for d in usable if not d.consumes_counters]  # never allocatable with the gate off
            gated_out, usable = len(usable) - len(allowed), allowed
        class_part = f"class {sub.device_class_name}" + (" with its selectors" if sub.selectors else "")
        name = alternative.request_name
        if gated_out and alternative.all_devices is None and len(usable) < sub.count:
            return self._fail(
                CATEGORY_FEATURE_GATE,
                f"{claim.label} request {name}: the devices of {class_part} consume shared counters, which need "
                "the DRAPartitionableDevices feature (disabled)",
                f"{claim.label} request {name}: needs {sub.count} device(s) of {class_part}; {gated_out} match but "
                f"consume shared counters (DRAPartitionableDevices is off), {len(usable)} others are free",
                unresolvable=True,
                claim=claim,
                request=name,
                needed=sub.count,
                matching=selectable,
                free=len(usable),
            )
        if alternative.all_devices is not None:
            in_use = [
                d
                for d in alternative.all_devices
                if not sub.admin_access and d.key in self.allocated and self._exclusively_held(d)
            ]
            if not alternative.all_devices:
                return self._fail(
                    CATEGORY_NO_DEVICES,
                    f"{claim.label} request {name}: asks for all devices of {class_part}, none on the node",
                    "",
                    unresolvable=True,
                    claim=claim,
                    request=name,
                )
            if in_use:
                total = len(alternative.all_devices)
                return self._fail(
                    CATEGORY_TAKEN,
                    f"{claim.label} request {name}: asks for all devices of {class_part}, some are in use",
                    f"{claim.label} request {name}: asks for all {total} devices of {class_part}; "
                    f"{len(in_use)} are in use",
                    unresolvable=False,
                    claim=claim,
                    request=name,
                    needed=total,
                    matching=total,
                    free=total - len(in_use),
                )
            return None
        if len(usable) >= sub.count:
            return None
        if alternative.capacity_requests or self.shared:
            capable = self._count_capable(alternative)
            if capable < selectable and capable < sub.count:
                # Devices exist, but their capacity or requestPolicy can never serve this request: no
                # preemption helps (a request outside a device's policy lands here).
                asked = ", ".join(f"{k}={_quantity_text(v)}" for k, v in sorted(alternative.capacity_requests.items()))
                return self._fail(
                    CATEGORY_NO_DEVICES,
                    f"{claim.label} request {name}: no device of {class_part} on the node can serve its capacity "
                    "request",
                    f"{claim.label} request {name}: needs {sub.count} device(s) of {class_part} serving "
                    f"{asked or 'the default capacity'}; {selectable} match on this node, {capable} of them can "
                    "(capacity or requestPolicy)",
                    unresolvable=True,
                    claim=claim,
                    request=name,
                    needed=sub.count,
                    matching=capable,
                    free=len(usable),
                )
            if capable >= sub.count and len(usable) < sub.count:
                return self._fail(
                    CATEGORY_TAKEN,
                    f"{claim.label} request {name}: not enough capacity left on the devices of {class_part}",
                    f"{claim.label} request {name}: needs {sub.count} device(s) of {class_part}; {capable} could "
                    f"serve it, {len(usable)} are free with enough capacity left"
                    + self._capacity_left(alternative, usable),
                    unresolvable=False,
                    claim=claim,
                    request=name,
                    needed=sub.count,
                    matching=capable,
                    free=len(usable),
                )
        return count_shortfall(self.question.node.name, claim.label, name, sub, selectable, len(usable))

    def _capacity_left(self, alternative: _Alternative, usable: Sequence[Device]) -> str:
        """Which devices could serve the request but have too little left, how much each has left of what the
        request asks (or of every capacity, for a request that asks for none) and who holds it (reasons only)."""
        taken = {d.key for d in usable}
        parts: list[str] = []
        blocked = 0
        for device in self.usable:
            if (
                device.key in taken
                or device.key not in self.shared
                or self._selectable(alternative, device) is not True
            ):
                continue
            try:
                if request_fits(alternative.capacity_requests, device.consumable, {}, self.fractional) is None:
                    continue
            except CapacityError:
                continue
            blocked += 1
            if len(parts) == MAX_CAPACITY_EXAMPLES:
                continue
            held = self._held_capacity(device.key, in_search=False)
            names = sorted(alternative.capacity_requests) or sorted(device.consumable)
            left = ", ".join(
                f"{n} {format_quantity(device.consumable[n].value - held.get(n, Fraction(0)))} of "
                f"{format_quantity(device.consumable[n].value)} left"
                for n in names
                if n in device.consumable
            )
            holders = list(self.holders(device.key)) if self.holders is not None else []
            held_by = f", held by {', '.join(holders)}" if holders else ""
            parts.append(f"{'/'.join(device.key)}: {left or 'nothing left'}{held_by}")
        if not parts:
            return ""
        more = f"; and {blocked - len(parts)} more" if blocked > len(parts) else ""
        return "; " + "; ".join(parts) + more

    def _count_capable(self, alternative: _Alternative) -> int:
        """Devices the subrequest selects whose capacity could serve it if nobody shared them (reasons only)."""
        count = 0
        for device in self.usable:
            if self._selectable(alternative, device) is not True:
                continue
            try:
                if request_fits(alternative.capacity_requests, device.consumable, {}, self.fractional) is not None:
                    count += 1
            except CapacityError:
                pass
        return count

    def _count_selectable(self, alternative: _Alternative) -> int:
        """Devices the subrequest selects on this node, free or not (only computed for reasons)."""
        if alternative.all_devices is not None:
            return len(alternative.all_devices)
        count = 0
        for device in self.usable:
            if self._selectable(alternative, device) is True:
                count += 1
        return count


def _quantity_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else str(float(value))


def count_shortfall(
    node: str, claim_label: str, request_name: str, sub: DeviceSubRequest, selectable: int, usable: int
) -> NotAllocatable:
    """An ExactCount request that cannot get `count` devices: none exist (unresolvable) or too few are free."""
    needed = sub.count
    class_part = f"class {sub.device_class_name}" + (" with its selectors" if sub.selectors else "")
    plural = "s" if needed != 1 else ""
    if selectable < needed:
        what = "no device" if selectable == 0 else f"only {selectable} device{'s' if selectable != 1 else ''}"
        return NotAllocatable(
            node,
            CATEGORY_NO_DEVICES,
            f"{claim_label} request {request_name}: not enough devices of {class_part} on the node",
            f"{claim_label} request {request_name}: needs {needed} device{plural} of {class_part}; "
            f"{what} on this node match",
            True,
            claim_label,
            request_name,
            needed,
            selectable,
            usable,
        )
    return NotAllocatable(
        node,
        CATEGORY_TAKEN,
        f"{claim_label} request {request_name}: not enough free devices of {class_part}",
        f"{claim_label} request {request_name}: needs {needed} device{plural} of {class_part}; "
        f"{selectable} match on this node, {usable} free",
        False,
        claim_label,
        request_name,
        needed,
        selectable,
        usable,
    )


def _replace_unresolvable(reason: NotAllocatable, unresolvable: bool) -> NotAllocatable:
    return reason._replace(unresolvable=unresolvable)


def _constraint_applies(constraint: DeviceConstraint, request_name: str, result_name: str) -> bool:
    if not constraint.requests:
        return True
    return request_name in constraint.requests or result_name in constraint.requests


def check_allocated_claims(node: Node, claims: Sequence[AllocatedClaim]) -> NotAllocatable | None:
    """An allocated claim takes nothing new, but pins the pod to the nodes its allocation reaches."""
    for allocated in claims:
        allocation = allocated.claim.allocation
        if allocation is None or allocation.node_selector is None:
            continue
        if not allocation.node_selector.matches(node):
            return NotAllocatable(
                node=node.name,
                category=CATEGORY_CLAIM_NODE,
                summary=f"{allocated.label} is already allocated to devices not reachable from this node",
                detail=f"{allocated.label} is already allocated to devices not reachable from this node",
                unresolvable=True,
                claim=allocated.label,
            )
    return None


def allocate(
    question: NodeQuestion,
    pending: Sequence[PendingClaim],
    allocated_claims: Sequence[AllocatedClaim],
    matcher: DeviceMatcher,
    *,
    budget: int = DEFAULT_SEARCH_BUDGET,
    features: Features = DEFAULT_FEATURES,
    holders: Holders | None = None,
) -> AllocationOutcome:
    """Allocate all of a pod's pending claims together on one node, or say why that cannot be done.

    `features`: the gates (see decisions/devices/features.py); the question's devices must already be the gated view."""
    node = question.node
    blocked = check_allocated_claims(node, allocated_claims)
    if not pending:
        return blocked or Allocation(node.name, ())
    # kube-scheduler runs the allocator even where an allocated claim cannot be used: its error still wins.
    outcome = _search(
        question, pending, matcher, budget, errors_only=blocked is not None, features=features, holders=holders
    )
    if blocked is not None and not (isinstance(outcome, NotAllocatable) and outcome.fatal):
        return blocked
    assert outcome is not None
    return outcome


def _search(
    question: NodeQuestion,
    pending: Sequence[PendingClaim],
    matcher: DeviceMatcher,
    budget: int,
    *,
    errors_only: bool = False,
    features: Features = DEFAULT_FEATURES,
    holders: Holders | None = None,
) -> AllocationOutcome | None:
    """The search proper. `errors_only`: the caller only needs to know whether it would fail with an error,
    so a search that cannot end in one (no failing selector met, no All request under a constraint) is skipped
    and None returned."""
    search = _Search(question, pending, matcher, budget, features, holders)
    failure = search.prepare()
    if failure is not None:
        return failure
    if errors_only and not search.can_still_fail():
        return None
    try:
        found = search.run()
    except _BudgetExhaustedError:
        return search._fail(
            CATEGORY_BUDGET,
            "the device search gave up after trying too many combinations",
            f"the device search gave up after {budget} device tries; simplify the claims' constraints",
            unresolvable=False,
        )
    except _SelectorError as error:
        return search._fail(
            getattr(error.failure, "category", CATEGORY_SELECTOR),
            f"{error.claim} request {error.request}: {error.failure.describe()}",
            "",
            unresolvable=True,
            request=error.request,
            fatal=True,
        )
    except _FatalError as error:
        return search._fail(error.category, error.summary, "", unresolvable=True, request=error.request, fatal=True)
    if not found:
        return search.explain_failure()
    return Allocation(
        question.node.name,
        tuple(
            ClaimAllocation(claim, tuple(search.chosen[index]), dict(search.alternatives_chosen[index]))
            for index, claim in enumerate(pending)
        ),
    )


class _Unfit(tuple[ChosenDevice, ...]):
    """Memo marker: the shortcut does not apply to this free list (empty, so the hit path tests nothing)."""


_UNFIT = _Unfit()


def _default_requests_fit(found: FreeSelectable) -> bool:
    """Whether every free device serves a request without capacity requests (its requestPolicy allows the
    default consumption): else the shortcut would take a device upstream skips. Computed with the list."""
    return found.default_requests_fit


@dataclass(frozen=True, slots=True)
class _SimpleRequest:
    claim_index: int
    request_name: str
    sub: DeviceSubRequest
    device_class: DeviceClass


def gate_failure(
    pending: Sequence[PendingClaim], classes: Mapping[str, DeviceClass], features: Features
) -> NotAllocatable | None:
    """What fails the pod on every node before any device is looked at, because a gate is off (node left "").

    As upstream, in its order: the plugin's PreFilter (dynamicresources.go) walks the requests and refuses a
    firstAvailable request while DRAPrioritizedList is off (unschedulable; a missing DeviceClass met first wins,
    reported by the search); then the allocator (allocator_experimental.go Allocate, validateDeviceRequest)
    errors on capacity requests while DRAConsumableCapacity is off (not the stable allocator, which ignores
    them: Features.stable_allocator) and on adminAccess while DRAAdminAccess is.
    """
    if not features.prioritized_list:
        for claim in pending:
            for request in claim.spec.requests:
                if request.exactly is not None:
                    if request.exactly.device_class_name not in classes:
                        return None
                    continue
                summary = (
                    f"{claim.label} request {request.name}: has subrequests, but the DRAPrioritizedList feature "
                    "is disabled"
                )
                return NotAllocatable("", CATEGORY_FEATURE_GATE, summary, summary, True, claim.label, request.name)
    for claim in pending:
        for request in claim.spec.requests:
            if features.consumable_capacity or features.stable_allocator:
                break
            for sub in request.alternatives:
                if sub.capacity_requests:
                    name = request.name if request.exactly is not None else f"subrequest {sub.name}"
                    where = f"request {name}" if request.exactly is not None else name
                    summary = (
                        f"{claim.label} {where}: has capacity requests, but the DRAConsumableCapacity feature is "
                        "disabled"
                    )
                    return NotAllocatable(
                        "", CATEGORY_FEATURE_GATE, summary, summary, True, claim.label, request.name, fatal=True
                    )
        for request in claim.spec.requests:
            if features.admin_access:
                break
            for sub in request.alternatives:
                if sub.admin_access:
                    name = request.name if request.exactly is not None else f"{request.name}/{sub.name}"
                    summary = f"{claim.label} request {name}: admin access is requested, but the feature is disabled"
                    return NotAllocatable(
                        "", CATEGORY_FEATURE_GATE, summary, summary, True, claim.label, request.name, fatal=True
                    )
    return None


def _in_order(names: set[str], asked: list[str]) -> list[str]:
    """`names` (some of `asked`) in the order asked: by position for a few (a search in C each), else one pass."""
    if len(names) <= 8:
        return sorted(names, key=asked.index)
    return [name for name in asked if name in names]


class PodAllocator:
    """One pod's claims, prepared once and asked about many nodes.

    Most pods ask for N devices of a class with no constraints: for those, taking the first free devices of
    the node's cached free list gives exactly the upstream allocator's first solution. Anything that shortcut
    cannot settle (constraints, firstAvailable, All, adminAccess, taints, counters, selector errors, a
    shortfall across several requests) goes to the full search in `allocate`.
    """

    def __init__(
        self,
        pending: Sequence[PendingClaim],
        allocated_claims: Sequence[AllocatedClaim],
        classes: Mapping[str, DeviceClass],
        matcher: DeviceMatcher,
        snapshot: ClusterSnapshot,
        *,
        budget: int = DEFAULT_SEARCH_BUDGET,
        features: Features = DEFAULT_FEATURES,
    ) -> None:
        self.pending = tuple(pending)
        self.allocated_claims = tuple(allocated_claims)
        self.matcher = matcher
        self.snapshot = snapshot
        self.budget = budget
        self.features = features
        # The gates that change devices get a per-(NodeDevices, Features) view; with every gate on, none.
        self._gated = matcher.caches.gated.table(features) if features.changes_devices else None
        self.gate_failure = gate_failure(self.pending, classes, features)
        self._holders: dict[DeviceKey, list[str]] | None = None
        self.simple = self._simple_plan(classes)
        self.chosen_alternatives = [{request.name: 0 for request in claim.spec.requests} for claim in self.pending]
        # With only ExactCount requests, what a node takes per class is the same on every node that fits.
        counts: dict[str, int] = {}
        for step in self.simple or ():
            counts[step.sub.device_class_name] = counts.get(step.sub.device_class_name, 0) + step.sub.count
        self.class_counts = tuple(sorted(counts.items()))
        self._single_claim_request = self.simple is not None and len(self.simple) == 1 and len(self.pending) == 1
        # decide's shortcut for the commonest pod (and settle_remembered's): nothing else to check per node
        self._takes_shortcut = (
            self._single_claim_request and not self.allocated_claims and self._gated is None and not self.gate_failure
        )
        if self._single_claim_request:
            step = self.simple[0]  # type: ignore[index]
            self._memo_key = (step.request_name, step.sub.device_class_name, step.sub.count)
            self._free_view = FreeView(matcher, snapshot, step.device_class, step.sub.selectors)
            # The node's answer is shared by every pod whose claim asks the same (the allocation names its
            # claim by the pod's claim entry; a claim that exists is told apart by nothing else, so such pods
            # share it: PodDecision.claim_labels says whose claim it is).
            claim = self.pending[0]
            self._shared_claim = claim if not claim.claim_key else replace(claim, label="", claim_key="")
            shape = (claim.pod_claim_name, self._shared_claim.label, claim.spec)
            self._shared_key = matcher.caches.request_shape(shape)
            self._alternatives = self.chosen_alternatives[0]
            self._refusals: dict[tuple[int, int], NotAllocatable] = {}  # (selectable, free) -> refusal on node ""
            self._settled_key = (self._free_view.signature, self._shared_key)
        # What settle_remembered found in the memo, and what of it holds for this snapshot plus what it added
        # (`remember` publishes the latter when it differs).
        self._memo: SettledNodes | None = None
        self._settled: SettledNodes | None = None

    def _simple_plan(self, classes: Mapping[str, DeviceClass]) -> tuple[_SimpleRequest, ...] | None:
        plan = []
        for claim_index, claim in enumerate(self.pending):
            if claim.spec.constraints:
                return None
            if sum(r.exactly.count if r.exactly is not None else 0 for r in claim.spec.requests) > (
                MAX_DEVICES_PER_ALLOCATION
            ):
                return None  # the search reports the claim limit (an error), not a shortfall
            for request in claim.spec.requests:
                sub = request.exactly
                if sub is None or sub.allocation_mode != ALLOCATION_MODE_EXACT or sub.admin_access:
                    return None
                if sub.capacity_requests:
                    return None  # consumable capacity: the search checks policies and what is left
                device_class = classes.get(sub.device_class_name)
                if device_class is None:
                    return None
                plan.append(_SimpleRequest(claim_index, request.name, sub, device_class))
        return tuple(plan)

    def on_node(self, question: NodeQuestion) -> AllocationOutcome:
        if self.gate_failure is not None:
            return self.gate_failure._replace(node=question.node.name)
        if self._gated is not None:
            question = question._replace(devices=self.gated(question.devices))
        if self.simple is not None:
            fast = self._first_free(question)
            if fast is not None:  # never an error: the shortcut gives up on failing selectors
                if self.allocated_claims:
                    return check_allocated_claims(question.node, self.allocated_claims) or fast
                return fast
        return allocate(
            question,
            self.pending,
            self.allocated_claims,
            self.matcher,
            budget=self.budget,
            features=self.features,
            holders=self.holders,
        )

    def holders(self, key: DeviceKey) -> Sequence[str]:
        """The claims holding a device and the pods they are reserved for: one pass over the snapshot's claims,
        made the first time a reason needs it (a capacity shortfall) and kept for this pod's nodes only."""
        if self._holders is None:
            index: dict[DeviceKey, list[str]] = {}
            for claim in self.snapshot.claims.values():
                if claim.allocation is None:
                    continue
                pods = [f"{claim.namespace}/{c.name}" for c in claim.reserved_for if c.resource == "pods"]
                label = f"claim {claim.key}" + (f" (pod {', '.join(pods)})" if pods else "")
                for result in claim.allocation.results:
                    index.setdefault(result.key, []).append(label)
            self._holders = index
        return self._holders.get(key, ())

    def gated(self, devices: NodeDevices) -> NodeDevices:
        """The node's devices under this allocator's gates, remembered per NodeDevices object (stable identities
        for the selector and free-list memos)."""
        assert self._gated is not None
        found = self._gated.get(devices)
        if found is None:
            found = self.matcher.caches.gated.put(devices, gated_devices(devices, self.features), self.features)
        return found

    def decide(
        self, node: Node, devices: NodeDevices, allocated: Mapping[DeviceKey, int], classes: Mapping[str, DeviceClass]
    ) -> AllocationOutcome:
        """on_node without building a NodeQuestion on the common path (it is built only when needed)."""
        if self._takes_shortcut:
            fast = self._one_request(node.name, devices)
            if fast is not None:
                return fast
        return self.on_node(NodeQuestion(node, devices, allocated, classes, self.snapshot.shared_allocated))

    def _one_request(self, node_name: str, devices: NodeDevices) -> AllocationOutcome | None:
        """The commonest pod: one claim, one ExactCount request. Its devices on a node are remembered with the
        node's free list, so the next pod of the same shape costs two lookups and one result per node."""
        step = self.simple[0]  # type: ignore[index]
        found = self._free_view.get(node_name, devices)
        if found is None:
            return None
        chosen_devices = found.derived.get(self._memo_key)
        if chosen_devices is None:
            if not _default_requests_fit(found):
                chosen_devices = _UNFIT  # remembered too: the check costs nothing on the next pod
            else:
                class_name = step.sub.device_class_name
                chosen_devices = tuple(
                    _new_chosen((step.request_name, device, class_name, False, False, ()))
                    for device in found.free[: step.sub.count]
                )
            found.derived[self._memo_key] = chosen_devices
        if len(chosen_devices) < step.sub.count:
            if chosen_devices is _UNFIT or devices.has_unusable:
                return None  # the full search says it, with the unusable devices named
            shortfall = Shortfall(node_name, found.selectable, len(chosen_devices))
            found.allocations[self._shared_key] = shortfall
            return _new_not_allocatable((node_name, *self._refusal((shortfall.selectable, shortfall.free))[1:]))
        allocation = found.allocations.get(self._shared_key)
        if not isinstance(allocation, Allocation) or allocation.node != node_name:
            claim_allocation = _new_claim_allocation((self._shared_claim, chosen_devices, self._alternatives))
            allocation = _new_allocation((node_name, (claim_allocation,), self.class_counts))
            found.allocations[self._shared_key] = allocation
        return allocation

    def settle_remembered(
        self, node_names: Iterable[str], asked_keys: KeysView[str] | None = None
    ) -> tuple[dict[str, Allocation], list[tuple[NotAllocatable, list[str]]], list[str]]:
        """The commonest pod on every node whose answer is remembered from an earlier pod of its shape: its
        allocations, and its refusals on full nodes as groups (one refusal with no node, and the nodes full
        the same way: the texts name the pod's claim and the numbers, never the node). Returns those and the
        other nodes, in the order asked, for `decide`; the caller hands them to `remember` afterwards. The
        allocations follow the memo's order, not the order asked (every reader looks nodes up, or goes by the
        order asked itself).

        Where the answers come from: a node's answer lives in its free-list entry, valid while the node's
        allocations stay as they were (on a full node it is the numbers of the pod's refusal). Checking that
        per node costs a burst more than all the rest of its device step, so the answers are also kept per
        shape in `caches.settled` (SettledNodes) with the snapshot version they hold at: a later snapshot
        drops the nodes its change list names and keeps the others. When most remembered nodes are asked about
        (kube-scheduler's filter), the allocations are one dict copy less the nodes not asked, and only the
        nodes not remembered are looked at; otherwise (explain or a test asking about a few nodes) a node costs
        one lookup. Without a usable memo
        (the first pod, pools spanning nodes changed, the change history ran out, an older snapshot than the
        memo's), each node's entry is checked instead. `asked_keys`: the same nodes as a dict's keys, when the
        caller has them (decide_pod does: one pass over the nodes less)."""
        allocations: dict[str, Allocation] = {}
        full_nodes: dict[tuple[int, int], list[str]] = {}  # (selectable, free) -> the nodes full that way
        if not self._takes_shortcut:
            return allocations, [], list(node_names)
        memo = self._memo = self.matcher.caches.settled.get(self._settled_key)
        if memo is None:
            shared = (self.snapshot.shared_alloc_version, self.snapshot.topology.shared_version)
            known = SettledNodes(self.snapshot.version, shared, {}, {}, {})
        else:
            known = memo.brought_to(self.snapshot)
        names = node_names if isinstance(node_names, list) else list(node_names)
        asked = asked_keys if asked_keys is not None else dict.fromkeys(names).keys()
        remembered, full = known.allocations, known.shortfalls
        unknown: list[str] = []
        if 2 * len(asked) >= len(remembered) + len(full):
            # Most remembered nodes are asked about (kube-scheduler asks about every node its own plugins let
            # through): the allocations are one copy less the nodes not asked, and only the nodes not
            # remembered (the ones the last bindings changed) are looked at.
            allocations = dict(remembered)
            if not remembered.keys() <= asked:  # a look per remembered node, no set built (the usual case: all asked)
                for name in remembered.keys() - asked:
                    del allocations[name]
            for name, shortfall in full.items():
                if name in asked:
                    full_nodes.setdefault((shortfall.selectable, shortfall.free), []).append(name)
            if len(allocations) + sum(map(len, full_nodes.values())) < len(asked):
                unknown = _in_order(asked - remembered.keys() - full.keys(), names)
        else:
            answer_of, full_of = remembered.get, full.get
            for name in names:  # once per node: a lookup and a store
                answer = answer_of(name)
                if answer is not None:
                    allocations[name] = answer
                elif (held := full_of(name)) is not None:
                    full_nodes.setdefault((held.selectable, held.free), []).append(name)
                else:
                    unknown.append(name)
        hits: dict[str, Allocation | Shortfall] = {}
        rest = self._look_up_entries(unknown, hits)
        self._settled = known.with_answers(hits)
        for name, found in hits.items():
            if type(found) is Shortfall:
                full_nodes.setdefault((found.selectable, found.free), []).append(name)
            else:
                allocations[name] = found  # type: ignore[assignment]  # the other kind of answer
        return allocations, [(self._refusal(numbers), group) for numbers, group in full_nodes.items()], rest

    def remember(self, decided: Sequence[str]) -> SettledNodes | None:
        """After `decide` ran on these nodes: what it left in their free-list entries joins the answers, and
        the memo gets them if they differ from what it held (a new SettledNodes, never a change to one).
        Returns the answers as they now stand (None for a pod the shortcut does not serve)."""
        if not self._takes_shortcut or self._settled is None:
            return None
        hits: dict[str, Allocation | Shortfall] = {}
        self._look_up_entries(decided, hits)
        settled = self._settled = self._settled.with_answers(hits)
        if settled is not self._memo:
            self.matcher.caches.settled.put(self._settled_key, settled)
        return settled

    def _look_up_entries(self, node_names: Sequence[str], hits: dict[str, Allocation | Shortfall]) -> list[str]:
        """Each node's remembered answer in its free-list entry, if the entry holds for this snapshot, into
        `hits`; returns the nodes without one (FreeView.get's hit test inlined: no calls, no new objects)."""
        resolved = self.snapshot.resolved_node_devices
        entries = self._free_view.entries
        versions = self.snapshot.alloc_versions
        shared_version = self.snapshot.shared_alloc_version
        key = self._shared_key
        rest: list[str] = []
        for name in node_names:
            entry = entries.get(resolved.get(name))  # type: ignore[arg-type]
            if (
                entry is not None
                and entry.shared_version == shared_version
                and entry.local_version == versions.get(name, 0)
                and entry.result is not None
                and (remembered := entry.result.allocations.get(key)) is not None
                and remembered.node == name
            ):
                hits[name] = remembered
            else:
                rest.append(name)
        return rest

    def _refusal(self, numbers: tuple[int, int]) -> NotAllocatable:
        """The pod's own refusal on the nodes full the same way, with no node: built once per pod and numbers
        (the texts name the pod's claim and the numbers, not the node)."""
        refusal = self._refusals.get(numbers)
        if refusal is None:
            step = self.simple[0]  # type: ignore[index]
            refusal = self._refusals[numbers] = count_shortfall(
                "", self.pending[0].label, step.request_name, step.sub, numbers[0], numbers[1]
            )
        return refusal

    def _first_free(self, question: NodeQuestion) -> AllocationOutcome | None:
        assert self.simple is not None
        if self._single_claim_request:
            return self._one_request(question.node.name, question.devices)
        node_name = question.node.name
        taken: set[DeviceKey] = set()
        chosen: list[list[ChosenDevice]] = [[] for _ in self.pending]
        single = len(self.simple) == 1
        for step in self.simple:
            found = free_selectable(
                self.matcher, self.snapshot, node_name, question.devices, step.device_class, step.sub.selectors
            )
            if found is None or not _default_requests_fit(found):
                return None
            needed = step.sub.count
            class_name = step.sub.device_class_name
            if single:
                memo_key = (step.request_name, class_name, needed)
                chosen_devices = found.derived.get(memo_key)
                if chosen_devices is None:
                    chosen_devices = tuple(
                        _new_chosen((step.request_name, device, class_name, False, False, ()))
                        for device in found.free[:needed]
                    )
                    found.derived[memo_key] = chosen_devices
            else:
                chosen_devices = tuple(
                    _new_chosen((step.request_name, device, class_name, False, False, ()))
                    for device in found.free
                    if device.key not in taken
                )[:needed]
                taken.update(chosen.device.key for chosen in chosen_devices)
            if len(chosen_devices) < needed:
                if single and not question.devices.has_unusable:
                    claim = self.pending[step.claim_index]
                    return count_shortfall(
                        node_name, claim.label, step.request_name, step.sub, found.selectable, len(chosen_devices)
                    )
                return None
            picks = chosen[step.claim_index]
            picks.extend(chosen_devices)
            if len(picks) > MAX_DEVICES_PER_ALLOCATION:
                return None
        return Allocation(
            node_name,
            tuple(
                ClaimAllocation(claim, tuple(chosen[index]), self.chosen_alternatives[index])
                for index, claim in enumerate(self.pending)
            ),
            self.class_counts,
        )
