"""An upper bound of a selector's evaluation cost, in the spirit of cel-go's estimator (checker/cost.go
CostEstimator): each node's cost from the sizes its operands can have, sizes bounded by what the DRA environment
allows (the API's limits on driver names, attribute and capacity names, string values), as upstream's
sizeEstimator tells cel-go (k8s.io/dynamic-resource-allocation cel/compile.go). cel-cpp has no runtime cost
limit, so an expression whose bound exceeds the limit is refused at compile time (cel/selector.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from extender.decisions.devices.cel.checked_ast import (
    COMPREHENSION,
    CONST,
    IDENT,
    LIST,
    SELECT,
    STRUCT,
    CheckedExpr,
    Node,
)
from extender.decisions.devices.cel.environment import (
    VAR_ATTRIBUTES,
    VAR_CAPACITY,
    VAR_DEVICE,
    VAR_DRIVER,
    VAR_MULTI,
)

UNBOUNDED = float(2**63)


@dataclass(frozen=True, slots=True)
class Size:
    """Upper bound of a value's size: characters of a string, elements of a list or map; `element`
    bounds the elements' own sizes (for maps: the values)."""

    length: float = 1.0
    element: Size | None = None
    key: Size | None = None


_SCALAR = Size(1.0)
_UNKNOWN = Size(UNBOUNDED, None)
_DOMAIN = Size(63.0)
_ID = Size(32.0)
_ATTRIBUTE_VALUE = Size(64.0, Size(64.0))  # strings up to 64 characters (lists up to 48 values)
_VARIABLE_SIZES = {
    VAR_DRIVER: Size(63.0),
    VAR_MULTI: _SCALAR,
    VAR_ATTRIBUTES: Size(32.0, Size(32.0, _ATTRIBUTE_VALUE, _ID), _DOMAIN),
    VAR_CAPACITY: Size(32.0, Size(32.0, _SCALAR, _ID), _DOMAIN),
    VAR_DEVICE: Size(4.0, Size(63.0, Size(32.0, Size(32.0, _ATTRIBUTE_VALUE, _ID), _DOMAIN)), Size(24.0)),
}
_COMPARISONS = {"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"}
_STRING_LINEAR = {
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "join",
    "substring",
    "charAt",
    "indexOf",
    "lastIndexOf",
    "find",
    "findAll",
    "format",
    "strings.quote",
}
_LIST_LINEAR = {"@in", "sort", "sortBy", "distinct", "reverse", "flatten", "slice", "isSorted", "sum", "min", "max"}
_SET_FUNCTIONS = {"sets.contains", "sets.equivalent", "sets.intersects"}


def estimate_cost(checked: CheckedExpr) -> float:
    cost, _ = _estimate(checked.root, {})
    return cost


def _size_of_const(node: Node) -> Size:
    if isinstance(node.value, (str, bytes)):
        return Size(float(len(node.value)))
    return _SCALAR


def _estimate(node: Node, scope: dict[str, Size]) -> tuple[float, Size]:
    if node.kind == CONST:
        return 0.0, _size_of_const(node)
    if node.kind == IDENT:
        return 1.0, scope.get(node.name) or _VARIABLE_SIZES.get(node.name, _UNKNOWN)
    if node.kind == SELECT:
        assert node.operand is not None
        cost, size = _estimate(node.operand, scope)
        if node.test_only:
            return cost, _SCALAR
        return cost + 1.0, size.element or _UNKNOWN
    if node.kind == LIST:
        total = 10.0
        element = Size(0.0)
        for arg in node.args:
            cost, size = _estimate(arg, scope)
            total += cost
            element = _max_size(element, size)
        return total, Size(float(len(node.args)), element)
    if node.kind == STRUCT:
        total = 30.0 if not node.name else 40.0
        value_size = Size(0.0)
        key_size = Size(0.0)
        for entry in node.entries:
            if entry.map_key is not None:
                cost, size = _estimate(entry.map_key, scope)
                total += cost
                key_size = _max_size(key_size, size)
            cost, size = _estimate(entry.value, scope)
            total += cost
            value_size = _max_size(value_size, size)
        return total, Size(float(len(node.entries)), value_size, key_size)
    if node.kind == COMPREHENSION:
        return _estimate_comprehension(node, scope)
    return _estimate_call(node, scope)


def _max_size(a: Size, b: Size) -> Size:
    element = a.element if b.element is None else b.element if a.element is None else _max_size(a.element, b.element)
    key = a.key if b.key is None else b.key if a.key is None else _max_size(a.key, b.key)
    return Size(max(a.length, b.length), element, key)


def _estimate_comprehension(node: Node, scope: dict[str, Size]) -> tuple[float, Size]:
    assert node.iter_range is not None and node.accu_init is not None
    range_cost, range_size = _estimate(node.iter_range, scope)
    init_cost, init_size = _estimate(node.accu_init, scope)
    inner = dict(scope)
    if node.iter_var2:  # two-variable form: (index or key, value)
        inner[node.iter_var] = range_size.key or _SCALAR
        inner[node.iter_var2] = range_size.element or _UNKNOWN
    else:
        inner[node.iter_var] = (range_size.key if range_size.key is not None else range_size.element) or _UNKNOWN
    iterations = range_size.length
    # The accumulator may grow by one element per iteration (map/filter).
    inner[node.accu_var] = Size(init_size.length + iterations, init_size.element or inner[node.iter_var])
    condition_cost = _estimate(node.loop_condition, inner)[0] if node.loop_condition is not None else 0.0
    step_cost, step_size = _estimate(node.loop_step, inner) if node.loop_step is not None else (0.0, _SCALAR)
    inner[node.accu_var] = _max_size(init_size, step_size)
    result_cost, result_size = _estimate(node.result, inner) if node.result is not None else (0.0, _SCALAR)
    total = range_cost + init_cost + iterations * (condition_cost + step_cost) + result_cost
    return total, result_size


def _estimate_call(node: Node, scope: dict[str, Size]) -> tuple[float, Size]:
    target_cost, target_size = _estimate(node.operand, scope) if node.operand is not None else (0.0, None)
    estimates = [_estimate(arg, scope) for arg in node.args]
    args_cost = target_cost + sum(cost for cost, _ in estimates)
    sizes = ([target_size] if target_size is not None else []) + [size for _, size in estimates]
    name = node.name
    if name in (
        "_&&_",
        "_||_",
        "_?_:_",
        "@not_strictly_false",
        "!_",
        "orValue",
        "optional.of",
        "value",
        "hasValue",
        "or",
    ):
        if name == "_?_:_" and len(estimates) == 3:
            branch = max(estimates[1][0], estimates[2][0])
            return estimates[0][0] + branch, _max_size(estimates[1][1], estimates[2][1])
        return args_cost, sizes[0] if sizes else _SCALAR
    first = sizes[0] if sizes else _SCALAR
    if name in ("_[_]", "_[?_]", "_?._"):
        return args_cost + 1.0, first.element or _UNKNOWN
    if name == "size":
        return args_cost + 1.0, _SCALAR
    extra = 1.0
    result = _SCALAR
    if name in _COMPARISONS and sizes:
        extra += math.ceil(min(size.length for size in sizes) * 0.1)
    elif name == "_+_" and sizes:
        extra += math.ceil(sum(size.length for size in sizes) * 0.1)
    elif name in _STRING_LINEAR or name in _LIST_LINEAR:
        extra += math.ceil(first.length * 0.1) + (math.ceil(sizes[1].length * 0.1) if len(sizes) > 1 else 0)
    if name in _SET_FUNCTIONS and len(sizes) == 2:
        extra += sizes[0].length * sizes[1].length
    if name == "_+_" and len(sizes) == 2:
        element = sizes[0].element if sizes[0].element is not None else sizes[1].element
        result = Size(sizes[0].length + sizes[1].length, element)
    elif name in ("lowerAscii", "upperAscii", "trim", "substring", "find", "charAt", "strings.quote"):
        result = Size(first.length + 2.0)
    elif name == "replace":
        result = Size(first.length * max(1.0, sizes[2].length if len(sizes) > 2 else 1.0))
    elif name in ("split", "findAll"):
        result = Size(first.length + 1.0, Size(first.length))
    elif name == "join":
        result = Size(first.length * ((first.element or _UNKNOWN).length + (sizes[1].length if len(sizes) > 1 else 0)))
    elif name in ("sort", "distinct", "reverse", "slice", "sortBy"):
        result = first
    elif name == "flatten":
        inner = first.element or _UNKNOWN
        result = Size(first.length * inner.length, inner.element)
    elif name == "lists.range":
        bound = node.args[0].value if node.args and node.args[0].kind == CONST else None
        result = Size(float(bound), _SCALAR) if isinstance(bound, int) and bound >= 0 else _UNKNOWN
    elif name == "format":
        result = Size(first.length + 64.0 * (sizes[1].length if len(sizes) > 1 else 1.0))
    elif name in ("first", "last", "min", "max"):
        result = first.element or _SCALAR
    return args_cost + extra, result
