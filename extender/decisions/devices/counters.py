"""Shared counters of partitionable devices, as one search consumes them.

Follows k8s.io/dynamic-resource-allocation structured/internal/experimental/allocator_experimental.go
(checkAvailableCounters, deallocateCountersForDevice): a device that consumes counters may be taken only while
what allocated devices and the devices the search already took consume, plus its own consumption, stays within
each counter of its pool's counter sets; a counter that allocated devices already overdraw blocks every
device of the pool that consumes counters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction

from extender.decisions.devices.undo import Undo
from extender.state.dra.devices import Device, DeviceKey
from extender.state.inventory import Pool, PoolKey, consumed_counters


class SharedCounters:
    __slots__ = ("_allocated", "_base", "_in_search", "_overdrawn", "_pools")

    def __init__(self, pools: Iterable[Pool], allocated: Mapping[DeviceKey, int]) -> None:
        self._pools: dict[PoolKey, Pool] = {pool.key: pool for pool in pools}
        self._allocated = allocated
        # (pool, counter set) -> counter -> what the search's devices consume
        self._in_search: dict[tuple[PoolKey, str], dict[str, Fraction]] = {}
        # pool -> counter set -> counter -> what allocated devices consume (computed when first needed)
        self._base: dict[PoolKey, dict[str, dict[str, Fraction]]] = {}
        self._overdrawn: dict[PoolKey, bool] = {}

    def consume(self, device: Device) -> Undo | None:
        """Charge the device's counters; None (nothing charged) when they do not fit."""
        pool_key = (device.driver, device.pool)
        pool = self._pools.get(pool_key)
        if pool is None:
            return None
        base = self._base.get(pool_key)
        if base is None:
            base = consumed_counters(pool, self._allocated)
            self._base[pool_key] = base
            # Upstream re-checks every counter of the pool after each device: one that allocated devices already
            # overdraw blocks every device of the pool that consumes counters.
            self._overdrawn[pool_key] = any(
                used > pool.shared_counters.get(counter_set, {}).get(counter, used)
                for counter_set, counters in base.items()
                for counter, used in counters.items()
            )
        if self._overdrawn[pool_key]:
            return None
        added: list[tuple[dict[str, Fraction], str, Fraction]] = []
        for consumption in device.consumes_counters:
            available = pool.shared_counters.get(consumption.counter_set)
            if available is None:
                return None
            in_search = self._in_search.setdefault((pool_key, consumption.counter_set), {})
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
