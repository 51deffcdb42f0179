"""What one device taken on one node costs in quota: devices, counters or capacity, per deviceClassMapping.

Kueue v0.19.2 (pkg/dra/mapper.go, counters.go, capacity.go, claims.go) charges a DeviceClass in one of three
ways, chosen by the mapping that lists it:

- no `sources`: the number of devices, under the mapping's name (claims.go countDevicesPerClass);
- `counter` sources (KueueDRAIntegrationPartitionableDevices): instead of devices, the counter `name` that the
  devices of `driver` selected by `deviceSelector` consume (`consumesCounters`), under the name of the mapping
  the source belongs to; a class may feed several mappings, one counter each (counters.go);
- `capacity` sources (KueueDRAIntegrationConsumableCapacity): the capacity dimension `name`, under the name of
  the first mapping listing the class (Lookup), summed over its capacity sources (capacity.go).

Kueue computes the charge before any node is chosen, as the largest value any matching device in the cluster
has, times the request's count. The extender knows the devices the allocator picks on each node, so it charges
exactly what those devices consume: their `consumesCounters`, or for capacity what the allocation result
consumed (`consumedCapacity`, consumable capacity) and otherwise the device's whole capacity, since the device
is then taken whole. Usage of allocated claims is computed by the same function, so charge and usage agree.

Names are matched as DRA defines them: a capacity source's name is a QualifiedName, unqualified meaning the
driver's domain (`memory` and `<driver>/memory` are one capacity, where Kueue looks the name up in the slice's
capacity map as spelled); a counter's name has no domain, and one qualified with the source's driver is read as
the same counter.

Bad input is never charged zero: a chosen device that no source of its class's mapping accounts for, or that
does not publish the mapping's counter or capacity, is a reason naming the mapping (in filter, a per-node
refusal; in usage, a charge error the drift report shows, decisions/quota/attribution.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from extender.decisions.devices.extended_resources import EXTENDED_CLAIM_NAME
from extender.decisions.devices.results import Allocation, ChosenDevice
from extender.decisions.devices.selection import DeviceMatcher
from extender.decisions.quota.context import QuotaContext
from extender.state.dra.devices import Device, consumed_by_name
from extender.state.kueue.device_class_mappings import DeviceClassMapping, DeviceClassSource, DeviceClassSourceKind

UNMAPPED_IGNORE = "ignore"
UNMAPPED_REJECT = "reject"

# (quota resource, amount) pairs; a node's charge is sorted by resource.
Charge = tuple[tuple[str, Fraction], ...]
_ONE = Fraction(1)


def unmapped_reason(class_name: str) -> str:
    return f"DeviceClass {class_name} has no deviceClassMapping, and unmapped classes are rejected"


def device_charge(
    device: Device,
    class_name: str,
    context: QuotaContext,
    matcher: DeviceMatcher | None,
    *,
    unmapped: str = UNMAPPED_IGNORE,
    consumed_capacity: Mapping[str, Fraction] | None = None,
) -> tuple[Charge, str]:
    """(resource, amount) pairs one device of `class_name` is charged, or a reason it cannot be charged."""
    mappings = context.mappings
    if not len(mappings):
        resource = context.resource_for_class(class_name)
        if resource is None:
            return (), unmapped_reason(class_name) if unmapped == UNMAPPED_REJECT else ""
        return ((resource, _ONE),), ""
    first = mappings.mapping_for_class(class_name)
    if first is None:
        return (), unmapped_reason(class_name) if unmapped == UNMAPPED_REJECT else ""
    listing = [mapping for mapping in mappings.mappings if class_name in mapping.device_class_names]
    counters = [(m, s) for m in listing for s in m.sources if s.kind is DeviceClassSourceKind.COUNTER]
    if counters:
        return _counter_charge(device, class_name, counters, matcher)
    capacities = [(m, s) for m in listing for s in m.sources if s.kind is DeviceClassSourceKind.CAPACITY]
    if capacities:
        return _capacity_charge(device, class_name, first, capacities, matcher, consumed_capacity)
    return ((first.name, _ONE),), ""


def _applies(source: DeviceClassSource, device: Device, matcher: DeviceMatcher | None) -> tuple[bool, str]:
    if source.driver != device.driver:
        return False, ""
    if not source.device_selector:
        return True, ""
    if matcher is None:
        matcher = DeviceMatcher()
    verdict = matcher.expression_verdict(source.device_selector, device)
    if verdict is True or verdict is False:
        return verdict, ""
    return False, verdict.describe()


def _device_name(device: Device) -> str:
    return "/".join(device.key)


def _no_source(mapping_names: list[str], kind: str, device: Device, class_name: str) -> str:
    names = ", ".join(dict.fromkeys(mapping_names))
    return (
        f"deviceClassMapping {names}: no {kind} source accounts for device {_device_name(device)} of class "
        f"{class_name} (driver {device.driver}); its quota cannot be charged"
    )


def _counter_charge(
    device: Device,
    class_name: str,
    sources: list[tuple[DeviceClassMapping, DeviceClassSource]],
    matcher: DeviceMatcher | None,
) -> tuple[Charge, str]:
    charges: dict[str, Fraction] = {}
    applied = False
    for mapping, source in sources:
        applies, failure = _applies(source, device, matcher)
        if failure:
            return (), f"deviceClassMapping {mapping.name}: deviceSelector of counter {source.name}: {failure}"
        if not applies:
            continue
        applied = True
        found = False
        amount = Fraction(0)
        for consumption in device.consumes_counters:
            value = consumption.counters.get(source.counter_key)
            if value is not None:
                found = True
                amount += max(value, Fraction(0))  # Kueue clamps a negative driver value to 0
        if not found:
            return (), (
                f"deviceClassMapping {mapping.name}: device {_device_name(device)} of driver {device.driver} "
                f"publishes no counter {source.name} in consumesCounters"
            )
        charges[mapping.name] = charges.get(mapping.name, Fraction(0)) + amount
    if not applied:
        return (), _no_source([m.name for m, _ in sources], "counter", device, class_name)
    return tuple(charges.items()), ""


def _capacity_charge(
    device: Device,
    class_name: str,
    first: DeviceClassMapping,
    sources: list[tuple[DeviceClassMapping, DeviceClassSource]],
    matcher: DeviceMatcher | None,
    consumed_capacity: Mapping[str, Fraction] | None,
) -> tuple[Charge, str]:
    amount = Fraction(0)
    applied = False
    for mapping, source in sources:
        applies, failure = _applies(source, device, matcher)
        if failure:
            return (), f"deviceClassMapping {mapping.name}: deviceSelector of capacity {source.name}: {failure}"
        if not applies:
            continue
        applied = True
        key = source.capacity_key  # `memory` and `<driver>/memory` are one capacity
        value = consumed_capacity.get(key) if consumed_capacity else None
        if value is None:
            value = device.capacity.get(key)
        if value is None:
            return (), (
                f"deviceClassMapping {mapping.name}: device {_device_name(device)} of driver {device.driver} "
                f"publishes no capacity {source.name}"
            )
        amount += max(value, Fraction(0))
    if not applied:
        return (), _no_source([m.name for m, _ in sources], "capacity", device, class_name)
    return ((first.name, amount),), ""


def counts_devices_only(context: QuotaContext, class_name: str) -> bool:
    """True when the class is charged one per device (no counter or capacity sources), so per-class counts
    are enough and devices need not be looked at one by one."""
    mapping = context.mappings.mapping_for_class(class_name) if len(context.mappings) else None
    if mapping is None:
        return True
    return not any(m.sources for m in context.mappings.mappings if class_name in m.device_class_names)


def _consumed_capacity(chosen: ChosenDevice) -> Mapping[str, Fraction] | None:
    """What the allocator says this pick consumes of a consumable-capacity device (allocation results carry
    consumedCapacity once the allocator shares such devices); None: the device is taken whole."""
    return consumed_by_name(chosen.consumed_capacity, chosen.device.driver) or None


def node_charges(
    allocation: Allocation,
    context: QuotaContext,
    unmapped: str,
    *,
    extra: Mapping[str, Fraction] | None = None,
    matcher: DeviceMatcher | None = None,
) -> tuple[dict[str, Fraction], str]:
    """Quota resource -> amount for this allocation (plus the pod's extended-resource charge `extra`); an
    error text when a device cannot be charged (an unmapped class that must be rejected, a mapping's counter
    or capacity the device does not publish)."""
    charges: dict[str, Fraction] = dict(extra) if extra else {}
    for claim in allocation.claims:
        if claim.claim.pod_claim_name == EXTENDED_CLAIM_NAME:
            continue  # charged through `extra`, whether DRA or a device plugin serves it on this node
        for chosen in claim.devices:
            if chosen.admin_access:
                continue
            pairs, error = device_charge(
                chosen.device,
                chosen.device_class,
                context,
                matcher,
                unmapped=unmapped,
                consumed_capacity=_consumed_capacity(chosen),
            )
            if error:
                return {}, error
            for resource, amount in pairs:
                charges[resource] = charges.get(resource, Fraction(0)) + amount
    return charges, ""


def class_count_charges(
    by_class: tuple[tuple[str, int], ...], context: QuotaContext, unmapped: str, extra: Mapping[str, Fraction]
) -> tuple[dict[str, Fraction], str]:
    """node_charges for classes charged one per device (counts_devices_only): the devices taken per class are
    the whole charge, so nodes taking the same counts share it."""
    charges: dict[str, Fraction] = dict(extra)
    for class_name, count in by_class:
        resource = context.resource_for_class(class_name)
        if resource is None:
            if unmapped == UNMAPPED_REJECT:
                return {}, unmapped_reason(class_name)
            continue
        charges[resource] = charges.get(resource, Fraction(0)) + count
    return charges, ""
