"""Consumable device capacity (DRAConsumableCapacity, beta and on by default since Kubernetes 1.36).

A device capacity may carry a requestPolicy; a claim's request may ask for an amount of a capacity
(`capacity.requests`). What a request consumes of a device, whether that violates the policy, and whether it
still fits next to what other shares of the device consume follows k8s.io/dynamic-resource-allocation v0.37.2,
structured/internal/incubating/consumable_capacity.go (the implementation kube-scheduler 1.37 runs with its
default gates): `CmpRequestOverCapacity`, `calculateConsumedCapacity`, `roundUpRange`, `roundUpValidValues`,
`violatesPolicy`, `useMilli`. Quantities are exact fractions here; where upstream computes in int64 (whole
units, `Quantity.Value()` rounding up, or milli-units with DRAFractionalCapacityRange) the same integer
arithmetic is done, including its "cannot be represented" errors, which abort the allocation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

MAX_INT64 = 2**63 - 1
MIN_INT64 = -(2**63)
# DRAFractionalCapacityRange: beta and on by default in Kubernetes 1.37 (milli-unit range arithmetic).
FRACTIONAL_CAPACITY_RANGE = True

_NOT_REPRESENTABLE = "capacity request cannot be represented in the device's range arithmetic"


@dataclass(frozen=True, slots=True)
class CapacityRange:
    """requestPolicy.validRange: a request is rounded up to min + k*step, and must not pass max."""

    min: Fraction | None
    max: Fraction | None
    step: Fraction | None


@dataclass(frozen=True, slots=True)
class CapacityPolicy:
    """A capacity's requestPolicy: what a request without an amount for it consumes (`default`, else the whole
    value) and which amounts may be consumed (`valid_values`, or `valid_range`)."""

    default: Fraction | None = None
    valid_values: tuple[Fraction, ...] | None = None  # None: not set; an empty list is set
    valid_range: CapacityRange | None = None


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    value: Fraction
    policy: CapacityPolicy | None = None


class SharedUse(NamedTuple):
    """Allocated shares of one device (results with a shareID): how many, and the capacity they consume
    together (upstream's AllocatedSharedDeviceIDs and AggregatedCapacity, GatherAllocatedState)."""

    shares: int
    consumed: Mapping[str, Fraction]


def add_share(use: SharedUse | None, consumed: tuple[tuple[str, Fraction], ...], sign: int = 1) -> SharedUse | None:
    """`use` with one share added (sign 1) or removed (-1); None once no share is left."""
    shares = (use.shares if use else 0) + sign
    if shares <= 0:
        return None
    total = dict(use.consumed) if use else {}
    for name, amount in consumed:
        total[name] = total.get(name, Fraction(0)) + sign * amount
    return SharedUse(shares, total)


class CapacityError(ValueError):
    """A capacity request upstream refuses outright (its allocator returns an error, not "no device")."""


def _go_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient


def _go_rem(a: int, b: int) -> int:
    return a - b * _go_div(a, b)


def _value(quantity: Fraction) -> int:
    """Quantity.Value(): whole units, rounded up."""
    return math.ceil(quantity)


def _safe_milli(quantity: Fraction) -> int | None:
    """safeMilliValue: the quantity in milli-units when that is exact and fits int64, else None."""
    milli = quantity * 1000
    if milli.denominator != 1 or not MIN_INT64 <= milli <= MAX_INT64:
        return None
    return int(milli)


def _use_milli(valid_range: CapacityRange, fractional: bool) -> bool:
    if not fractional:
        return False
    for index, quantity in enumerate((valid_range.min, valid_range.max, valid_range.step)):
        if quantity is None:
            continue
        milli = _safe_milli(quantity)
        if milli is None or (index == 2 and milli < 1):
            return False
    return True


def _round_up_range(requested: Fraction, valid_range: CapacityRange, fractional: bool) -> Fraction:
    minimum = valid_range.min
    assert minimum is not None
    if requested < minimum:
        return minimum
    step = valid_range.step
    if step is None:
        return requested
    if _use_milli(valid_range, fractional):
        requested_milli = _safe_milli(requested)
        if requested_milli is None:
            raise CapacityError(f"{_NOT_REPRESENTABLE}: request {requested} is not a representable milli value")
        step_milli = _safe_milli(step)
        min_milli = _safe_milli(minimum)
        assert step_milli is not None and min_milli is not None
        added = requested_milli - min_milli
        steps = _go_div(added, step_milli) + (1 if _go_rem(added, step_milli) else 0)
        if steps > _go_div(MAX_INT64 - min_milli, step_milli):
            raise CapacityError(f"{_NOT_REPRESENTABLE}: rounding request {requested} up passes the milli-value range")
        return Fraction(min_milli + step_milli * steps, 1000)
    if requested > MAX_INT64:
        raise CapacityError(f"{_NOT_REPRESENTABLE}: request {requested} exceeds MaxInt64")
    requested_int, step_int, min_int = _value(requested), _value(step), _value(minimum)
    added = requested_int - min_int
    steps = _go_div(added, step_int) + (1 if _go_rem(added, step_int) else 0)
    if min_int >= 0 and steps > _go_div(MAX_INT64 - min_int, step_int):
        raise CapacityError(f"{_NOT_REPRESENTABLE}: rounding request {requested} up passes MaxInt64")
    return Fraction(min_int + step_int * steps)


def consumed_for_request(
    requested: Fraction | None, capacity: DeviceCapacity, fractional: bool = FRACTIONAL_CAPACITY_RANGE
) -> Fraction:
    """calculateConsumedCapacity: what one allocation consumes of this capacity."""
    policy = capacity.policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return capacity.value
    if policy is None:
        return requested
    if policy.valid_range is not None and policy.valid_range.min is not None:
        return _round_up_range(requested, policy.valid_range, fractional)
    if policy.valid_values is not None:
        for value in policy.valid_values:  # sorted ascending (API validation)
            if requested <= value:
                return value
        return requested
    return requested


def violates_policy(
    consumed: Fraction, policy: CapacityPolicy | None, fractional: bool = FRACTIONAL_CAPACITY_RANGE
) -> bool:
    """violatesPolicy. Upstream compares with the default by Quantity struct equality; equal amounts are
    taken as equal here (API validation keeps the default itself valid, so both agree on valid input)."""
    if policy is None:
        return False
    if policy.default is not None and consumed == policy.default:
        return False
    valid_range = policy.valid_range
    if valid_range is not None:
        if valid_range.max is not None and consumed > valid_range.max:
            return True
        if valid_range.step is not None:
            minimum = valid_range.min if valid_range.min is not None else Fraction(0)
            if _use_milli(valid_range, fractional):
                requested = _safe_milli(consumed)
                if requested is None:
                    return True
                step, low = _safe_milli(valid_range.step), _safe_milli(minimum)
                assert step is not None and low is not None
            else:
                requested, step, low = _value(consumed), _value(valid_range.step), _value(minimum)
            if _go_rem(requested - low, step) != 0:
                return True
        return False
    if policy.valid_values:
        return consumed not in policy.valid_values
    return False


def request_fits(
    requests: Mapping[str, Fraction],
    capacities: Mapping[str, DeviceCapacity],
    held: Mapping[str, Fraction],
    fractional: bool = FRACTIONAL_CAPACITY_RANGE,
) -> dict[str, Fraction] | None:
    """CmpRequestOverCapacity: what the request would consume of each capacity of the device, or None when the
    device cannot serve it (a requested capacity it lacks, a policy violated, not enough left next to `held`,
    what other shares consume). Raises CapacityError when upstream aborts the allocation instead."""
    for name in requests:
        if name not in capacities:
            return None
    # Every capacity is resolved before any soft "no": an error must not depend on which is checked first.
    consumed: dict[str, Fraction] = {}
    for name, capacity in capacities.items():
        try:
            amount = consumed_for_request(requests.get(name), capacity, fractional)
        except CapacityError as error:
            raise CapacityError(f"capacity {name!r}: {error}") from None
        if amount < 0:
            raise CapacityError(f"capacity {name!r}: capacity value is negative")
        consumed[name] = amount
    for name, capacity in capacities.items():
        amount = consumed[name]
        if violates_policy(amount, capacity.policy, fractional):
            return None
        if held.get(name, 0) + amount > capacity.value:
            return None
    return consumed


def default_request_fits(capacities: Mapping[str, DeviceCapacity]) -> bool:
    """Whether a request without capacity requests can take the device when nobody shares it."""
    try:
        return request_fits({}, capacities, {}) is not None
    except CapacityError:
        return False
