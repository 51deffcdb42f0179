"""DeviceTaintRule (DRADeviceTaints): cluster-level taints added to the devices a rule selects."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from extender.state.core import Taint, parse_metadata
from extender.state.dra.devices import TAINT_EFFECTS, Device, ResourceSlice
from extender.state.errors import ObjectError
from extender.state.fields import get_map, get_str


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    """A cluster-level taint on the devices its selector names (DRADeviceTaints); the scheduler treats it like
    a taint the driver published on the device itself. Empty selector fields match everything."""

    name: str
    driver: str
    pool: str
    device: str
    taint: Taint
    # Older API versions could also select by DeviceClass or CEL; such rules are not applied (logged by callers).
    unsupported_selector: bool = False

    def matches(self, device: Device) -> bool:
        if self.unsupported_selector:
            return False
        return (
            (not self.driver or self.driver == device.driver)
            and (not self.pool or self.pool == device.pool)
            and (not self.device or self.device == device.name)
        )


def parse_device_taint_rule(obj: Mapping[str, Any]) -> DeviceTaintRule:
    meta = parse_metadata(obj, namespaced=False)
    spec = get_map(obj, "spec", "", required=True)
    selector = get_map(spec, "deviceSelector", "spec")
    taint_raw = get_map(spec, "taint", "spec", required=True)
    effect = get_str(taint_raw, "effect", "spec.taint", required=True)
    if effect not in TAINT_EFFECTS:
        raise ObjectError("spec.taint.effect", f"unknown effect {effect!r}")
    taint = Taint(
        key=get_str(taint_raw, "key", "spec.taint", required=True),
        value=get_str(taint_raw, "value", "spec.taint"),
        effect=effect,
    )
    return DeviceTaintRule(
        name=meta.name,
        driver=get_str(selector, "driver", "spec.deviceSelector"),
        pool=get_str(selector, "pool", "spec.deviceSelector"),
        device=get_str(selector, "device", "spec.deviceSelector"),
        taint=taint,
        unsupported_selector=bool(selector.get("deviceClassName") or selector.get("selectors")),
    )


def apply_taint_rules(resource_slice: ResourceSlice, rules: Sequence[DeviceTaintRule]) -> ResourceSlice:
    """The slice with the rules' taints added to the devices they select (the same object when none match)."""
    relevant = [rule for rule in rules if not rule.driver or rule.driver == resource_slice.driver]
    if not relevant:
        return resource_slice
    changed = False
    devices = []
    for device in resource_slice.devices:
        extra = tuple(rule.taint for rule in relevant if rule.matches(device) and rule.taint not in device.taints)
        if extra:
            changed = True
            device = replace(device, taints=device.taints + extra)
        devices.append(device)
    return replace(resource_slice, devices=tuple(devices)) if changed else resource_slice
