"""Field readers shared by the resource.k8s.io kinds: quantities, taint effects and CEL selectors."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from extender.state.errors import ObjectError
from extender.state.fields import child_path, get_map, get_str, map_items
from extender.state.quantity import QuantityError, parse_quantity

TAINT_EFFECTS = frozenset({"None", "NoSchedule", "NoExecute"})


def parse_quantity_field(raw: object, path: str) -> Fraction:
    try:
        return parse_quantity(raw)
    except QuantityError as error:
        raise ObjectError(path, str(error)) from None


def parse_selectors(raw: Mapping[str, Any], path: str) -> tuple[str, ...]:
    """CEL expressions; a selector without one (a selector type this client does not know) is kept as "",
    which fails to compile when the allocator reaches a device, as upstream's "CEL expression empty
    (unsupported selector type?)" error does (structured/internal/incubating selectorsMatch)."""
    expressions = []
    for selector_path, selector in map_items(raw, "selectors", path):
        cel = get_map(selector, "cel", selector_path)
        expressions.append(get_str(cel, "expression", child_path(selector_path, "cel")))
    return tuple(expressions)
