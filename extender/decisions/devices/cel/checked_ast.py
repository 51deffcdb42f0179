"""A checked CEL expression (cel.expr.CheckedExpr) as plain Python objects, read from and written back to bytes.

Static analysis (field checks, homogeneous literals, cost estimate) and the rewrite that gives unknown
attribute domains an empty map both walk this tree. Field numbers follow cel/expr/syntax.proto and
cel/expr/checked.proto.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from extender.decisions.devices.cel.protowire import (
    WIRE_BYTES,
    WIRE_VARINT,
    WireError,
    field_bytes,
    field_string,
    field_varint,
    iter_fields,
    read_varint,
    signed64,
)

_ANY_CHECKED_EXPR = "type.googleapis.com/cel.expr.CheckedExpr"

# Node kinds.
CONST = "const"
IDENT = "ident"
SELECT = "select"
CALL = "call"
LIST = "list"
STRUCT = "struct"
COMPREHENSION = "comprehension"

_KIND_BY_FIELD = {3: CONST, 4: IDENT, 5: SELECT, 6: CALL, 7: LIST, 8: STRUCT, 9: COMPREHENSION}
_FIELD_BY_KIND = {kind: number for number, kind in _KIND_BY_FIELD.items()}

_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN = {1: "any", 2: "google.protobuf.Timestamp", 3: "google.protobuf.Duration"}
_WRAPPERS = {
    1: "wrapper(bool)",
    2: "wrapper(int)",
    3: "wrapper(uint)",
    4: "wrapper(double)",
    5: "wrapper(string)",
    6: "wrapper(bytes)",
}


@dataclass(slots=True)
class Entry:
    """One entry of a map or message literal."""

    id: int
    field_key: str | None
    map_key: Node | None
    value: Node
    optional: bool = False


@dataclass(slots=True)
class Node:
    id: int
    kind: str
    # CONST: the decoded value (str, int, float, bool, bytes or None) and its raw Constant message.
    value: object = None
    const_type: str = ""
    raw_const: bytes = b""
    # IDENT name, SELECT field, CALL function, STRUCT message name.
    name: str = ""
    # SELECT operand / CALL target.
    operand: Node | None = None
    args: list[Node] = field(default_factory=list)
    test_only: bool = False
    optional_indices: list[int] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    # COMPREHENSION
    iter_var: str = ""
    iter_var2: str = ""
    accu_var: str = ""
    iter_range: Node | None = None
    accu_init: Node | None = None
    loop_condition: Node | None = None
    loop_step: Node | None = None
    result: Node | None = None

    def children(self) -> Iterator[Node]:
        if self.operand is not None:
            yield self.operand
        yield from self.args
        for entry in self.entries:
            if entry.map_key is not None:
                yield entry.map_key
            yield entry.value
        for child in (self.iter_range, self.accu_init, self.loop_condition, self.loop_step, self.result):
            if child is not None:
                yield child

    def walk(self) -> Iterator[Node]:
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(list(node.children())))


@dataclass(slots=True)
class CheckedExpr:
    root: Node
    types: dict[int, CelType]  # node id -> checked type
    references: dict[int, Reference]
    positions: dict[int, int]  # node id -> code point offset in the source
    line_offsets: list[int]
    raw_source_info: bytes
    raw_references: list[bytes]
    raw_types: list[bytes]
    expr_version: str

    def type_of(self, node: Node) -> CelType:
        return self.types.get(node.id, DYN)

    def max_id(self) -> int:
        ids = [node.id for node in self.root.walk()]
        ids.extend(self.types)
        ids.extend(self.positions)
        return max(ids, default=0)


@dataclass(frozen=True, slots=True)
class Reference:
    name: str
    overload_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CelType:
    """A checked type: kind is one of dyn, null, primitive, wrapper, well_known, list, map, function,
    message, type_param, type, error, abstract; name carries the primitive/message/abstract name."""

    kind: str
    name: str = ""
    params: tuple[CelType, ...] = ()

    def __str__(self) -> str:
        if self.kind == "list":
            return f"list({self.params[0]})" if self.params else "list(dyn)"
        if self.kind == "map":
            return f"map({self.params[0]}, {self.params[1]})" if len(self.params) == 2 else "map(dyn, dyn)"
        if self.kind == "type":
            return f"type({self.params[0]})" if self.params else "type"
        if self.kind == "abstract" and self.params:
            return f"{self.name}({', '.join(str(p) for p in self.params)})"
        if self.kind in ("dyn", "null", "error"):
            return {"dyn": "dyn", "null": "null_type", "error": "*error*"}[self.kind]
        return self.name

    def equivalent(self, other: CelType) -> bool:
        """cel-go's Type.IsEquivalentType: same kind, name and parameters, type parameter names ignored."""
        if self.kind != other.kind or len(self.params) != len(other.params):
            return False
        if self.kind != "type_param" and self.name != other.name:
            return False
        return all(a.equivalent(b) for a, b in zip(self.params, other.params, strict=True))


DYN = CelType("dyn")


def decode_type(data: bytes) -> CelType:
    for number, wire, value in iter_fields(data):
        if number == 1:
            return DYN
        if number == 2:
            return CelType("null", "null_type")
        if number == 3 and wire == WIRE_VARINT:
            return CelType("primitive", _PRIMITIVES.get(int(value), "unspecified"))
        if number == 4 and wire == WIRE_VARINT:
            return CelType("wrapper", _WRAPPERS.get(int(value), "wrapper"))
        if number == 5 and wire == WIRE_VARINT:
            return CelType("well_known", _WELL_KNOWN.get(int(value), "well_known"))
        if number == 6 and isinstance(value, bytes):
            elems = [decode_type(v) for n, _, v in iter_fields(value) if n == 1 and isinstance(v, bytes)]
            return CelType("list", "list", tuple(elems[:1]) or (DYN,))
        if number == 7 and isinstance(value, bytes):
            key, val = DYN, DYN
            for n, _, v in iter_fields(value):
                if n == 1 and isinstance(v, bytes):
                    key = decode_type(v)
                elif n == 2 and isinstance(v, bytes):
                    val = decode_type(v)
            return CelType("map", "map", (key, val))
        if number == 8:
            return CelType("function", "function")
        if number == 9 and isinstance(value, bytes):
            return CelType("message", value.decode())
        if number == 10 and isinstance(value, bytes):
            return CelType("type_param", value.decode())
        if number == 11 and isinstance(value, bytes):
            return CelType("type", "type", (decode_type(value),))
        if number == 12:
            return CelType("error", "*error*")
        if number == 14 and isinstance(value, bytes):
            name = ""
            params: list[CelType] = []
            for n, _, v in iter_fields(value):
                if n == 1 and isinstance(v, bytes):
                    name = v.decode()
                elif n == 2 and isinstance(v, bytes):
                    params.append(decode_type(v))
            return CelType("abstract", name, tuple(params))
    return DYN


def _decode_constant(data: bytes) -> tuple[str, object]:
    for number, _wire, value in iter_fields(data):
        if number == 1:
            return "null", None
        if number == 2:
            return "bool", bool(value)
        if number == 3:
            return "int", signed64(int(value))
        if number == 4:
            return "uint", int(value)
        if number == 5:
            return "double", struct.unpack("<d", int(value).to_bytes(8, "little"))[0]
        if number == 6 and isinstance(value, bytes):
            return "string", value.decode()
        if number == 7 and isinstance(value, bytes):
            return "bytes", bytes(value)
        if number in (8, 9):
            return "other", None
    return "other", None


def decode_expr(data: bytes) -> Node:
    node_id = 0
    kind = ""
    body = b""
    for number, _wire, value in iter_fields(data):
        if number == 2:
            node_id = signed64(int(value))
        elif number in _KIND_BY_FIELD and isinstance(value, bytes):
            kind = _KIND_BY_FIELD[number]
            body = value
    if not kind:
        raise WireError(f"expression node {node_id} has no kind")
    node = Node(node_id, kind)
    if kind == CONST:
        node.const_type, node.value = _decode_constant(body)
        node.raw_const = bytes(body)
    elif kind == IDENT:
        for number, _, value in iter_fields(body):
            if number == 1 and isinstance(value, bytes):
                node.name = value.decode()
    elif kind == SELECT:
        for number, _, value in iter_fields(body):
            if number == 1 and isinstance(value, bytes):
                node.operand = decode_expr(value)
            elif number == 2 and isinstance(value, bytes):
                node.name = value.decode()
            elif number == 3:
                node.test_only = bool(value)
    elif kind == CALL:
        for number, _, value in iter_fields(body):
            if number == 1 and isinstance(value, bytes):
                node.operand = decode_expr(value)
            elif number == 2 and isinstance(value, bytes):
                node.name = value.decode()
            elif number == 3 and isinstance(value, bytes):
                node.args.append(decode_expr(value))
    elif kind == LIST:
        for number, wire, value in iter_fields(body):
            if number == 1 and isinstance(value, bytes):
                node.args.append(decode_expr(value))
            elif number == 2 and wire == WIRE_VARINT:
                node.optional_indices.append(int(value))
            elif number == 2 and wire == WIRE_BYTES and isinstance(value, bytes):  # packed
                pos = 0
                while pos < len(value):
                    index, pos = read_varint(value, pos)
                    node.optional_indices.append(index)
    elif kind == STRUCT:
        for number, _, value in iter_fields(body):
            if number == 1 and isinstance(value, bytes):
                node.name = value.decode()
            elif number == 2 and isinstance(value, bytes):
                node.entries.append(_decode_entry(value))
    else:  # COMPREHENSION
        for number, _, value in iter_fields(body):
            if not isinstance(value, bytes):
                continue
            if number == 1:
                node.iter_var = value.decode()
            elif number == 2:
                node.iter_range = decode_expr(value)
            elif number == 3:
                node.accu_var = value.decode()
            elif number == 4:
                node.accu_init = decode_expr(value)
            elif number == 5:
                node.loop_condition = decode_expr(value)
            elif number == 6:
                node.loop_step = decode_expr(value)
            elif number == 7:
                node.result = decode_expr(value)
            elif number == 8:
                node.iter_var2 = value.decode()
    return node


def _decode_entry(data: bytes) -> Entry:
    entry_id = 0
    field_key: str | None = None
    map_key: Node | None = None
    value_node: Node | None = None
    optional = False
    for number, _, value in iter_fields(data):
        if number == 1:
            entry_id = signed64(int(value))
        elif number == 2 and isinstance(value, bytes):
            field_key = value.decode()
        elif number == 3 and isinstance(value, bytes):
            map_key = decode_expr(value)
        elif number == 4 and isinstance(value, bytes):
            value_node = decode_expr(value)
        elif number == 5:
            optional = bool(value)
    if value_node is None:
        raise WireError(f"literal entry {entry_id} has no value")
    return Entry(entry_id, field_key, map_key, value_node, optional)


def encode_expr(node: Node) -> bytes:
    if node.kind == CONST:
        body = node.raw_const
    elif node.kind == IDENT:
        body = field_string(1, node.name)
    elif node.kind == SELECT:
        assert node.operand is not None
        body = field_bytes(1, encode_expr(node.operand)) + field_string(2, node.name)
        if node.test_only:
            body += field_varint(3, 1)
    elif node.kind == CALL:
        body = b""
        if node.operand is not None:
            body += field_bytes(1, encode_expr(node.operand))
        body += field_string(2, node.name)
        for arg in node.args:
            body += field_bytes(3, encode_expr(arg))
    elif node.kind == LIST:
        body = b"".join(field_bytes(1, encode_expr(arg)) for arg in node.args)
        body += b"".join(field_varint(2, index) for index in node.optional_indices)
    elif node.kind == STRUCT:
        body = field_string(1, node.name) if node.name else b""
        for entry in node.entries:
            raw = field_varint(1, entry.id)
            if entry.field_key is not None:
                raw += field_string(2, entry.field_key)
            elif entry.map_key is not None:
                raw += field_bytes(3, encode_expr(entry.map_key))
            raw += field_bytes(4, encode_expr(entry.value))
            if entry.optional:
                raw += field_varint(5, 1)
            body += field_bytes(2, raw)
    else:
        parts = [field_string(1, node.iter_var)]
        for number, child in ((2, node.iter_range),):
            if child is not None:
                parts.append(field_bytes(number, encode_expr(child)))
        parts.append(field_string(3, node.accu_var))
        for number, child in (
            (4, node.accu_init),
            (5, node.loop_condition),
            (6, node.loop_step),
            (7, node.result),
        ):
            if child is not None:
                parts.append(field_bytes(number, encode_expr(child)))
        if node.iter_var2:
            parts.append(field_string(8, node.iter_var2))
        body = b"".join(parts)
    return field_varint(2, node.id) + field_bytes(_FIELD_BY_KIND[node.kind], body)


def string_constant(node_id: int, value: str) -> Node:
    return Node(node_id, CONST, value=value, const_type="string", raw_const=field_string(6, value))


def bool_constant(node_id: int, value: bool) -> Node:
    return Node(node_id, CONST, value=value, const_type="bool", raw_const=field_varint(2, int(value)))


def decode_checked(serialized: bytes) -> CheckedExpr:
    """Read the `Any{CheckedExpr}` bytes that cel-expr-python's Expression.serialize() returns."""
    type_url = ""
    payload = b""
    for number, _, value in iter_fields(serialized):
        if number == 1 and isinstance(value, bytes):
            type_url = value.decode()
        elif number == 2 and isinstance(value, bytes):
            payload = value
    if type_url != _ANY_CHECKED_EXPR:
        raise WireError(f"not a checked expression: {type_url!r}")
    root: Node | None = None
    types: dict[int, CelType] = {}
    references: dict[int, Reference] = {}
    raw_references: list[bytes] = []
    raw_types: list[bytes] = []
    raw_source_info = b""
    expr_version = ""
    for number, _, value in iter_fields(payload):
        if not isinstance(value, bytes):
            continue
        if number == 2:
            raw_references.append(bytes(value))
            key, ref = _decode_map_entry(value)
            if ref is not None:
                references[key] = _decode_reference(ref)
        elif number == 3:
            raw_types.append(bytes(value))
            key, raw_type = _decode_map_entry(value)
            if raw_type is not None:
                types[key] = decode_type(raw_type)
        elif number == 4:
            root = decode_expr(value)
        elif number == 5:
            raw_source_info = bytes(value)
        elif number == 6:
            expr_version = value.decode()
    if root is None:
        raise WireError("checked expression without an expression")
    positions, line_offsets = _decode_source_info(raw_source_info)
    return CheckedExpr(
        root=root,
        types=types,
        references=references,
        positions=positions,
        line_offsets=line_offsets,
        raw_source_info=raw_source_info,
        raw_references=raw_references,
        raw_types=raw_types,
        expr_version=expr_version,
    )


def encode_checked(checked: CheckedExpr) -> bytes:
    """Write the (possibly rewritten) tree back as `Any{CheckedExpr}`, keeping references and types."""
    payload = b"".join(field_bytes(2, raw) for raw in checked.raw_references)
    payload += b"".join(field_bytes(3, raw) for raw in checked.raw_types)
    payload += field_bytes(4, encode_expr(checked.root))
    if checked.raw_source_info:
        payload += field_bytes(5, checked.raw_source_info)
    if checked.expr_version:
        payload += field_string(6, checked.expr_version)
    return field_string(1, _ANY_CHECKED_EXPR) + field_bytes(2, payload)


def _decode_map_entry(data: bytes) -> tuple[int, bytes | None]:
    key = 0
    value: bytes | None = None
    for number, _, item in iter_fields(data):
        if number == 1 and not isinstance(item, bytes):
            key = signed64(item)
        elif number == 2 and isinstance(item, bytes):
            value = bytes(item)
    return key, value


def _decode_reference(data: bytes) -> Reference:
    name = ""
    overloads: list[str] = []
    for number, _, value in iter_fields(data):
        if number == 1 and isinstance(value, bytes):
            name = value.decode()
        elif number == 3 and isinstance(value, bytes):
            overloads.append(value.decode())
    return Reference(name, tuple(overloads))


def _decode_source_info(data: bytes) -> tuple[dict[int, int], list[int]]:
    positions: dict[int, int] = {}
    line_offsets: list[int] = []
    for number, wire, value in iter_fields(data):
        if number == 4 and isinstance(value, bytes):
            key = 0
            offset = 0
            for n, _, v in iter_fields(value):
                if n == 1 and not isinstance(v, bytes):
                    key = signed64(v)
                elif n == 2 and not isinstance(v, bytes):
                    offset = signed64(v)
            positions[key] = offset
        elif number == 3:
            if wire == WIRE_BYTES and isinstance(value, bytes):
                pos = 0
                while pos < len(value):
                    item, pos = read_varint(value, pos)
                    line_offsets.append(signed64(item))
            elif not isinstance(value, bytes):
                line_offsets.append(signed64(value))
    return positions, line_offsets
