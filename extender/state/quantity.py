"""Kubernetes resource.Quantity, held exactly.

Capacities, quota and CEL's quantity() all compare quantities; floats would make `1Gi` and `1073741824`
disagree or let `0.1+0.2` creep into quota sums, so a quantity is a Fraction of its base unit.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY_RE = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exponent>[eE][+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))$"
)
# Bounds keep hostile input (e.g. "1e999999999") from allocating giant integers.
_MAX_EXPONENT = 64
_MAX_TEXT = 64


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity."""


def parse_quantity(text: object) -> Fraction:
    """Parse a quantity string (or an int, as YAML may give) into an exact Fraction of the base unit."""
    if isinstance(text, bool):
        raise QuantityError(f"not a quantity: {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if text != text or text in (float("inf"), float("-inf")):
            raise QuantityError(f"not a quantity: {text!r}")
        return Fraction(str(text))
    if not isinstance(text, str):
        raise QuantityError(f"not a quantity: {text!r}")
    candidate = text.strip()
    if not candidate or len(candidate) > _MAX_TEXT:
        raise QuantityError(f"not a quantity: {text!r}")
    match = _QUANTITY_RE.match(candidate)
    if match is None:
        raise QuantityError(f"not a quantity: {text!r}")
    number = Fraction(match["number"])
    if match["binary"]:
        number *= _BINARY_SUFFIXES[match["binary"]]
    elif match["exponent"]:
        exponent = int(match["exponent"][1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"quantity exponent out of range: {text!r}")
        number *= Fraction(10) ** exponent
    else:
        number *= _DECIMAL_SUFFIXES[match["decimal"] or ""]
    return -number if match["sign"] == "-" else number


def format_quantity(value: Fraction) -> str:
    """A short human form: whole numbers plainly, binary multiples with Ki..Ei, else milli-units or a decimal."""
    if value.denominator == 1:
        whole = value.numerator
        if whole != 0 and abs(whole) >= 1024:
            for suffix, factor in reversed(_BINARY_SUFFIXES.items()):
                if whole % factor == 0:
                    return f"{whole // factor}{suffix}"
        return str(whole)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return f"{float(value):g}"
