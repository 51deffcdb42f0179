"""Shares of devices that allow multiple allocations, and the capacity they consume, as one search sees them.

Follows k8s.io/dynamic-resource-allocation structured/internal/experimental/consumable_capacity.go and the
allocator's bookkeeping around it (allocator_experimental.go: deviceCapacityInUse, allocatingCapacity, the
CmpRequestOverCapacity check at scan time and again in allocateDevice): a device that allows multiple
allocations is never taken exclusively; each share consumes some of its capacities, next to the shares
allocated before the search (ClusterSnapshot.shared_allocated) and the shares the search itself adds.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import NamedTuple

from extender.decisions.devices.results import CATEGORY_CAPACITY
from extender.state.capacity import CapacityError, SharedUse, request_fits
from extender.state.dra.devices import Device, DeviceKey


class CapacityFailure(NamedTuple):
    """A capacity request that upstream's allocator turns into an error when its scan reaches the device
    (CmpRequestOverCapacity failing, structured/internal/incubating allocateOne): fatal, like a selector
    failure, and only when reached."""

    device: str
    message: str
    category: str = CATEGORY_CAPACITY

    def describe(self) -> str:
        return f"checking capacity for device {self.device}: {self.message}"


class SharedCapacity:
    """Who holds which device, and which capacity the shares of shared devices consume, for one search.

    `shared` is empty with DRAConsumableCapacity off: a share held by another claim then blocks the whole
    device (the plugin's foreachAllocatedDevice calls the dedicated-device callback for it)."""

    __slots__ = ("allocated", "allocating_capacity", "allocating_shares", "fractional", "shared")

    def __init__(
        self, allocated: Mapping[DeviceKey, int], shared: Mapping[DeviceKey, SharedUse], fractional: bool
    ) -> None:
        self.allocated = allocated
        self.shared = shared
        self.fractional = fractional
        # Shares this search is adding: how many per device and the capacity they consume (upstream's
        # allocatingCapacity). Search._take_share adds and removes them (inline: it runs per device taken).
        self.allocating_shares: dict[DeviceKey, int] = {}
        self.allocating_capacity: dict[DeviceKey, dict[str, Fraction]] = {}

    def exclusively_held(self, device: Device) -> bool:
        """Held by another claim's result without a shareID (upstream: in AllocatedDevices): nobody else may
        use it, even if it allows multiple allocations."""
        allocations = self.allocated.get(device.key, 0)
        if not allocations:
            return False
        use = self.shared.get(device.key)
        return allocations > (use.shares if use is not None else 0)

    def consumed(self, key: DeviceKey, *, in_search: bool) -> Mapping[str, Fraction]:
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

    def verdict(self, requests: Mapping[str, Fraction], device: Device) -> bool | CapacityFailure:
        """CmpRequestOverCapacity at scan time, against what allocated shares already consume."""
        if not requests and device.default_request_fits and device.key not in self.shared:
            return True  # the commonest case: nothing asked, nothing shared, the default consumption is valid
        try:
            return (
                request_fits(requests, device.consumable, self.consumed(device.key, in_search=False), self.fractional)
                is not None
            )
        except CapacityError as error:
            return CapacityFailure("/".join(device.key), str(error))

    def in_use(self, key: DeviceKey) -> bool:
        """upstream deviceCapacityInUse: allocated shares, or shares this search adds."""
        return key in self.shared or self.allocating_shares.get(key, 0) > 0
