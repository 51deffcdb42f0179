"""Why a pod's claims cannot be allocated on a node, after the search found no solution.

Upstream's allocator only answers "no solution" (structured/internal/experimental/allocator_experimental.go,
Allocate returning nil); kube-scheduler then reports "cannot allocate all claims". This explains instead: the
first request that cannot be met even on its own (no matching device, too few free, capacity or requestPolicy
that can never serve it, a feature gate that hides the devices), else the constraint or the shared counters
that stand in the way, else the requests together; with whether preemption on the node could ever help
(`unresolvable`), and the node's unusable devices that a request would have matched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

from extender.decisions.devices.candidates import Alternative, ClaimAlternatives, selector_verdict
from extender.decisions.devices.consumable_capacity import SharedCapacity
from extender.decisions.devices.features import Features
from extender.decisions.devices.results import (
    CATEGORY_CONSTRAINT,
    CATEGORY_FEATURE_GATE,
    CATEGORY_NO_DEVICES,
    CATEGORY_POOL,
    CATEGORY_TAKEN,
    NodeQuestion,
    NotAllocatable,
    PendingClaim,
    not_allocatable,
)
from extender.decisions.devices.search import tolerated
from extender.decisions.devices.selection import DeviceMatcher
from extender.state.capacity import CapacityError, request_fits
from extender.state.dra.claims import DeviceSubRequest
from extender.state.dra.devices import Device, DeviceKey
from extender.state.quantity import format_quantity

# Who holds a device (claims, with the pods they are reserved for), for reasons only.
Holders = Callable[[DeviceKey], Sequence[str]]
# Devices a capacity shortfall names in its detail (which device, what is left, who holds it).
MAX_CAPACITY_EXAMPLES = 3


def count_shortfall(
    node: str, claim_label: str, request_name: str, sub: DeviceSubRequest, selectable: int, usable: int
) -> NotAllocatable:
    """An ExactCount request that cannot get `count` devices: none exist (unresolvable) or too few are free."""
    needed = sub.count
    class_text = _class_text(sub)
    plural = "s" if needed != 1 else ""
    if selectable < needed:
        what = "no device" if selectable == 0 else f"only {selectable} device{'s' if selectable != 1 else ''}"
        verb = "match" if selectable > 1 else "matches"
        return NotAllocatable(
            node,
            CATEGORY_NO_DEVICES,
            f"{claim_label} request {request_name}: not enough devices of {class_text} on the node",
            f"{claim_label} request {request_name}: needs {needed} device{plural} of {class_text}; "
            f"{what} on this node {verb}",
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
        f"{claim_label} request {request_name}: not enough free devices of {class_text}",
        f"{claim_label} request {request_name}: needs {needed} device{plural} of {class_text}; "
        f"{selectable} match on this node, {usable} free",
        False,
        claim_label,
        request_name,
        needed,
        selectable,
        usable,
    )


def _class_text(sub: DeviceSubRequest) -> str:
    return f"class {sub.device_class_name}" + (" with its selectors" if sub.selectors else "")


def _quantity_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else str(float(value))


class FailureExplainer:
    """The reason for a failed search, from the candidates it had (computed only on failure: never hot)."""

    def __init__(
        self,
        question: NodeQuestion,
        claims: Sequence[PendingClaim],
        alternatives: Sequence[ClaimAlternatives],
        matcher: DeviceMatcher,
        features: Features,
        capacity: SharedCapacity,
        holders: Holders | None,
    ) -> None:
        self.question = question
        self.node_name = question.node.name
        self.usable = question.devices.usable
        self.claims = claims
        self.alternatives = alternatives
        self.matcher = matcher
        self.features = features
        self.capacity = capacity
        self.holders = holders

    def explain(self) -> NotAllocatable:
        """The first request that cannot be met even on its own, else a joint reason; with the node's unusable
        devices that some request would have matched."""
        reason = self._first_reason()
        every = [alternative for per_claim in self.alternatives for request in per_claim for alternative in request]
        return self._note_unusable(every, reason)

    def _first_reason(self) -> NotAllocatable:
        for pool in self.question.devices.pools:
            if pool.invalid_reason:
                # Upstream's reason whenever the node has an invalid pool (whose devices it never uses).
                return not_allocatable(
                    self.node_name,
                    CATEGORY_POOL,
                    f"resource pool {pool.driver}/{pool.name} is invalid: {pool.invalid_reason}",
                    unresolvable=True,
                )
        alone = self._request_alone()
        if alone is not None:
            return alone
        for claim in self.claims:
            for constraint in claim.spec.constraints:
                kind = "matchAttribute" if constraint.match_attribute else "distinctAttribute"
                attribute = constraint.match_attribute or constraint.distinct_attribute
                return not_allocatable(
                    self.node_name,
                    CATEGORY_CONSTRAINT,
                    f"{claim.label}: no set of free devices satisfies {kind} {attribute}",
                    unresolvable=False,
                    claim=claim,
                )
        if self.features.partitionable_devices and any(device.consumes_counters for device in self.usable):
            return not_allocatable(
                self.node_name,
                CATEGORY_TAKEN,
                "shared counters of the partitionable devices are exhausted",
                unresolvable=False,
            )
        labels = ", ".join(claim.label for claim in self.claims)
        too_few = self._too_few_for_all_requests()
        if too_few is not None:
            selectable, needed = too_few
            return not_allocatable(
                self.node_name,
                CATEGORY_NO_DEVICES,
                f"not enough devices on the node for all requests of {labels} together",
                f"the requests of {labels} need {needed} distinct devices together; {selectable} on this node "
                f"match any of them",
                unresolvable=True,
            )
        return not_allocatable(
            self.node_name,
            CATEGORY_TAKEN,
            f"not enough distinct free devices for all requests of {labels} together",
            unresolvable=False,
        )

    def _request_alone(self) -> NotAllocatable | None:
        """The first request none of whose alternatives can be met on its own: the alternative that came
        closest (most free devices), unresolvable only if all are."""
        for claim_index, claim in enumerate(self.claims):
            for alternatives in self.alternatives[claim_index]:
                shortfalls = [self._shortfall(claim, alt) for alt in alternatives]
                if all(s is not None for s in shortfalls):
                    unresolvable = all(s.unresolvable for s in shortfalls if s is not None)
                    best = max(shortfalls, key=lambda s: (not s.unresolvable, s.free))  # type: ignore[union-attr]
                    assert best is not None
                    if best.unresolvable != unresolvable:
                        return best._replace(unresolvable=unresolvable)
                    return best
        return None

    def _too_few_for_all_requests(self) -> tuple[int, int] | None:
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
                    if selector_verdict(self.matcher, alternative, device) is True:
                        if device.allow_multiple_allocations:
                            return None  # one shared device can serve several requests
                        selectable.add(device.key)
        return (len(selectable), needed) if len(selectable) < needed else None

    def _note_unusable(self, alternatives: Sequence[Alternative], reason: NotAllocatable) -> NotAllocatable:
        """The reason with the node's unusable devices that the request would have matched (a malformed
        requestPolicy: Device.unusable_reason names slice, device and field), so that the person fixing the
        slice learns why a matching device was not counted. Other nodes' reasons are untouched."""
        notes: list[str] = []
        for device in self.question.devices.devices:
            if device.unusable_reason and any(
                alternative.device_class is not None and selector_verdict(self.matcher, alternative, device) is True
                for alternative in alternatives
            ):
                notes.append(device.unusable_reason)
        if not notes:
            return reason
        shown = "; ".join(notes[:3]) + (f"; and {len(notes) - 3} more" if len(notes) > 3 else "")
        suffix = f" ({len(notes)} matching device(s) unusable: {shown})"
        return reason._replace(summary=reason.summary + suffix, detail=reason.detail + suffix)

    def _shortfall(self, claim: PendingClaim, alternative: Alternative) -> NotAllocatable | None:
        """Why this subrequest alone cannot be met on this node, or None if it could be."""
        sub = alternative.sub
        selectable = self._count_selectable(alternative)
        usable = [d for d in alternative.selectable_candidates() if tolerated(d, sub)]
        gated_out = 0
        if not self.features.partitionable_devices:
            allowed = [d for d in usable if not d.consumes_counters]  # never allocatable with the gate off
            gated_out, usable = len(usable) - len(allowed), allowed
        name = alternative.request_name
        if gated_out and alternative.all_devices is None and len(usable) < sub.count:
            class_text = _class_text(sub)
            return not_allocatable(
                self.node_name,
                CATEGORY_FEATURE_GATE,
                f"{claim.label} request {name}: the devices of {class_text} consume shared counters, which need "
                "the DRAPartitionableDevices feature (disabled)",
                f"{claim.label} request {name}: needs {sub.count} device(s) of {class_text}; {gated_out} match but "
                f"consume shared counters (DRAPartitionableDevices is off), {len(usable)} others are free",
                unresolvable=True,
                claim=claim,
                request=name,
                needed=sub.count,
                matching=selectable,
                free=len(usable),
            )
        if alternative.all_devices is not None:
            return self._all_devices_shortfall(claim, alternative)
        if len(usable) >= sub.count:
            return None
        if alternative.capacity_requests or self.capacity.shared:
            found = self._capacity_shortfall(claim, alternative, selectable, usable)
            if found is not None:
                return found
        return count_shortfall(self.node_name, claim.label, name, sub, selectable, len(usable))

    def _all_devices_shortfall(self, claim: PendingClaim, alternative: Alternative) -> NotAllocatable | None:
        """An allocationMode All request: none on the node, or some in use."""
        sub, name, every = alternative.sub, alternative.request_name, alternative.all_devices or []
        in_use = [
            d
            for d in every
            if not sub.admin_access and d.key in self.capacity.allocated and self.capacity.exclusively_held(d)
        ]
        if not every:
            return not_allocatable(
                self.node_name,
                CATEGORY_NO_DEVICES,
                f"{claim.label} request {name}: asks for all devices of {_class_text(sub)}, none on the node",
                unresolvable=True,
                claim=claim,
                request=name,
            )
        if not in_use:
            return None
        total = len(every)
        return not_allocatable(
            self.node_name,
            CATEGORY_TAKEN,
            f"{claim.label} request {name}: asks for all devices of {_class_text(sub)}, some are in use",
            f"{claim.label} request {name}: asks for all {total} devices of {_class_text(sub)}; "
            f"{len(in_use)} are in use",
            unresolvable=False,
            claim=claim,
            request=name,
            needed=total,
            matching=total,
            free=total - len(in_use),
        )

    def _capacity_shortfall(
        self, claim: PendingClaim, alternative: Alternative, selectable: int, usable: Sequence[Device]
    ) -> NotAllocatable | None:
        """A request whose devices exist but whose capacity or requestPolicy never serves it (no preemption
        helps: a request outside a device's policy lands here), or serves it but has too little left."""
        sub, name, class_text = alternative.sub, alternative.request_name, _class_text(alternative.sub)
        capable = self._count_capable(alternative)
        if capable < selectable and capable < sub.count:
            asked = ", ".join(f"{k}={_quantity_text(v)}" for k, v in sorted(alternative.capacity_requests.items()))
            return not_allocatable(
                self.node_name,
                CATEGORY_NO_DEVICES,
                f"{claim.label} request {name}: no device of {class_text} on the node can serve its capacity request",
                f"{claim.label} request {name}: needs {sub.count} device(s) of {class_text} serving "
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
            return not_allocatable(
                self.node_name,
                CATEGORY_TAKEN,
                f"{claim.label} request {name}: not enough capacity left on the devices of {class_text}",
                f"{claim.label} request {name}: needs {sub.count} device(s) of {class_text}; {capable} could "
                f"serve it, {len(usable)} are free with enough capacity left"
                + self._capacity_left(alternative, usable),
                unresolvable=False,
                claim=claim,
                request=name,
                needed=sub.count,
                matching=capable,
                free=len(usable),
            )
        return None

    def _capacity_left(self, alternative: Alternative, usable: Sequence[Device]) -> str:
        """Which devices could serve the request but have too little left, how much each has left of what the
        request asks (or of every capacity, for a request that asks for none) and who holds it."""
        free = {d.key for d in usable}
        examples: list[str] = []
        blocked = 0
        for device in self.usable:
            if (
                device.key in free
                or device.key not in self.capacity.shared
                or selector_verdict(self.matcher, alternative, device) is not True
                or not self._could_serve(alternative, device)
            ):
                continue
            blocked += 1
            if len(examples) == MAX_CAPACITY_EXAMPLES:
                continue
            consumed = self.capacity.consumed(device.key, in_search=False)
            names = sorted(alternative.capacity_requests) or sorted(device.consumable)
            left = ", ".join(
                f"{n} {format_quantity(device.consumable[n].value - consumed.get(n, Fraction(0)))} of "
                f"{format_quantity(device.consumable[n].value)} left"
                for n in names
                if n in device.consumable
            )
            holders = list(self.holders(device.key)) if self.holders is not None else []
            held_by = f", held by {', '.join(holders)}" if holders else ""
            examples.append(f"{'/'.join(device.key)}: {left or 'nothing left'}{held_by}")
        if not examples:
            return ""
        more = f"; and {blocked - len(examples)} more" if blocked > len(examples) else ""
        return "; " + "; ".join(examples) + more

    def _could_serve(self, alternative: Alternative, device: Device) -> bool:
        """Whether the device's capacity could serve the subrequest if nobody shared it."""
        try:
            fits = request_fits(alternative.capacity_requests, device.consumable, {}, self.capacity.fractional)
        except CapacityError:
            return False
        return fits is not None

    def _count_capable(self, alternative: Alternative) -> int:
        """Devices the subrequest selects whose capacity could serve it if nobody shared them."""
        count = 0
        for device in self.usable:
            if selector_verdict(self.matcher, alternative, device) is True and self._could_serve(alternative, device):
                count += 1
        return count

    def _count_selectable(self, alternative: Alternative) -> int:
        """Devices the subrequest selects on this node, free or not."""
        if alternative.all_devices is not None:
            return len(alternative.all_devices)
        count = 0
        for device in self.usable:
            if selector_verdict(self.matcher, alternative, device) is True:
                count += 1
        return count
