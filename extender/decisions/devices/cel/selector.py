"""Compiling and evaluating DRA device selectors.

compile_selector(expression) type-checks the expression in the checking environment, applies the static
checks of analysis.py, rewrites the checked AST for the runtime and hands it, serialized, to the runtime
environment. With a ProgramCache (an explicit BoundedMemo the caller owns) compiled selectors and compile errors
are remembered, because the same few class and request selectors are evaluated against every candidate device of
every node.

CompiledSelector.matches(device, activations) evaluates against the device's Activation (reused from the
caller's ActivationCache when given). A runtime error (a
missing attribute, a type error, a non-bool result) raises SelectorError(phase="runtime"): upstream turns
it into an error for the whole pod, not a non-match.
"""

from __future__ import annotations

import contextlib
import re

from cel_expr_python import cel

from extender.decisions.devices.cel import analysis
from extender.decisions.devices.cel import cost as cel_cost
from extender.decisions.devices.cel.checked_ast import decode_checked, encode_checked
from extender.decisions.devices.cel.device_activation import ActivationCache, DeviceDataError, activation_for
from extender.decisions.devices.cel.environment import environments
from extender.memo import BoundedMemo
from extender.state.dra.devices import Device

MAX_EXPRESSION_LENGTH = 10 * 1024  # resourceapi.CELSelectorExpressionMaxLength
MAX_COST = 1_000_000  # resourceapi.CELSelectorExpressionMaxCost
PROGRAMS_KEPT = 2048
_ERROR_TYPE = cel.Type.ERROR


class SelectorError(Exception):
    """A selector that cannot be compiled (phase "compile") or failed on a device (phase "runtime")."""

    def __init__(self, expression: str, message: str, phase: str, device: tuple[str, str, str] | None = None) -> None:
        self.expression = expression
        self.message = message
        self.phase = phase
        self.device = device
        super().__init__(str(self))

    def __str__(self) -> str:
        shown = " ".join(self.expression.split())
        if len(shown) > 120:
            shown = shown[:117] + "..."
        where = f" on device {'/'.join(self.device)}" if self.device else ""
        what = "invalid CEL selector" if self.phase == "compile" else "CEL selector failed"
        return f"{what}{where}: {self.message} (expression: {shown})"


class CompiledSelector:
    """A checked selector, ready to evaluate against devices from any thread."""

    __slots__ = ("_program", "estimated_cost", "expression")

    def __init__(self, expression: str, program: cel.Expression, estimated_cost: float) -> None:
        self.expression = expression
        self.estimated_cost = estimated_cost
        self._program = program

    def matches(self, device: Device, activations: ActivationCache | None = None) -> bool:
        try:
            activation = activation_for(device, activations)
        except DeviceDataError as error:
            raise SelectorError(self.expression, str(error), "runtime", device.key) from None
        try:
            value = self._program.eval(activation)
        except RuntimeError as error:  # failures that cel-cpp reports as a status, e.g. the iteration budget
            raise SelectorError(self.expression, runtime_error_message(str(error)), "runtime", device.key) from None
        try:
            result = value.value()
        except Exception:  # a value without Python form, e.g. an optional
            result = None
        if result is True or result is False:
            return result
        raise SelectorError(self.expression, _runtime_message(value, result), "runtime", device.key)

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r})"


def _runtime_message(value: cel.Value, result: object) -> str:
    cel_type = value.type()
    if cel_type == _ERROR_TYPE:
        return runtime_error_message(str(result))
    return f"CEL result of type {_type_name(cel_type)} could not be converted to bool"


def _type_name(cel_type: cel.Type) -> str:
    name = str(cel_type.name())
    return {"BYTES": "bytes (a quantity or version)", "DYN": "dyn"}.get(name, name.lower())


_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX = re.compile(r"\s*\[[A-Z_]+\]$")
_MISSING_KEY = re.compile(r'^Key not found in map\s*:\s*"?(.*?)"?$')
_NO_OVERLOAD = re.compile(r"^No matching overloads found\s*:\s*(.*)$")
_INDEX_ERROR = re.compile(r"^Index error: index=(-?\d+) size=\d+$")
_REWORDED = {
    "divide by zero": "division by zero",
    "Iteration budget exceeded": "iteration budget exceeded (cel-cpp allows 10000 comprehension iterations)",
}


def runtime_error_message(raw: str) -> str:
    """cel-cpp's status text, reworded like cel-go's where the meaning is the same."""
    message = _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", raw.strip()))
    message = message.replace("bytes", "kubernetes.Quantity|Semver") if message.startswith("No matching") else message
    missing = _MISSING_KEY.match(message)
    if missing:
        return f"no such key: {missing.group(1)}"
    overload = _NO_OVERLOAD.match(message)
    if overload:
        return f"no such overload: {overload.group(1)}"
    index = _INDEX_ERROR.match(message)
    if index:
        return f"index out of bounds: {index.group(1)}"
    return _REWORDED.get(message, message)


def _compile_message(raw: str) -> str:
    """The checker's errors on one line: "1:4: Syntax error: ..." joined by "; "."""
    errors = [line.strip() for line in raw.splitlines() if "ERROR:" in line]
    if not errors:
        return _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", raw.strip().splitlines()[0] if raw.strip() else raw))
    cleaned = []
    for line in errors:
        line = line[line.index("ERROR:") + len("ERROR:") :].strip()
        line = re.sub(r"^<input>:", "", line)
        cleaned.append(_STATUS_SUFFIX.sub("", line))
    return "compilation failed: " + "; ".join(cleaned)


def _compile(expression: str) -> CompiledSelector:
    try:
        size = len(expression.encode())
    except UnicodeEncodeError as error:  # a lone surrogate (YAML's "\ud800"): not UTF-8, as the API requires
        raise SelectorError(expression, f"expression is not valid UTF-8: {error.reason}", "compile") from None
    if size > MAX_EXPRESSION_LENGTH:
        raise SelectorError(
            expression,
            f"expression too long: {size} bytes, at most {MAX_EXPRESSION_LENGTH}",
            "compile",
        )
    envs = environments()
    with envs.lock:
        try:
            source = analysis.fix_presence_tests(envs.checker, expression)
            checked_raw = envs.checker.compile(source).serialize()
        except RuntimeError as error:
            raise SelectorError(expression, _compile_message(str(error)), "compile") from None
        except analysis.AnalysisError as error:
            raise SelectorError(expression, error.message, "compile") from None
        checked = decode_checked(checked_raw)
        try:
            analysis.validate(checked)
        except analysis.AnalysisError as error:
            where = analysis.location(expression, error.offset)
            message = f"compilation failed: {where}: {error.message}" if where else error.message
            raise SelectorError(expression, message, "compile") from None
        cost = cel_cost.estimate_cost(checked)
        if cost > MAX_COST:
            raise SelectorError(
                expression,
                f"too complex: estimated cost {_format_cost(cost)} exceeds the limit of {MAX_COST}",
                "compile",
            )
        analysis.rewrite_for_runtime(checked)
        program = envs.runtime.deserialize(encode_checked(checked))
        # Plan the program now rather than in the first match. An evaluation failure without a device
        # (e.g. the iteration budget) is matches()'s to report.
        with contextlib.suppress(RuntimeError):
            program.eval(data={})
    return CompiledSelector(expression, program, cost)


def _format_cost(cost: float) -> str:
    return "more than 9.2e18" if cost >= cel_cost.UNBOUNDED else str(int(cost))


ProgramCache = BoundedMemo[str, CompiledSelector | SelectorError]


def new_program_cache() -> ProgramCache:
    return BoundedMemo("cel_programs", PROGRAMS_KEPT)


def compile_selector(expression: str, programs: ProgramCache | None = None) -> CompiledSelector:
    """The compiled selector for an expression; SelectorError(phase="compile") if it is invalid.
    With `programs`, both outcomes are remembered there."""
    cached = programs.get(expression) if programs is not None else None
    if cached is None:
        try:
            cached = _compile(expression)
        except SelectorError as error:
            cached = error
        if programs is not None:
            programs.put(expression, cached)
    if isinstance(cached, SelectorError):
        raise SelectorError(cached.expression, cached.message, cached.phase)
    return cached
