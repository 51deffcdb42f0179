"""A claim's matchAttribute and distinctAttribute constraints, checked as the search adds devices.

Follows k8s.io/dynamic-resource-allocation structured/internal/experimental: matchAttributeConstraint
(allocator_experimental.go) and distinctAttributeConstraint (constraint.go). A constraint applies to the
requests it names (by request or "request/subrequest"), or to every request of the claim when it names none; a
device without the attribute never satisfies it.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.decisions.devices.undo import Undo
from extender.state.dra.claims import DeviceConstraint
from extender.state.dra.devices import Attribute, Device


class ClaimConstraints:
    """The constraints of one claim and the attribute values the devices taken so far fixed."""

    __slots__ = ("_constraints", "_distinct", "_matched")

    def __init__(self, constraints: Sequence[DeviceConstraint]) -> None:
        self._constraints = tuple(enumerate(constraints))
        self._matched: dict[int, tuple[Attribute, int]] = {}  # constraint index -> (value, devices holding it)
        self._distinct: dict[int, set[Attribute]] = {}  # constraint index -> values taken

    def add(self, request_name: str, result_name: str, device: Device, undo_steps: list[Undo]) -> bool:
        """Whether the device satisfies every constraint that applies to its request; the undo of each
        constraint it was added to goes to `undo_steps` (the caller undoes them when this says False)."""
        for index, constraint in self._constraints:
            if (
                constraint.requests
                and request_name not in constraint.requests
                and result_name not in constraint.requests
            ):
                continue
            undo = self._add_one(index, constraint, device)
            if undo is None:
                return False
            undo_steps.append(undo)
        return True

    def _add_one(self, index: int, constraint: DeviceConstraint, device: Device) -> Undo | None:
        if constraint.match_attribute:
            value = device.attributes.get(constraint.match_attribute)
            if value is None:
                return None
            matched = self._matched.get(index)
            if matched is None:
                self._matched[index] = (value, 1)
                return lambda: self._matched.pop(index, None)
            if matched[0] != value:
                return None
            self._matched[index] = (matched[0], matched[1] + 1)

            def release() -> None:
                current = self._matched[index]
                if current[1] <= 1:
                    del self._matched[index]
                else:
                    self._matched[index] = (current[0], current[1] - 1)

            return release
        value = device.attributes.get(constraint.distinct_attribute)
        if value is None:
            return None
        seen = self._distinct.setdefault(index, set())
        if value in seen:
            return None
        seen.add(value)
        return lambda: seen.discard(value)
