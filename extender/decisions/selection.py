"""Which devices a DeviceClass or a request's selectors select, remembered per device.

The same selectors are asked about the same devices for every pod of a workload, on every candidate node:
verdicts are cached by device identity (a slice update replaces its devices, which retires their verdicts) and
by expression text, so CEL runs once per (expression, device) until the device changes.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from extender.decisions.cel import SelectorError, compile_selector
from extender.state.dra import Device, DeviceClass
from extender.state.inventory import NodeDevices

# Verdict caches are cleared wholesale past this many entries; clearing costs one CEL pass over live devices.
MAX_CACHED_VERDICTS = 500_000  # ~40k devices x a dozen expressions; stale devices are dropped at each clear


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
_MISSING = object()


class Selectable(NamedTuple):
    devices: tuple[Device, ...]
    plain: bool  # no taints, counters or shared allocation: "free" is just "not allocated"


class DeviceMatcher:
    """Thread-safe memo of selector verdicts (a lost race only costs a duplicate evaluation)."""

    def __init__(self) -> None:
        self._verdicts: dict[str, dict[Device, Verdict]] = {}
        self._size = 0
        self._lock = threading.Lock()
        self._selectable: dict[
            tuple[str, tuple[str, ...], tuple[str, ...]], dict[NodeDevices, tuple[Device, ...] | None]
        ] = {}
        self._selectable_size = 0

    def selectable_on(
        self, devices: NodeDevices, device_class: DeviceClass, selectors: tuple[str, ...]
    ) -> Selectable | None:
        """The node's devices that the class and request selectors select, free or not, in order.

        None when a selector fails on any of them: the caller then takes the exact, upstream-ordered path.
        Cached per node device list, so it is computed once per slice change, not once per pod.
        """
        signature = (device_class.name, device_class.selectors, selectors)
        per_node = self._selectable.get(signature)
        if per_node is not None:
            cached = per_node.get(devices, _MISSING)
            if cached is not _MISSING:
                return cached  # type: ignore[return-value]
        result: list[Device] = []
        failed = False
        for device in devices.usable:
            verdict = self.class_verdict(device_class, device)
            if verdict is True and selectors:
                verdict = self.all_verdict(selectors, device)
            if verdict is True:
                result.append(device)
            elif verdict is not False:
                failed = True
                break
        plain = not any(d.taints or d.consumes_counters or d.allow_multiple_allocations for d in result)
        selectable = None if failed else Selectable(tuple(result), plain)
        with self._lock:
            if self._selectable_size >= MAX_CACHED_VERDICTS // 8:
                self._selectable.clear()
                self._selectable_size = 0
            self._selectable.setdefault(signature, {})[devices] = selectable
            self._selectable_size += 1
        return selectable

    def expression_verdict(self, expression: str, device: Device) -> Verdict:
        per_device = self._verdicts.get(expression)
        if per_device is not None:
            verdict = per_device.get(device)
            if verdict is not None:
                return verdict
        verdict = self._evaluate(expression, device)
        with self._lock:
            if self._size >= MAX_CACHED_VERDICTS:
                self._verdicts.clear()
                self._size = 0
            self._verdicts.setdefault(expression, {})[device] = verdict
            self._size += 1
        return verdict

    def all_verdict(self, expressions: Sequence[str], device: Device) -> Verdict:
        """All expressions true (the first failure or false wins, in order, like upstream)."""
        for expression in expressions:
            verdict = self.expression_verdict(expression, device)
            if verdict is not True:
                return verdict
        return True

    def class_verdict(self, device_class: DeviceClass, device: Device) -> Verdict:
        return self.all_verdict(device_class.selectors, device)

    @staticmethod
    def _evaluate(expression: str, device: Device) -> Verdict:
        try:
            compiled = compile_selector(expression)
        except SelectorError as error:
            return SelectorFailure(expression, error.message, phase="compile")
        try:
            return compiled.matches(device)
        except SelectorError as error:
            return SelectorFailure(expression, error.message, device="/".join(device.key), phase="runtime")
