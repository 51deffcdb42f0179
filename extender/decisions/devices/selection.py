"""Which devices a DeviceClass or a request's selectors select, remembered per device.

The same selectors are asked about the same devices for every pod of a workload, on every candidate node:
verdicts are remembered by device identity (a slice update replaces its devices, which retires their verdicts)
and by expression text, so CEL runs once per (expression, device) until the device changes. The memos are the
caller's (decisions/caches.py); the matcher only knows how to fill and read them, as upstream's allocator uses
the CEL cache its plugin hands it.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.decisions.caches import DecisionCaches
from extender.decisions.devices.cel import SelectorError, compile_selector
from extender.decisions.devices.selector_verdicts import Selectable, SelectorFailure, Verdict, class_signature
from extender.state.dra.device_class import DeviceClass
from extender.state.dra.devices import Device
from extender.state.inventory import NodeDevices

_MISSING = object()


class DeviceMatcher:
    """Selector verdicts through caches the caller owns (a private set when none is given: tests, one-off tools).

    Thread-safe as the caches are (BoundedMemo's rule: a lost race only costs a duplicate evaluation)."""

    __slots__ = ("_verdict_parts", "caches")

    def __init__(self, caches: DecisionCaches | None = None) -> None:
        self.caches = caches if caches is not None else DecisionCaches()
        self._verdict_parts = self.caches.verdicts.tables

    def selectable_on(
        self, devices: NodeDevices, device_class: DeviceClass, selectors: tuple[str, ...]
    ) -> Selectable | None:
        """The node's devices that the class and request selectors select, free or not, in order.

        None when a selector fails on any of them: the caller then takes the exact, upstream-ordered path.
        Remembered per node device list, so it is computed once per slice change, not once per pod.
        """
        signature = class_signature(device_class, selectors)
        memo = self.caches.selectable
        cached = memo.table(signature).get(devices, _MISSING)
        if cached is not _MISSING:
            return cached  # type: ignore[return-value]  # _MISSING is the only non-Selectable sentinel
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
        return memo.put(devices, None if failed else Selectable(tuple(result), plain), signature)

    def expression_verdict(self, expression: str, device: Device) -> Verdict:
        return self.all_verdict((expression,), device)

    def all_verdict(self, expressions: Sequence[str], device: Device) -> Verdict:
        """All expressions true (the first failure or false wins, in order, like upstream).

        The search asks this for every candidate device at every step: the memo is read inline."""
        parts = self._verdict_parts
        for expression in expressions:
            entries = parts.get(expression)
            verdict = entries.get(device) if entries is not None else None
            if verdict is None:
                verdict = self.caches.verdicts.put(device, self._evaluate(expression, device), expression)
            if verdict is not True:
                return verdict
        return True

    def class_verdict(self, device_class: DeviceClass, device: Device) -> Verdict:
        return self.all_verdict(device_class.selectors, device)

    def _evaluate(self, expression: str, device: Device) -> Verdict:
        try:
            compiled = compile_selector(expression, self.caches.programs)
        except SelectorError as error:
            return SelectorFailure(expression, error.message, phase="compile")
        try:
            return compiled.matches(device, self.caches.activations)
        except SelectorError as error:
            return SelectorFailure(expression, error.message, device="/".join(device.key), phase="runtime")
