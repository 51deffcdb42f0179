"""DeviceClass: the selectors and extended resource name a claim's request refers to by class name, and the
parser of CEL selectors that classes and requests share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.state.core import parse_metadata
from extender.state.fields import child_path, get_map, get_str, map_items


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]  # CEL expressions, all must be true
    extended_resource_name: str = ""
    resource_version: str = ""
    # metadata.creationTimestamp (RFC 3339, so text order is time order): the scheduler resolves an explicit
    # extendedResourceName shared by two classes to the newest one.
    created: str = ""


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    meta = parse_metadata(obj, namespaced=False)
    spec = get_map(obj, "spec", "")
    return DeviceClass(
        name=meta.name,
        selectors=parse_selectors(spec, "spec"),
        extended_resource_name=get_str(spec, "extendedResourceName", "spec"),
        resource_version=meta.resource_version,
        created=get_str(get_map(obj, "metadata", ""), "creationTimestamp", "metadata"),
    )


def parse_selectors(raw: Mapping[str, Any], path: str) -> tuple[str, ...]:
    """CEL expressions; a selector without one (a selector type this client does not know) is kept as "",
    which fails to compile when the allocator reaches a device, as upstream's "CEL expression empty
    (unsupported selector type?)" error does (structured/internal/incubating selectorsMatch)."""
    expressions = []
    for selector_path, selector in map_items(raw, "selectors", path):
        cel = get_map(selector, "cel", selector_path)
        expressions.append(get_str(cel, "expression", child_path(selector_path, "cel")))
    return tuple(expressions)
