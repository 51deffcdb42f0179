"""Kubernetes' CEL Quantity type (k8s.io/apiserver/pkg/cel/library/quantity.go), re-implemented.

cel-expr-python cannot carry opaque values, so a Quantity travels through the CEL runtime as `bytes`:
the tag QUANTITY_TAG followed by the decimal digits of the value in nano-units. Every Kubernetes
quantity is a whole number of nano-units (ParseQuantity rounds finer values up), so the encoding is exact
and canonical: CEL's own `==` on the bytes is Quantity equality, as upstream (`quantity('1Gi') ==
quantity('1024Mi')`). The type checker still sees the distinct type `kubernetes.Quantity` (see
environment.py), so `<` on quantities or `quantity('1') == 1` are compile errors, as upstream.

Semantic notes against upstream:
- quantity() follows apimachinery's ParseQuantity syntax (sign, digits, '.', suffix), its rounding of
  sub-nano values away from zero and its cap of binary-suffixed values at 2^63-1. Exponents beyond
  +-1000 are refused instead of being held symbolically.
- isInteger()/asInteger() answer for the value: "is a whole number that fits int64". Upstream answers
  for the internal representation, which differs only for non-canonical literals such as
  quantity('50.0') or quantity('1.5Gi') (false upstream). Capacities come from the API server in
  canonical form, where both agree.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Any, cast

QUANTITY_TAG = b"\xffQ"
QUANTITY_TYPE_NAME = "kubernetes.Quantity"
_NANO = 10**9
_MAX_INT64 = 2**63 - 1
_MIN_INT64 = -(2**63)
_MAX_EXPONENT = 1000

_FORMAT_WRONG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_SUFFIX_WRONG = "unable to parse quantity's suffix"

_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DIGITS = frozenset("0123456789")


class QuantityParseError(ValueError):
    """Text that apimachinery's ParseQuantity refuses; the message is upstream's."""


def _split(text: str) -> tuple[bool, str, str, str]:
    """apimachinery's parseQuantityString: (positive, integer digits, fraction digits, suffix)."""
    positive = True
    pos = 0
    end = len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] == "+"
        pos += 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityParseError(_FORMAT_WRONG)
    return positive, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, bool]:
    """(base, exponent, binary) for a suffix, as apimachinery's quantitySuffixer.interpret."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], False
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], True
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[:1] in ("+", "-") else digits
        if not body or not set(body) <= _DIGITS:
            raise QuantityParseError(_SUFFIX_WRONG)
        exponent = int(digits)
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityParseError(f"quantity exponent out of supported range: {suffix!r}")
        return 10, exponent, False
    raise QuantityParseError(_SUFFIX_WRONG)


def round_to_nano(value: Fraction) -> Fraction:
    """Round a value that is not a whole number of nano-units away from zero, as ParseQuantity does."""
    scaled = value * _NANO
    if scaled.denominator == 1:
        return value
    magnitude = -(-abs(scaled.numerator) // scaled.denominator)  # ceil of |scaled|
    return Fraction(magnitude if value > 0 else -magnitude, _NANO)


@lru_cache(maxsize=4096)
def parse_go_quantity(text: str) -> Fraction:
    """The exact value of apimachinery's ParseQuantity(text), or QuantityParseError."""
    if not text:
        raise QuantityParseError(_FORMAT_WRONG)
    if text == "0":
        return Fraction(0)
    positive, num, denom, suffix = _split(text)
    base, exponent, binary = _interpret(suffix)
    value = Fraction(int(num + denom), 10 ** len(denom)) * Fraction(base) ** exponent
    value = round_to_nano(value)
    if binary and value > _MAX_INT64:
        value = Fraction(_MAX_INT64)
    return value if positive else -value


def encode(value: Fraction) -> bytes:
    """The CEL runtime form of a quantity; the value must be a whole number of nano-units."""
    nanos = value * _NANO
    if nanos.denominator != 1:
        nanos = round_to_nano(value) * _NANO
    return QUANTITY_TAG + str(nanos.numerator).encode()


def encode_capacity(value: Fraction) -> bytes:
    """A device capacity as CEL sees it: the API server has already rounded it to nano-units."""
    return encode(round_to_nano(value))


def is_quantity(raw: object) -> bool:
    return isinstance(raw, (bytes, bytearray)) and raw[:2] == QUANTITY_TAG


@lru_cache(maxsize=8192)
def _nanos(raw: bytes) -> int:
    return int(raw[2:])


def nanos(raw: object) -> int:
    """The value of an encoded quantity in nano-units; TypeError when raw is not a quantity."""
    if not is_quantity(raw):
        raise TypeError("no such overload")
    return _nanos(bytes(cast(Any, raw)))  # CEL bytes arrive as an untyped object


def decode(raw: object) -> Fraction:
    return Fraction(nanos(raw), _NANO)


def _from_nanos(value: int) -> bytes:
    return QUANTITY_TAG + str(value).encode()


# --- the CEL functions (impls receive runtime values: bytes arrive as bytearray) --------------------------


def cel_quantity(text: str) -> bytes:
    return encode(parse_go_quantity(text))


def cel_is_quantity(text: str) -> bool:
    try:
        parse_go_quantity(text)
    except QuantityParseError:
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
    whole, rest = divmod(value, _NANO)
    if rest or not _MIN_INT64 <= whole <= _MAX_INT64:
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
        return _from_nanos(nanos(left) + right * _NANO)
    return _from_nanos(nanos(left) + nanos(right))


def cel_sub(left: bytearray, right: bytearray | int) -> bytes:
    if isinstance(right, int) and not isinstance(right, bool):
        return _from_nanos(nanos(left) - right * _NANO)
    return _from_nanos(nanos(left) - nanos(right))
