"""Kueue's API group and versions, and the field readers its kinds share."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from fractions import Fraction
from types import MappingProxyType
from typing import Any, TypeVar

from extender.state.errors import ObjectError
from extender.state.fields import child_path, get_map, get_str, get_str_map, type_name
from extender.state.quantity import QuantityError, parse_quantity

KUEUE_GROUP = "kueue.x-k8s.io"
V1BETA1 = f"{KUEUE_GROUP}/v1beta1"
V1BETA2 = f"{KUEUE_GROUP}/v1beta2"
KUEUE_API_VERSIONS = (V1BETA2, V1BETA1)


_MISSING: Any = object()
_E = TypeVar("_E", bound=StrEnum)
_EMPTY_MAP: Mapping[str, Any] = MappingProxyType({})


def no_entries() -> Mapping[str, Any]:
    """Default for a model's map field: one shared, immutable empty mapping."""
    return _EMPTY_MAP


def frozen_str_map(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, str]:
    """A string map field, immutable unlike the shared helper's dict: these models are shared by every snapshot."""
    return MappingProxyType(get_str_map(obj, key, path))


def nonnegative_quantity(obj: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> Fraction | None:
    """A quota or limit: a resource.Quantity, never negative; None when absent and not required."""
    value = obj.get(key, _MISSING)
    field_path = child_path(path, key)
    if value is _MISSING or value is None:
        if required:
            raise ObjectError(field_path, "is required")
        return None
    try:
        quantity = parse_quantity(value)
    except QuantityError as exc:
        raise ObjectError(field_path, str(exc)) from None
    if quantity < 0:
        # Kueue's webhook: quotas and limits "must be greater than or equal to 0".
        raise ObjectError(field_path, f"must be greater than or equal to 0, got {value!r}")
    return quantity


def optional_enum(obj: Mapping[str, Any], key: str, path: str, enum: type[_E]) -> _E | None:
    """An enum field as the CRD's enum validation reads it; None when absent or empty."""
    text = get_str(obj, key, path)
    if not text:
        return None
    try:
        return enum(text)
    except ValueError:
        allowed = ", ".join(member.value for member in enum)
        message = f"unsupported value {text!r}; must be one of {allowed}"
        raise ObjectError(child_path(path, key), message) from None


def enum_field(obj: Mapping[str, Any], key: str, path: str, enum: type[_E], default: _E) -> _E:
    """An enum field with the CRD's default when absent."""
    value = optional_enum(obj, key, path, enum)
    return default if value is None else value


def check_kind(obj: Mapping[str, Any], kind: str, api_versions: tuple[str, ...]) -> str:
    """The object's apiVersion, after checking kind and version; a missing one means the newest.

    List items returned by the API (and some client libraries) omit apiVersion and kind, so absence is not
    an error; a *different* kind or an unknown version is, because its fields would be misread.
    """
    if not isinstance(obj, Mapping):
        raise ObjectError("", f"must be an object, got {type_name(obj)}")
    found_kind = get_str(obj, "kind", "")
    if found_kind and found_kind != kind:
        raise ObjectError("kind", f"expected {kind}, got {found_kind!r}")
    api_version = get_str(obj, "apiVersion", "")
    if api_version and api_version not in api_versions:
        expected = ", ".join(api_versions)
        raise ObjectError("apiVersion", f"unsupported {api_version!r}; expected one of {expected}")
    return api_version


def object_name(obj: Mapping[str, Any]) -> str:
    """metadata.name, required."""
    return get_str(get_map(obj, "metadata", "", required=True), "name", "metadata", required=True)


def object_namespace(obj: Mapping[str, Any]) -> str:
    """metadata.namespace, "default" when absent: the default the state indexes' keys ("namespace/name") use."""
    return get_str(get_map(obj, "metadata", "", required=True), "namespace", "metadata", default="default")
