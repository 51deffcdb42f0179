"""What selecting devices answers, and the key it is remembered under: one device's verdict, a node's
selectable devices, the (class, selectors) signature.

Upstream's allocator asks the same per device (structured/internal/experimental/allocator_experimental.go,
isSelectable and selectorsMatch): true, false, or an error that fails the pod when the scan reaches the
device. These types are shared by the matcher that computes them (selection.py) and the caches that keep them
(decisions/caches.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from extender.state.dra.device_class import DeviceClass
from extender.state.dra.devices import Device

# DeviceClass name, the class's selectors, the request's selectors: what a node's selectable devices depend on.
ClassSignature = tuple[str, tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class SelectorFailure:
    """A selector that cannot be evaluated: a compile error, or a runtime error on one device."""

    expression: str
    message: str
    device: str = ""
    phase: str = "compile"

    def describe(self) -> str:
        where = f" on device {self.device}" if self.device else ""
        action = "compile" if self.phase == "compile" else "evaluate"
        return f"CEL selector {self.expression!r} failed to {action}{where}: {self.message}"


Verdict = bool | SelectorFailure


class Selectable(NamedTuple):
    devices: tuple[Device, ...]
    plain: bool  # no taints, counters or shared allocation: "free" is just "not allocated"


def class_signature(device_class: DeviceClass, selectors: tuple[str, ...]) -> ClassSignature:
    return (device_class.name, device_class.selectors, selectors)
