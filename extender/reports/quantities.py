"""How a quota amount is written in every report: a whole number as an int, anything else as a Kubernetes
quantity (resource.Quantity's canonical form, state/quantity.py format_quantity)."""

from __future__ import annotations

from fractions import Fraction

from extender.state.quantity import format_quantity


def quantity(value: Fraction) -> str | int:
    return int(value) if value.denominator == 1 else format_quantity(value)


def quantity_text(value: Fraction | None) -> str:
    """The same amount as text for a page; "-" for an amount that is not set (an absent borrowingLimit)."""
    if value is None:
        return "-"
    return str(quantity(value))
