"""Runtime implementations of the Kubernetes CEL libraries that cel-expr-python lacks.

Called from the C++ runtime with plain Python values (bytes arrive as bytearray); an exception becomes a
CEL error value. Quantity and Semver share method names (compareTo, isGreaterThan, isLessThan) and both
travel as tagged bytes, so the runtime has one overload per name that dispatches on the tag; the type
checker (environment.py) keeps the two types apart at compile time.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from functools import lru_cache

from extender.decisions.devices.cel import quantity_type, semver_type


def _type_name(value: object) -> str:
    if quantity_type.is_quantity(value):
        return quantity_type.QUANTITY_TYPE_NAME
    if semver_type.is_semver(value):
        return semver_type.SEMVER_TYPE_NAME
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def _no_overload(function: str, *args: object) -> TypeError:
    return TypeError(f"no such overload: {function}({', '.join(_type_name(arg) for arg in args)})")


def _compare(function: str, left: bytearray, right: bytearray) -> int:
    if quantity_type.is_quantity(left) and quantity_type.is_quantity(right):
        return quantity_type.compare(left, right)
    if semver_type.is_semver(left) and semver_type.is_semver(right):
        return semver_type.compare(left, right)
    raise _no_overload(function, left, right)


def cel_compare_to(left: bytearray, right: bytearray) -> int:
    return _compare("compareTo", left, right)


def cel_is_greater_than(left: bytearray, right: bytearray) -> bool:
    return _compare("isGreaterThan", left, right) == 1


def cel_is_less_than(left: bytearray, right: bytearray) -> bool:
    return _compare("isLessThan", left, right) == -1


def _quantity_only(function: str, impl: Callable[..., object]) -> Callable[..., object]:
    def call(*args: object) -> object:
        if not quantity_type.is_quantity(args[0]):
            raise _no_overload(function, *args)
        return impl(*args)

    return call


def _semver_only(function: str, impl: Callable[..., object]) -> Callable[..., object]:
    def call(*args: object) -> object:
        if not semver_type.is_semver(args[0]):
            raise _no_overload(function, *args)
        return impl(*args)

    return call


QUANTITY_METHODS: dict[str, Callable[..., object]] = {
    "sign": _quantity_only("sign", quantity_type.cel_sign),
    "asApproximateFloat": _quantity_only("asApproximateFloat", quantity_type.cel_as_approximate_float),
    "asInteger": _quantity_only("asInteger", quantity_type.cel_as_integer),
    "isInteger": _quantity_only("isInteger", quantity_type.cel_is_integer),
    "add": _quantity_only("add", quantity_type.cel_add),
    "sub": _quantity_only("sub", quantity_type.cel_sub),
}

SEMVER_METHODS: dict[str, Callable[..., object]] = {
    "major": _semver_only("major", semver_type.cel_major),
    "minor": _semver_only("minor", semver_type.cel_minor),
    "patch": _semver_only("patch", semver_type.cel_patch),
}


def cel_semver(text: str, normalize: bool = False) -> bytes:
    return semver_type.cel_semver(text, normalize)


def cel_is_semver(text: str, normalize: bool = False) -> bool:
    return semver_type.cel_is_semver(text, normalize)


# --- k8s.io/apiserver/pkg/cel/library/lists.go ----------------------------------------------------------


def _comparable(items: list[object], function: str) -> None:
    if items and any(type(item) is not type(items[0]) for item in items):
        raise _no_overload(function, items)


def cel_is_sorted(items: list[object]) -> bool:
    _comparable(items, "isSorted")
    return all(a <= b for a, b in itertools.pairwise(items))  # type: ignore[operator]  # the CEL checker admits only comparable, addable element types


def cel_sum(items: list[object]) -> object:
    total: object = 0
    for item in items:
        total = total + item  # type: ignore[operator]  # the CEL checker admits only comparable, addable element types
    return total


def cel_min(items: list[object]) -> object:
    if not items:
        raise ValueError("min(list) argument must not be empty")
    _comparable(items, "min")
    return min(items)  # type: ignore[type-var]  # the CEL checker admits only comparable element types


def cel_max(items: list[object]) -> object:
    if not items:
        raise ValueError("max(list) argument must not be empty")
    _comparable(items, "max")
    return max(items)  # type: ignore[type-var]  # the CEL checker admits only comparable element types


def cel_index_of(items: list[object], element: object) -> int:
    for index, item in enumerate(items):
        if item == element:
            return index
    return -1


def cel_last_index_of(items: list[object], element: object) -> int:
    for index in range(len(items) - 1, -1, -1):
        if items[index] == element:
            return index
    return -1


# --- k8s.io/apiserver/pkg/cel/library/regex.go (Python's re standing in for Go's RE2) -------------------


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def cel_find(text: str, pattern: str) -> str:
    match = _regex(pattern).search(text)
    return match.group(0) if match else ""


def cel_find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [match.group(0) for match in _regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


# --- the helper behind the two-variable comprehension macros (transformMap, transformMapEntry) -------------


def cel_map_insert(target: dict[object, object], key: object, value: object = None) -> dict[object, object]:
    result = dict(target)
    if isinstance(key, dict) and value is None:
        for entry_key, entry_value in key.items():
            if entry_key in result:
                raise ValueError(f"insert failed: key {entry_key!r} already exists")
            result[entry_key] = entry_value
        return result
    if key in result:
        raise ValueError(f"insert failed: key {key!r} already exists")
    result[key] = value
    return result
