from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.state.quantity import QuantityError, format_quantity, parse_quantity


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
    ],
)
def test_parse_quantity(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "Gi", "1.2.3", "1gi", "1e999", True, None, [1], "1 Gi", "x" * 100])
def test_parse_quantity_rejects(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_format_round_trips_integers(value):
    assert parse_quantity(format_quantity(Fraction(value))) == value


def test_format_milli():
    assert format_quantity(Fraction(1, 10)) == "100m"
    assert format_quantity(Fraction(4 * 2**30)) == "4Gi"
