"""Which devices a DeviceClass or a request's selectors select, remembered per device.

The same selectors are asked about the same devices for every pod of a workload, on every candidate node:
verdicts are cached by device identity (a slice update replaces its devices, which retires their verdicts) and
by expression text, so CEL runs once per (expression, device) until the device changes.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from extender.decisions.cel import SelectorError, compile_selector
from extender.state.dra import Device, DeviceClass

# Verdict caches are cleared wholesale past this many entries; clearing costs one CEL pass over live devices.
MAX_CACHED_VERDICTS = 2_000_000


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


class DeviceMatcher:
    """Thread-safe memo of selector verdicts (a lost race only costs a duplicate evaluation)."""

    def __init__(self) -> None:
        self._verdicts: dict[str, dict[Device, Verdict]] = {}
        self._size = 0
        self._lock = threading.Lock()

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
