"""The per-device CEL input, built once per device object and reused by every selector.

A device becomes the variables of the runtime environment (environment.py): attributes and capacities
grouped by domain (the part of the qualified name before its first "/", as upstream's
parseQualifiedName), versions and quantities in their tagged-bytes form.

cel-expr-python converts such Python data into CEL values when an evaluation first reads a variable and
caches the result in its Activation, so reusing one Activation per device spares converting the device's
data again on every evaluation. Two constraints of the library shape the cache:
* an Activation's arena is registered in a thread-local table; a Python-implemented function (quantity(),
  compareTo(), ...) called while evaluating on another thread fails with "No PyCelArena found", so each
  thread keeps its own Activations;
* every evaluation allocates its intermediate values in that arena and nothing is freed until the
  Activation goes, so an Activation is replaced after RENEW_AFTER evaluations.
Devices are immutable and replaced by new objects when their slice changes; the cache keys on the Device
itself, which compares and hashes by identity (state/dra/devices.py), so a replaced device gets a new Activation.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel

from extender.decisions.devices.cel import quantity_type, semver_type
from extender.decisions.devices.cel.environment import (
    VAR_ATTRIBUTES,
    VAR_CAPACITY,
    VAR_DEVICE,
    VAR_DRIVER,
    VAR_MULTI,
    environments,
)
from extender.state.dra.devices import Device

MAX_DEVICES_PER_THREAD = 4096
RENEW_AFTER = 4096


class DeviceDataError(ValueError):
    """A device whose data cannot be presented to CEL (e.g. an invalid version attribute); upstream fails
    every selector evaluated against such a device."""


def split_qualified_name(name: str, driver: str) -> tuple[str, str]:
    domain, separator, ident = name.partition("/")
    return (domain, ident) if separator else (driver, name)


def device_data(device: Device) -> dict[str, Any]:
    """The CEL variables for a device (plain Python data)."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, attribute in device.attributes.items():
        domain, ident = split_qualified_name(name, device.driver)
        value: Any = attribute.value
        if attribute.kind == "unknown":
            raise DeviceDataError(f"attribute {name}: unsupported attribute value")
        if attribute.kind == "version":
            try:
                value = semver_type.encode_attribute(str(attribute.value))
            except semver_type.SemverParseError as error:
                raise DeviceDataError(f"attribute {name}: parse semantic version: {error}") from None
        attributes.setdefault(domain, {})[ident] = value
    capacity: dict[str, dict[str, bytes]] = {}
    for name, quantity in device.capacity.items():
        domain, ident = split_qualified_name(name, device.driver)
        capacity.setdefault(domain, {})[ident] = quantity_type.encode(quantity)
    multi = bool(device.allow_multiple_allocations)
    return {
        VAR_DRIVER: device.driver,
        VAR_MULTI: multi,
        VAR_ATTRIBUTES: attributes,
        VAR_CAPACITY: capacity,
        VAR_DEVICE: {
            "driver": device.driver,
            "allowMultipleAllocations": multi,
            "attributes": attributes,
            "capacity": capacity,
        },
    }


@dataclass(slots=True)
class _Entry:
    activation: Any  # cel.Activation, or None with `error` set
    error: DeviceDataError | None
    uses: int = 0


class ActivationCache(threading.local):
    """Activations per device, one table per thread (the library's arenas are thread-local, see above).

    An explicit object owned by the caller (decisions/caches.py), not module state; its eviction is the
    library's constraint, not BoundedMemo's: oldest first past MAX_DEVICES_PER_THREAD, renewed after
    RENEW_AFTER evaluations."""

    def __init__(self) -> None:
        self.entries: dict[Device, _Entry] = {}


def _build(device: Device) -> _Entry:
    try:
        data = device_data(device)
    except DeviceDataError as error:
        return _Entry(None, error)
    return _Entry(environments().runtime.Activation(data=data), None)


def activation_for(device: Device, cache: ActivationCache | None = None) -> cel.Activation:
    """This thread's Activation for the device (a new one without a cache); DeviceDataError when the device
    cannot be presented."""
    if cache is None:
        fresh = _build(device)
        if fresh.error is not None:
            raise fresh.error
        return fresh.activation
    entries = cache.entries
    entry = entries.get(device)
    if entry is None or entry.uses >= RENEW_AFTER:
        if entry is None and len(entries) >= MAX_DEVICES_PER_THREAD:
            del entries[next(iter(entries))]  # oldest first
        entry = _build(device)
        entries[device] = entry
    if entry.error is not None:
        raise entry.error
    entry.uses += 1
    return entry.activation
