"""Kubernetes' CEL Quantity type (k8s.io/apiserver/pkg/cel/library/quantity.go), re-implemented.

The value and its parser are the state model's (extender/state/quantity.py: apimachinery's ParseQuantity over
an exact Fraction); this module only gives that value a CEL runtime form and the library's functions.

cel-expr-python cannot carry opaque values, so a Quantity travels through the CEL runtime as `bytes`:
the tag QUANTITY_TAG followed by the decimal digits of the value in nano-units. Every Kubernetes
quantity is a whole number of nano-units (ParseQuantity rounds finer values up), so the encoding is exact
and canonical: CEL's own `==` on the bytes is Quantity equality, as upstream (`quantity('1Gi') ==
quantity('1024Mi')`). The type checker still sees the distinct type `kubernetes.Quantity` (see
environment.py), so `<` on quantities or `quantity('1') == 1` are compile errors, as upstream.

Semantic notes against upstream:
- quantity() is ParseQuantity (no white space trimming: that belongs to JSON decoding); see the state
  module for its syntax, rounding, cap of binary values and the bounds upstream does not have.
- isInteger()/asInteger() answer for the value: "is a whole number that fits int64". Upstream answers
  for the internal representation, which differs only for non-canonical literals such as
  quantity('50.0') or quantity('1.5Gi') (false upstream). Capacities come from the API server in
  canonical form, where both agree.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import TypeGuard

from extender.state.fields import MAX_INT64, MIN_INT64
from extender.state.quantity import NANO, QuantityError, parse_quantity_string, round_to_nano

QUANTITY_TAG = b"\xffQ"
QUANTITY_TYPE_NAME = "kubernetes.Quantity"

# quantity() raises the state model's QuantityError; this older name (used by the CEL tests) is the same class.
QuantityParseError = QuantityError


def encode(value: Fraction) -> bytes:
    """The CEL runtime form of a quantity.

    Parsed quantities are whole nano-units already; a value computed elsewhere is rounded as ParseQuantity would.
    """
    nanos = value * NANO
    if nanos.denominator != 1:
        nanos = round_to_nano(value) * NANO
    return QUANTITY_TAG + str(nanos.numerator).encode()


def is_quantity(raw: object) -> TypeGuard[bytes | bytearray]:
    return isinstance(raw, (bytes, bytearray)) and raw[:2] == QUANTITY_TAG


@lru_cache(maxsize=8192)
def _nanos(raw: bytes) -> int:
    return int(raw[2:])


def nanos(raw: object) -> int:
    """The value of an encoded quantity in nano-units; TypeError when raw is not a quantity."""
    if not is_quantity(raw):
        raise TypeError("no such overload")
    return _nanos(bytes(raw))


def decode(raw: object) -> Fraction:
    return Fraction(nanos(raw), NANO)


def _from_nanos(value: int) -> bytes:
    return QUANTITY_TAG + str(value).encode()


# --- the CEL functions (impls receive runtime values: bytes arrive as bytearray) --------------------------


def cel_quantity(text: str) -> bytes:
    return encode(parse_quantity_string(text))


def cel_is_quantity(text: str) -> bool:
    try:
        parse_quantity_string(text)
    except QuantityError:
        return False
    return True


def cel_sign(raw: bytearray) -> int:
    value = nanos(raw)
    return (value > 0) - (value < 0)


def compare(left: bytearray, right: bytearray) -> int:
    a, b = nanos(left), nanos(right)
    return (a > b) - (a < b)


def cel_as_approximate_float(raw: bytearray) -> float:
    return float(decode(raw))


def _as_int64(raw: bytearray) -> int | None:
    value = nanos(raw)
    whole, rest = divmod(value, NANO)
    if rest or not MIN_INT64 <= whole <= MAX_INT64:
        return None
    return whole


def cel_is_integer(raw: bytearray) -> bool:
    return _as_int64(raw) is not None


def cel_as_integer(raw: bytearray) -> int:
    whole = _as_int64(raw)
    if whole is None:
        raise ValueError("cannot convert value to integer")
    return whole


def cel_add(left: bytearray, right: bytearray | int) -> bytes:
    if isinstance(right, int) and not isinstance(right, bool):
        return _from_nanos(nanos(left) + right * NANO)
    return _from_nanos(nanos(left) + nanos(right))


def cel_sub(left: bytearray, right: bytearray | int) -> bytes:
    if isinstance(right, int) and not isinstance(right, bool):
        return _from_nanos(nanos(left) - right * NANO)
    return _from_nanos(nanos(left) - nanos(right))
