"""Static checks and rewrites that make cel-cpp's checked AST behave like the Kubernetes DRA CEL environment.

* `fix_presence_tests`: cel-cpp's checker turns `has(device.driver)` into the variable `device.driver`
  itself (a string), so those presence tests, always true upstream, are replaced by `true` in the source.
* `validate`: what cel-go rejects at compile time and cel-cpp doesn't: mixed-type list/map literals
  (cel.HomogeneousAggregateLiterals, `format` arguments exempt), unknown `device` fields, a result type
  other than bool/dyn, and invalid regex/duration/timestamp literals.
* `rewrite_for_runtime`: upstream's `device.attributes` and `device.capacity` answer every lookup of an
  unknown domain with an empty map (`"x" in device.attributes["unknown"]` is false) while `in`, size()
  and iteration only see real domains. Lookups on those two maps are rewritten to
  `m[?d].orValue({})` (and `has(m.d)` to `true`, optional lookups to `optional.of(...)`), which gives
  exactly that. Calls of quantity()/semver() on literals are folded into constants.

The cost estimate (an upper bound that refuses too costly expressions at compile time) is cost.py's, as cel-go
keeps its estimator in a file of its own (checker/cost.go).
"""

from __future__ import annotations

import re
from functools import lru_cache

from cel_expr_python import cel

from extender.decisions.devices.cel import quantity_type, semver_type
from extender.decisions.devices.cel.checked_ast import (
    CALL,
    COMPREHENSION,
    CONST,
    IDENT,
    LIST,
    SELECT,
    STRUCT,
    CelType,
    CheckedExpr,
    Node,
    bool_constant,
    decode_expr,
    string_constant,
)
from extender.decisions.devices.cel.environment import (
    DEVICE_FIELDS,
    VAR_DEVICE,
)
from extender.decisions.devices.cel.protowire import field_bytes, iter_fields

_STRING = CelType("primitive", "string")
_INNER_ATTRIBUTES = CelType("map", "map", (_STRING, CelType("dyn")))
_INNER_CAPACITY = CelType("map", "map", (_STRING, CelType("abstract", quantity_type.QUANTITY_TYPE_NAME)))
DOMAIN_MAP_TYPES = (
    CelType("map", "map", (_STRING, _INNER_ATTRIBUTES)),
    CelType("map", "map", (_STRING, _INNER_CAPACITY)),
)


class AnalysisError(Exception):
    """A compile-time rejection; offset is the code point offset in the source, or -1."""

    def __init__(self, message: str, offset: int = -1) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


def location(source: str, offset: int) -> str:
    if offset < 0:
        return ""
    line = source.count("\n", 0, offset) + 1
    column = offset - (source.rfind("\n", 0, offset) + 1) + 1
    return f"{line}:{column}"


# --- has(device.<field>) ----------------------------------------------------------------------------------


def _parsed_nodes(env: cel.Env, source: str) -> tuple[Node, dict[int, int]]:
    raw = env.compile(source, disable_check=True).serialize()
    root: Node | None = None
    positions: dict[int, int] = {}
    for number, _, value in iter_fields(raw):
        if number != 2 or not isinstance(value, bytes):
            continue
        for inner, _, item in iter_fields(value):
            if inner == 2 and isinstance(item, bytes):
                root = decode_expr(item)
            elif inner == 3 and isinstance(item, bytes):
                for field_no, _, entry in iter_fields(item):
                    if field_no == 4 and isinstance(entry, bytes):
                        key = offset = 0
                        for n, _, v in iter_fields(entry):
                            if n == 1 and isinstance(v, int):
                                key = v
                            elif n == 2 and isinstance(v, int):
                                offset = v
                        positions[key] = offset
    if root is None:
        raise AnalysisError("internal error: parser returned no expression")
    return root, positions


def fix_presence_tests(env: cel.Env, source: str) -> str:
    """Replace `has(device.<field>)` by `true` (padded with spaces so that error columns stay put)."""
    if "has" not in source:
        return source
    root, positions = _parsed_nodes(env, source)
    spans: list[tuple[int, int]] = []
    for node in _presence_tests_on_device(root, shadowed=False):
        open_paren = positions.get(node.id, -1)
        if open_paren < 0 or source[open_paren : open_paren + 1] != "(":
            continue
        start = open_paren
        while start > 0 and source[start - 1].isspace():
            start -= 1
        close = _closing_paren(source, open_paren)
        if source[start - 3 : start] == "has" and close > 0:
            spans.append((start - 3, close + 1))
    for begin, end in sorted(spans, reverse=True):
        blank = "".join(char if char == "\n" else " " for char in source[begin:end])
        source = source[:begin] + "true" + blank[4:] + source[end:]
    return source


def _presence_tests_on_device(node: Node, *, shadowed: bool) -> list[Node]:
    """`has(device.<field>)` nodes of the parsed tree where `device` is the variable, not a loop variable."""
    found: list[Node] = []
    if (
        not shadowed
        and node.kind == SELECT
        and node.test_only
        and node.name in DEVICE_FIELDS
        and _is_device(node.operand)
    ):
        found.append(node)
    if node.kind == COMPREHENSION:
        inner = shadowed or VAR_DEVICE in (node.iter_var, node.iter_var2, node.accu_var)
        for child in (node.iter_range, node.accu_init):
            if child is not None:
                found += _presence_tests_on_device(child, shadowed=shadowed)
        for child in (node.loop_condition, node.loop_step, node.result):
            if child is not None:
                found += _presence_tests_on_device(child, shadowed=inner)
        return found
    for child in node.children():
        found += _presence_tests_on_device(child, shadowed=shadowed)
    return found


def _closing_paren(source: str, open_paren: int) -> int:
    """The offset of the `)` closing `has(` when only a dotted name and comments lie between, else -1."""
    index = open_paren + 1
    while index < len(source):
        char = source[index]
        if source.startswith("//", index):
            newline = source.find("\n", index)
            if newline < 0:
                return -1
            index = newline + 1
            continue
        if char == ")":
            return index
        if not (char.isspace() or char.isalnum() or char in "_."):
            return -1
        index += 1
    return -1


# --- validation -------------------------------------------------------------------------------------------


def _unwrap_optional(cel_type: CelType) -> CelType:
    if cel_type.kind == "abstract" and cel_type.name == "optional_type" and cel_type.params:
        return cel_type.params[0]
    return cel_type


def validate(checked: CheckedExpr) -> None:
    result = checked.type_of(checked.root)
    if result.kind not in ("dyn", "error") and not (result.kind == "primitive" and result.name == "bool"):
        raise AnalysisError(f"must evaluate to bool or the unknown type, not {result}")
    _check_literals(checked, checked.root, exempt=False)
    _check_device_uses(checked, checked.root, shadowed=False)
    for node in checked.root.walk():
        _check_literal_arguments(checked, node)


def _check_literals(checked: CheckedExpr, node: Node, *, exempt: bool) -> None:
    stack: list[tuple[Node, bool]] = [(node, exempt)]
    while stack:
        current, inside_format = stack.pop()
        if current.kind == CALL and current.name == "format":
            inside_format = True
        if not inside_format and current.kind == LIST:
            first: CelType | None = None
            for index, element in enumerate(current.args):
                element_type = checked.type_of(element)
                if index in current.optional_indices:
                    element_type = _unwrap_optional(element_type)
                if first is None:
                    first = element_type
                elif not first.equivalent(element_type):
                    raise AnalysisError(
                        f"expected type '{first}' but found '{element_type}'", checked.positions.get(element.id, -1)
                    )
        if not inside_format and current.kind == STRUCT and not current.name:
            key_type: CelType | None = None
            value_type: CelType | None = None
            for entry in current.entries:
                assert entry.map_key is not None
                this_key = checked.type_of(entry.map_key)
                this_value = checked.type_of(entry.value)
                if entry.optional:
                    this_value = _unwrap_optional(this_value)
                if key_type is None or value_type is None:
                    key_type, value_type = this_key, this_value
                    continue
                if not key_type.equivalent(this_key):
                    raise AnalysisError(
                        f"expected type '{key_type}' but found '{this_key}'",
                        checked.positions.get(entry.map_key.id, -1),
                    )
                if not value_type.equivalent(this_value):
                    raise AnalysisError(
                        f"expected type '{value_type}' but found '{this_value}'",
                        checked.positions.get(entry.value.id, -1),
                    )
        stack.extend((child, inside_format) for child in current.children())


def _is_device(node: Node | None) -> bool:
    return node is not None and node.kind == IDENT and node.name == VAR_DEVICE


def _check_device_uses(checked: CheckedExpr, node: Node, *, shadowed: bool) -> None:
    """Fields of `device` other than the four declared ones, and indexing `device`, are compile errors
    upstream (`device` is an object type there); a loop variable named `device` is not concerned."""
    if node.kind == COMPREHENSION:
        inner = shadowed or VAR_DEVICE in (node.iter_var, node.iter_var2, node.accu_var)
        for child in (node.iter_range, node.accu_init):
            if child is not None:
                _check_device_uses(checked, child, shadowed=shadowed)
        for child in (node.loop_condition, node.loop_step, node.result):
            if child is not None:
                _check_device_uses(checked, child, shadowed=inner)
        return
    if not shadowed:
        _check_device_use(checked, node)
    for child in node.children():
        _check_device_uses(checked, child, shadowed=shadowed)


def _check_device_use(checked: CheckedExpr, node: Node) -> None:
    if node.kind == SELECT and _is_device(node.operand) and node.name not in DEVICE_FIELDS:
        raise AnalysisError(f"undefined field '{node.name}'", checked.positions.get(node.id, -1))
    if node.kind == CALL and node.name in ("_[_]", "_[?_]") and node.args and _is_device(node.args[0]):
        raise AnalysisError(
            f"found no matching overload for '{node.name}' applied to '(kubernetes.DRADevice, "
            f"{checked.type_of(node.args[1]) if len(node.args) > 1 else 'dyn'})'",
            checked.positions.get(node.id, -1),
        )


_LITERAL_CHECKS = {"matches": "''.matches(x)", "duration": "duration(x)", "timestamp": "timestamp(x)"}


def _check_literal_arguments(checked: CheckedExpr, node: Node) -> None:
    if node.kind != CALL or node.name not in _LITERAL_CHECKS or not node.args:
        return
    argument = node.args[-1]
    if argument.kind != CONST or argument.const_type != "string":
        return
    problem = _literal_problem(node.name, str(argument.value))
    if problem:
        raise AnalysisError(problem, checked.positions.get(argument.id, -1))


@lru_cache(maxsize=256)
def _literal_problem(function: str, literal: str) -> str:
    program = _literal_env().compile(_LITERAL_CHECKS[function])
    try:
        value = program.eval(data={"x": literal})
    except RuntimeError as error:
        return f"invalid {function} argument {literal!r}: {_short_status(str(error))}"
    if value.type() == cel.Type.ERROR:
        return f"invalid {function} argument {literal!r}: {_short_status(str(value.value()))}"
    return ""


@lru_cache(maxsize=1)
def _literal_env() -> cel.Env:
    return cel.NewEnv(variables={"x": cel.Type.STRING})


def _short_status(message: str) -> str:
    message = re.sub(r"^[A-Z_]+: ", "", message.strip())
    return re.sub(r"\s*\[[A-Z_]+\]$", "", message)


# --- rewriting for the runtime ----------------------------------------------------------------------------


class _Ids:
    def __init__(self, start: int) -> None:
        self.next = start

    def new(self) -> int:
        self.next += 1
        return self.next


def rewrite_for_runtime(checked: CheckedExpr) -> None:
    ids = _Ids(checked.max_id() + 1000)
    checked.root = _rewrite(checked, checked.root, ids)


def _is_domain_map(checked: CheckedExpr, node: Node | None) -> bool:
    return node is not None and checked.type_of(node) in DOMAIN_MAP_TYPES


def _default_lookup(ids: _Ids, keep_id: int, target: Node, key: Node) -> Node:
    """`target[?key].orValue({})`, keeping the id (and so the checked type) of the replaced lookup."""
    optional = Node(ids.new(), CALL, name="_[?_]", args=[target, key])
    empty = Node(ids.new(), STRUCT)
    return Node(keep_id, CALL, name="orValue", operand=optional, args=[empty])


def _rewrite(checked: CheckedExpr, node: Node, ids: _Ids) -> Node:
    # Children first, so that nested lookups are handled too.
    if node.operand is not None:
        node.operand = _rewrite(checked, node.operand, ids)
    node.args = [_rewrite(checked, arg, ids) for arg in node.args]
    for entry in node.entries:
        if entry.map_key is not None:
            entry.map_key = _rewrite(checked, entry.map_key, ids)
        entry.value = _rewrite(checked, entry.value, ids)
    for name in ("iter_range", "accu_init", "loop_condition", "loop_step", "result"):
        child = getattr(node, name)
        if child is not None:
            setattr(node, name, _rewrite(checked, child, ids))

    if node.kind == SELECT and node.operand is not None and _is_domain_map(checked, node.operand):
        if node.test_only:
            return bool_constant(node.id, True)
        return _default_lookup(ids, node.id, node.operand, string_constant(ids.new(), node.name))
    if node.kind == CALL and node.operand is None and len(node.args) == 2 and _is_domain_map(checked, node.args[0]):
        if node.name == "_[_]":
            return _default_lookup(ids, node.id, node.args[0], node.args[1])
        if node.name in ("_[?_]", "_?._"):
            inner = _default_lookup(ids, ids.new(), node.args[0], node.args[1])
            return Node(node.id, CALL, name="optional.of", args=[inner])
    if node.kind == CALL and node.operand is None and node.name in ("quantity", "semver"):
        folded = _fold(node)
        if folded is not None:
            return folded
    return node


def _fold(node: Node) -> Node | None:
    if not node.args or any(arg.kind != CONST for arg in node.args):
        return None
    text = node.args[0].value
    if not isinstance(text, str):
        return None
    try:
        if node.name == "quantity" and len(node.args) == 1:
            encoded = quantity_type.cel_quantity(text)
        elif node.name == "semver" and len(node.args) in (1, 2):
            normalize = node.args[1].value if len(node.args) == 2 else False
            if not isinstance(normalize, bool):
                return None
            encoded = semver_type.cel_semver(text, normalize)
        else:
            return None
    except ValueError:
        return None  # leave the call: it fails at runtime, as upstream
    return Node(node.id, CONST, value=encoded, const_type="bytes", raw_const=field_bytes(7, encoded))
