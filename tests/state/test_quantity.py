from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.state.quantity import QuantityError, format_quantity, parse_quantity, parse_quantity_string


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", Fraction(1)),
        ("4Gi", Fraction(4 * 2**30)),
        ("80Gi", Fraction(80 * 2**30)),
        ("100m", Fraction(1, 10)),
        ("1.5", Fraction(3, 2)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1e3", Fraction(1000)),
        ("2E-3", Fraction(2, 1000)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("-2", Fraction(-2)),
        (".5", Fraction(1, 2)),
        (8, Fraction(8)),
        (" 2Ki\t", Fraction(2048)),  # object fields trim white space, as Quantity.UnmarshalJSON does
        (1e-10, Fraction(1, 10**9)),
        # Corner cases of apimachinery's ParseQuantity, whose rules hold here too:
        ("Gi", Fraction(0)),  # an empty number is 0 on the int64 fast path
        ("+", Fraction(0)),
        ("0.1n", Fraction(1, 10**9)),  # finer than nano-units: rounded away from zero
        ("-0.5e-10", Fraction(-1, 10**9)),
        ("10Ei", Fraction(2**63 - 1)),  # binary values are capped at int64 ...
        ("10E", Fraction(10**19)),  # ... decimal ones are not
        ("1e999", Fraction(10**999)),  # exponents up to +-1000 are held exactly
    ],
)
def test_parse_quantity(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    # "Ei" and "e-10": upstream's inf.Dec path cannot read an empty number; "\x1c" is not white space in Go.
    ["", "Ei", "e-10", "1.2.3", "1gi", "1e1001", True, None, [1], "1 Gi", "\x1c1", "x" * 100, float("nan")],
)
def test_parse_quantity_rejects(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_format_round_trips_integers(value):
    assert parse_quantity(format_quantity(Fraction(value))) == value


def test_format_never_uses_a_capped_binary_suffix():
    assert format_quantity(Fraction(2**70)) == str(2**70)
    assert format_quantity(Fraction(2**62)) == "4Ei"


def test_upstream_error_messages():
    with pytest.raises(QuantityError, match="unable to parse numeric part of quantity"):
        parse_quantity_string("Ei")
    with pytest.raises(QuantityError, match="unable to parse quantity's suffix"):
        parse_quantity_string("1K")
    with pytest.raises(QuantityError, match=r"^quantities must match the regular expression"):
        parse_quantity_string(" 1")  # ParseQuantity itself does not trim
    with pytest.raises(QuantityError, match=r"^not a quantity: 'lots': quantities must match"):
        parse_quantity("lots")


def test_format_milli():
    assert format_quantity(Fraction(1, 10)) == "100m"
    assert format_quantity(Fraction(4 * 2**30)) == "4Gi"
