"""DeviceClass: the selectors and extended resource name a claim's request refers to by class name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.state.core import parse_metadata
from extender.state.dra.fields import parse_selectors
from extender.state.fields import get_map, get_str


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
