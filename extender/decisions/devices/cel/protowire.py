"""The few bits of the protobuf wire format needed to read and rewrite a serialized CEL CheckedExpr.

cel-expr-python hands out a compiled expression only as `google.protobuf.Any{CheckedExpr}` bytes and the
project does not depend on the protobuf runtime, so this decodes fields by hand. Only varints and
length-delimited fields occur in the messages we touch; fixed-width ones are skipped faithfully.
"""

from __future__ import annotations

from collections.abc import Iterator

WIRE_VARINT = 0
WIRE_FIXED64 = 1
WIRE_BYTES = 2
WIRE_FIXED32 = 5


class WireError(ValueError):
    """Bytes that are not the protobuf message we expected."""


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise WireError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError("varint too long")


def iter_fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield (field number, wire type, value): an int for varints and fixed fields, bytes otherwise."""
    pos = 0
    end = len(data)
    while pos < end:
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == WIRE_VARINT:
            value, pos = read_varint(data, pos)
            yield number, wire, value
        elif wire == WIRE_BYTES:
            length, pos = read_varint(data, pos)
            if pos + length > end:
                raise WireError("truncated length-delimited field")
            yield number, wire, data[pos : pos + length]
            pos += length
        elif wire == WIRE_FIXED64:
            if pos + 8 > end:
                raise WireError("truncated fixed64 field")
            yield number, wire, int.from_bytes(data[pos : pos + 8], "little")
            pos += 8
        elif wire == WIRE_FIXED32:
            if pos + 4 > end:
                raise WireError("truncated fixed32 field")
            yield number, wire, int.from_bytes(data[pos : pos + 4], "little")
            pos += 4
        else:
            raise WireError(f"unsupported wire type {wire}")


def signed64(value: int) -> int:
    """A varint read as int64 (negative numbers are encoded as 10-byte two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def encode_varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_varint(number: int, value: int) -> bytes:
    return encode_varint(number << 3 | WIRE_VARINT) + encode_varint(value)


def field_bytes(number: int, value: bytes) -> bytes:
    return encode_varint(number << 3 | WIRE_BYTES) + encode_varint(len(value)) + value


def field_string(number: int, value: str) -> bytes:
    return field_bytes(number, value.encode())
