"""Typed reads of fields from decoded API objects.

Snapshots and wire requests come from people and programs we do not control; every read checks the type and
names the field path on failure, so a bad document becomes a clear error instead of a KeyError deep inside the
allocator.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from extender.state.errors import ObjectError

_MISSING: Any = object()
_INT64_RE = re.compile(r"[+-]?[0-9]+")
MAX_INT64 = 2**63 - 1
MIN_INT64 = -(2**63)


def child_path(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def get_map(obj: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> Mapping[str, Any]:
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise ObjectError(child_path(path, key), "is required")
        return {}
    if type(value) is not dict and not isinstance(value, Mapping):  # decoded JSON: the ABC check only off it
        raise ObjectError(child_path(path, key), f"must be an object, got {type_name(value)}")
    return value


def get_list(obj: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> list[Any]:
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise ObjectError(child_path(path, key), "is required")
        return []
    if not isinstance(value, list | tuple):
        raise ObjectError(child_path(path, key), f"must be a list, got {type_name(value)}")
    return list(value)


def get_str(obj: Mapping[str, Any], key: str, path: str, *, required: bool = False, default: str = "") -> str:
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise ObjectError(child_path(path, key), "is required")
        return default
    if not isinstance(value, str):
        raise ObjectError(child_path(path, key), f"must be a string, got {type_name(value)}")
    if required and not value:
        raise ObjectError(child_path(path, key), "must not be empty")
    return value


def get_bool(obj: Mapping[str, Any], key: str, path: str, *, default: bool = False) -> bool:
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if not isinstance(value, bool):
        raise ObjectError(child_path(path, key), f"must be a boolean, got {type_name(value)}")
    return value


def get_int(
    obj: Mapping[str, Any],
    key: str,
    path: str,
    *,
    default: int = 0,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ObjectError(child_path(path, key), f"must be an integer, got {type_name(value)}")
    if minimum is not None and value < minimum:
        raise ObjectError(child_path(path, key), f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ObjectError(child_path(path, key), f"must be at most {maximum}, got {value}")
    return value


def get_str_map(obj: Mapping[str, Any], key: str, path: str) -> dict[str, str]:
    raw = get_map(obj, key, path)
    result: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ObjectError(child_path(child_path(path, key), str(name)), "must map strings to strings")
        result[name] = value
    return result


def get_optional_str(obj: Mapping[str, Any], key: str, path: str) -> str | None:
    """A string field whose absence (or emptiness) means "not set"."""
    return get_str(obj, key, path) or None


def get_optional_int(obj: Mapping[str, Any], key: str, path: str, *, minimum: int | None = None) -> int | None:
    if obj.get(key) is None:
        return None
    return get_int(obj, key, path, minimum=minimum)


def get_str_list(obj: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> tuple[str, ...]:
    raw = get_list(obj, key, path, required=required)
    for index, item in enumerate(raw):
        if not isinstance(item, str):
            raise ObjectError(child_path(child_path(path, key), index), f"must be a string, got {type_name(item)}")
    return tuple(raw)


def map_items(
    obj: Mapping[str, Any], key: str, path: str, *, required: bool = False
) -> list[tuple[str, Mapping[str, Any]]]:
    """The items of a list of objects, each with its field path, rejecting non-object entries."""
    if obj.get(key) is None and not required:
        return []  # absent, as most optional lists are: no path to build
    items = []
    list_path = child_path(path, key)
    for index, item in enumerate(get_list(obj, key, path, required=required)):
        item_path = child_path(list_path, index)
        if type(item) is not dict and not isinstance(item, Mapping):
            raise ObjectError(item_path, f"must be an object, got {type_name(item)}")
        items.append((item_path, item))
    return items


def type_name(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "object"}.get(
        type(value), type(value).__name__
    )


def parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64): an optional sign and ASCII digits within int64, else None.

    Stricter than int(), which also takes surrounding white space, '_' separators and non-ASCII digits.
    """
    if _INT64_RE.fullmatch(text) is None or len(text.lstrip("+-").lstrip("0")) > 19:
        return None  # the length test keeps int() away from huge digit strings; leading zeros are fine in Go
    value = int(text)
    return value if MIN_INT64 <= value <= MAX_INT64 else None
