"""A pod's requests resolved against one node before the search: per subrequest, the devices it could take.

Follows the preparation in k8s.io/dynamic-resource-allocation structured/internal/experimental
allocator_experimental.go, Allocate: every DeviceClass must exist (the plugin's PreFilter), every allocationMode
All request is resolved up front (validateDeviceRequest) so that its errors (a pool being updated, a failing
selector, more than 32 devices) fail the pod whatever the other requests do, and a claim whose smallest
alternatives already exceed 32 devices is refused before any device is looked at. ExactCount candidates are
the devices upstream's scan would reach, in pool/slice/device order: in-use devices are skipped before
selectors run, and a device on which a selector or capacity check fails stays in the list, marked, because it
is an error only if the search reaches it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from extender.decisions.devices.consumable_capacity import CapacityFailure, SharedCapacity
from extender.decisions.devices.features import Features
from extender.decisions.devices.results import (
    CATEGORY_CAPACITY,
    CATEGORY_CLAIM_SPEC,
    CATEGORY_CLASS,
    CATEGORY_POOL,
    CATEGORY_SELECTOR,
    CATEGORY_TOO_MANY,
    NodeQuestion,
    NotAllocatable,
    PendingClaim,
    not_allocatable,
)
from extender.decisions.devices.selection import DeviceMatcher
from extender.decisions.devices.selector_verdicts import SelectorFailure
from extender.state.capacity import CapacityError, request_fits
from extender.state.dra.claims import (
    ALLOCATION_MODE_ALL,
    ALLOCATION_MODE_EXACT,
    MAX_DEVICES_PER_ALLOCATION,
    DeviceRequest,
    DeviceSubRequest,
)
from extender.state.dra.device_class import DeviceClass
from extender.state.dra.devices import Device


@dataclass(slots=True)
class Alternative:
    """One subrequest's candidates on this node, scanned lazily in device order like upstream."""

    sub: DeviceSubRequest
    request_name: str  # as it appears in results
    device_class: DeviceClass | None
    # Free (or adminAccess) devices in order that the selectors select, or on which a selector fails: upstream
    # only evaluates selectors when its scan reaches a device that is not in use, so a failing device is an
    # error only if the search gets to it while no other request of the pod holds it.
    candidates: list[Device] = field(default_factory=list)
    # position in `candidates` -> why the device fails the pod when reached
    failures: dict[int, SelectorFailure | CapacityFailure] = field(default_factory=dict)
    all_devices: list[Device] | None = None  # allocationMode All: every selectable device
    capacity_requests: dict[str, Fraction] = field(default_factory=dict)

    def selectable_candidates(self) -> list[Device]:
        if not self.failures:
            return self.candidates
        return [d for i, d in enumerate(self.candidates) if i not in self.failures]


# claim -> request -> its alternatives (one for `exactly`, the firstAvailable subrequests in order)
ClaimAlternatives = list[list[Alternative]]


def selector_verdict(matcher: DeviceMatcher, alternative: Alternative, device: Device) -> bool | SelectorFailure:
    """The class's selectors, then the subrequest's (upstream selectorsMatch)."""
    assert alternative.device_class is not None
    verdict = matcher.class_verdict(alternative.device_class, device)
    if verdict is True and alternative.sub.selectors:
        verdict = matcher.all_verdict(alternative.sub.selectors, device)
    return verdict


def can_end_in_error(claims: Sequence[PendingClaim], alternatives: Sequence[ClaimAlternatives]) -> bool:
    """Whether a search over these alternatives may end in an error: a failing selector among the candidates,
    or an All request under a constraint (a device it must take may violate the constraint)."""
    for claim, per_request in zip(claims, alternatives, strict=True):
        for request_alternatives in per_request:
            for alternative in request_alternatives:
                if alternative.failures or (alternative.all_devices and claim.spec.constraints):
                    return True
    return False


def collect_alternatives(
    question: NodeQuestion,
    claims: Sequence[PendingClaim],
    matcher: DeviceMatcher,
    features: Features,
    capacity: SharedCapacity,
) -> list[ClaimAlternatives] | NotAllocatable:
    """Every claim's alternatives on the question's node, or why the pod fails before the search starts."""
    return _Collector(question, matcher, features, capacity).collect(claims)


class _Collector:
    __slots__ = ("_capacity", "_features", "_matcher", "_node_name", "_question")

    def __init__(
        self, question: NodeQuestion, matcher: DeviceMatcher, features: Features, capacity: SharedCapacity
    ) -> None:
        self._question = question
        self._node_name = question.node.name
        self._matcher = matcher
        self._features = features
        self._capacity = capacity

    def collect(self, claims: Sequence[PendingClaim]) -> list[ClaimAlternatives] | NotAllocatable:
        for claim in claims:
            failure = self._check_classes(claim)
            if failure is not None:
                return failure
        collected: list[ClaimAlternatives] = []
        for claim in claims:
            per_request = self._claim_alternatives(claim)
            if isinstance(per_request, NotAllocatable):
                return per_request
            collected.append(per_request)
        return collected

    def _refuse(
        self, category: str, summary: str, claim: PendingClaim, request: str = "", *, unresolvable: bool = True
    ) -> NotAllocatable:
        """An error for the whole pod (upstream's Allocate returns one), naming the claim and request."""
        return not_allocatable(
            self._node_name, category, summary, unresolvable=unresolvable, claim=claim, request=request, fatal=True
        )

    def _check_classes(self, claim: PendingClaim) -> NotAllocatable | None:
        classes = self._question.classes
        for request in claim.spec.requests:
            for sub in request.alternatives:
                name = request.name if request.exactly is not None else f"{request.name}/{sub.name}"
                if not sub.device_class_name:
                    # The plugin's PreFilter (dynamicresources.go validateDeviceClass): an error for the pod.
                    return self._refuse(
                        CATEGORY_CLASS,
                        f"{claim.label} request {name}: no deviceClassName (unsupported request type)",
                        claim,
                        name,
                    )
                if sub.device_class_name not in classes:
                    return not_allocatable(
                        self._node_name,
                        CATEGORY_CLASS,
                        f"{claim.label} request {name}: DeviceClass {sub.device_class_name} does not exist",
                        unresolvable=True,
                        claim=claim,
                        request=name,
                    )
        return None

    def _claim_alternatives(self, claim: PendingClaim) -> ClaimAlternatives | NotAllocatable:
        per_request: ClaimAlternatives = []
        devices_at_least = 0
        for request in claim.spec.requests:
            found = self._request_alternatives(claim, request)
            if isinstance(found, NotAllocatable):
                return found
            alternatives, fewest = found
            per_request.append(alternatives)
            # Upstream's pre-flight check (incubating Allocate): a request is worth at least its smallest
            # alternative; compared, not added, so that a huge count cannot overflow.
            if fewest > MAX_DEVICES_PER_ALLOCATION - devices_at_least:
                return self._refuse(
                    CATEGORY_TOO_MANY,
                    f"{claim.label} request {request.name}: adding {fewest} devices exceeds the claim limit "
                    f"of {MAX_DEVICES_PER_ALLOCATION}, with {devices_at_least} already accounted for",
                    claim,
                    request.name,
                )
            devices_at_least += fewest
        for index, constraint in enumerate(claim.spec.constraints):
            if not constraint.match_attribute and not constraint.distinct_attribute:
                return self._refuse(
                    CATEGORY_CLAIM_SPEC,
                    f"{claim.label} constraint #{index}: neither matchAttribute nor distinctAttribute "
                    "(unsupported constraint type)",
                    claim,
                )
        return per_request

    def _request_alternatives(
        self, claim: PendingClaim, request: DeviceRequest
    ) -> tuple[list[Alternative], int] | NotAllocatable:
        """The request's alternatives and the fewest devices any of them needs."""
        classes = self._question.classes
        alternatives: list[Alternative] = []
        fewest: int | None = None
        for sub in request.alternatives:
            name = request.name if request.exactly is not None else f"{request.name}/{sub.name}"
            # With DRAConsumableCapacity off only the stable allocator gets here (gate_failure): it does not read
            # capacity requests.
            requests = dict(sub.capacity_requests) if self._features.consumable_capacity else {}
            alternative = Alternative(sub, name, classes[sub.device_class_name], capacity_requests=requests)
            if sub.allocation_mode not in (ALLOCATION_MODE_ALL, ALLOCATION_MODE_EXACT):
                return self._refuse(
                    CATEGORY_CLAIM_SPEC,
                    f"{claim.label} request {name}: unsupported allocationMode {sub.allocation_mode}",
                    claim,
                    name,
                )
            if sub.allocation_mode == ALLOCATION_MODE_ALL:
                failure = self._collect_all(claim, alternative)
                if failure is not None:
                    return failure
                needs = len(alternative.all_devices or ())
            else:
                # Candidates only for subrequests that can fit: one over the limit is skipped in the search
                # before it looks at a device.
                if sub.count <= MAX_DEVICES_PER_ALLOCATION:
                    self._collect_free(alternative)
                needs = sub.count
            fewest = needs if fewest is None else min(fewest, needs)
            alternatives.append(alternative)
        assert fewest is not None  # the parser guarantees one alternative at least
        return alternatives, fewest

    def _collect_free(self, alternative: Alternative) -> None:
        admin = alternative.sub.admin_access
        capacity = self._capacity
        allocated = capacity.allocated
        shared = capacity.shared
        matcher = self._matcher
        candidates = alternative.candidates
        requests = alternative.capacity_requests
        for device in self._question.devices.usable:
            if not admin and device.key in allocated and (not shared or capacity.exclusively_held(device)):
                continue  # upstream checks "in use" first: selectors never run on taken devices
            verdict = selector_verdict(matcher, alternative, device)
            if verdict is True:
                if requests or not device.default_request_fits or (shared and device.key in shared):
                    fits = capacity.verdict(requests, device)
                    if fits is not True:
                        if fits is not False:
                            alternative.failures[len(candidates)] = fits
                            candidates.append(device)
                        continue
                candidates.append(device)
            elif verdict is not False:
                alternative.failures[len(candidates)] = verdict
                candidates.append(device)

    def _collect_all(self, claim: PendingClaim, alternative: Alternative) -> NotAllocatable | None:
        """Every selectable device, in use or not; upstream refuses outright when any pool is not ready."""
        name = alternative.request_name
        for pool in self._question.devices.pools:
            if pool.incomplete or pool.invalid_reason:
                state = f"is invalid: {pool.invalid_reason}" if pool.invalid_reason else "is being updated"
                return self._refuse(
                    CATEGORY_POOL,
                    f"{claim.label} request {name}: asks for all devices, but resource pool "
                    f"{pool.driver}/{pool.name} {state}",
                    claim,
                    name,
                    unresolvable=False,
                )
        selectable: list[Device] = []
        fractional = self._capacity.fractional
        for device in self._question.devices.usable:
            verdict = selector_verdict(self._matcher, alternative, device)
            if verdict is True:
                # Static capacity only (upstream validateDeviceRequest): a device that could never serve the
                # request is not part of "all"; one whose capacity others use up stays, so All then fails.
                try:
                    fits = request_fits(alternative.capacity_requests, device.consumable, {}, fractional) is not None
                except CapacityError as error:
                    return self._refuse(
                        CATEGORY_CAPACITY,
                        f"{claim.label} request {name}: checking capacity for device {device.name}: {error}",
                        claim,
                        name,
                    )
                if fits:
                    selectable.append(device)
            elif verdict is not False:
                return self._refuse(
                    CATEGORY_SELECTOR, f"{claim.label} request {name}: {verdict.describe()}", claim, name
                )
        alternative.all_devices = selectable
        return None
