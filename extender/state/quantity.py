"""Kubernetes resource.Quantity, held exactly: the one parser for the state model and the CEL library.

Capacities, quota and CEL's quantity() all compare quantities; floats would make `1Gi` and `1073741824`
disagree or let `0.1+0.2` creep into quota sums, so a quantity is a Fraction of its base unit. Every value this
module returns is what k8s.io/apimachinery/pkg/api/resource (quantity.go, ParseQuantity) would hold:

- the syntax of parseQuantityString: sign, leading zeros, digits, an optional '.' and digits (`1.` and `.5`
  are fine, so is an empty number: `Mi` is 0), then a suffix of [eEinumkKMGTP] letters with an optional signed
  exponent; anything else is ErrFormatWrong, an unknown suffix ErrSuffix, with upstream's messages;
- a number without digits that upstream's slow (inf.Dec) path must read is ErrNumeric (`Ei`, `e-10`), as
  inf.Dec.SetString("") fails there, while the int64 fast path reads it as 0 (`Gi`, `e3`);
- values that are not a whole number of nano-units are rounded away from zero (`0.1n` is `1n`), and
  binary-suffixed magnitudes are capped at 2^63-1 (`9Ei`), decimal ones are not;
- object fields decode as Quantity.UnmarshalJSON does: surrounding (Go) white space is trimmed and JSON
  numbers are read as their text.

Bounds upstream does not have, so that hostile text cannot allocate giant integers: exponents beyond +-1000 and
numbers of more than 1000 digits are refused.

Every value is therefore a whole number of nano-units, which is what lets the CEL quantity type
(decisions/devices/cel/quantity_type.py) carry it exactly as an integer count of nano-units.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

from extender.state.fields import MAX_INT64, parse_int64

NANO = 10**9

_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
# parseQuantityString as one pattern: each part's follow set is disjoint from the part, so greedy matching
# splits exactly where upstream's hand-written scanner does.
_SPLIT_RE = re.compile(r"([+-]?)(0*)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
# unicode.IsSpace, which strings.TrimSpace uses (Python's str.isspace also counts \x1c-\x1f).
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
# apimachinery's maxInt64Factors: the fast path handles at most 18 decimal digits.
_MAX_INT64_FACTORS = 18

_MAX_EXPONENT = 1000
_MAX_DIGITS = 1000

FORMAT_WRONG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
SUFFIX_WRONG = "unable to parse quantity's suffix"
NUMERIC_WRONG = "unable to parse numeric part of quantity"


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity; from parse_quantity_string the message is upstream's."""


def _interpret(suffix: str) -> tuple[int, int, bool]:
    """(base, exponent, binary) of a suffix, as quantitySuffixer.interpret."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], False
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], True
    if len(suffix) > 1 and suffix[0] in "eE":
        exponent = parse_int64(suffix[1:])
        if exponent is None:
            raise QuantityError(SUFFIX_WRONG)
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"quantity exponent out of supported range: {suffix!r}")
        return 10, exponent, False
    raise QuantityError(SUFFIX_WRONG)


def _fast_path(num: str, denom: str, exponent: int, binary: bool) -> bool:
    """Whether ParseQuantity's int64 fast path takes the value (the precision/scale tests of quantity.go)."""
    if binary:
        if denom:
            return False
        return 15 - len(num) - (exponent * 3) // 10 - 1 >= 0
    return _MAX_INT64_FACTORS - len(num) - len(denom) >= 0 and exponent - len(denom) >= -9


def round_to_nano(value: Fraction) -> Fraction:
    """Round a value that is not a whole number of nano-units away from zero, as ParseQuantity does."""
    scaled = value * NANO
    if scaled.denominator == 1:
        return value
    magnitude = -(-abs(scaled.numerator) // scaled.denominator)  # ceil of |scaled|
    return Fraction(magnitude if value > 0 else -magnitude, NANO)


@lru_cache(maxsize=4096)
def parse_quantity_string(text: str) -> Fraction:
    """The exact value of apimachinery's ParseQuantity(text), or QuantityError with upstream's message."""
    if not text:
        raise QuantityError(FORMAT_WRONG)
    match = _SPLIT_RE.fullmatch(text)
    if match is None:
        raise QuantityError(FORMAT_WRONG)
    sign, zeros, num, denom, suffix = match.groups(default="")
    base, exponent, binary = _interpret(suffix)
    if len(num) + len(denom) > _MAX_DIGITS:
        raise QuantityError(f"quantity has more than {_MAX_DIGITS} digits")
    if not (zeros or num or denom) and not _fast_path("0", "", exponent, binary):
        raise QuantityError(NUMERIC_WRONG)  # inf.Dec.SetString of a number without digits
    value = Fraction(int(num + denom or "0"), 10 ** len(denom)) * Fraction(base) ** exponent
    value = round_to_nano(value)
    if binary and value > MAX_INT64:
        value = Fraction(MAX_INT64)
    return -value if sign == "-" else value


def parse_quantity(raw: object) -> Fraction:
    """A quantity field of an API object (Quantity.UnmarshalJSON): a string, or a number as JSON/YAML give it."""
    if isinstance(raw, bool):
        raise QuantityError(f"not a quantity: {raw!r}")
    if isinstance(raw, int):
        return Fraction(raw)
    if isinstance(raw, float):
        text = repr(raw)  # the shortest text that reads back as the same float, as a JSON encoder writes it
    elif isinstance(raw, str):
        text = raw.strip(_GO_SPACE)
    else:
        raise QuantityError(f"not a quantity: {raw!r}")
    try:
        return parse_quantity_string(text)
    except QuantityError as error:
        shown = raw if len(text) <= 64 else f"{text[:64]}..."
        raise QuantityError(f"not a quantity: {shown!r}: {error}") from None


def format_quantity(value: Fraction) -> str:
    """A short human form: whole numbers plainly, binary multiples with Ki..Ei, else milli-units or a decimal.

    Binary suffixes are used only within int64, where ParseQuantity does not cap them, so the text reads back as
    the same value.
    """
    if value.denominator == 1:
        whole = value.numerator
        if 1024 <= abs(whole) <= MAX_INT64:
            for suffix, exponent in reversed(_BINARY_SUFFIXES.items()):
                if whole % (1 << exponent) == 0:
                    return f"{whole >> exponent}{suffix}"
        return str(whole)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return f"{float(value):g}"
