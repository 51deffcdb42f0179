"""Our verdict on one table case against upstream's answer, with the differential harness's verdict rules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.decisions.devices.features import Features
from tests.differential import harness
from tests.upstream_table.convert import canonical, harness_case, node_result
from tests.upstream_table.expectations import CONSUMED_CAPACITY_NOT_COMPARED


@dataclass(frozen=True)
class CaseOutcome:
    ours: dict[str, Any]
    upstream: dict[str, Any]
    order_independent: bool
    mismatch: str  # "" when ours agrees


def order_independent(case: Mapping[str, Any]) -> bool:
    """Every implementation supporting the case's features, with the input in both orders, gives the devices
    the table expects: then which devices are taken is part of the answer, not an accident of iteration."""
    expected = harness.upstream_verdict(node_result(case["expected"], case))
    for variant in case["variants"]:
        theirs = harness.upstream_verdict(node_result(variant, case))
        if theirs["kind"] != expected["kind"] or canonical(theirs["allocation"]) != canonical(expected["allocation"]):
            return False
    return True


def ours_for(case: Mapping[str, Any], features: Sequence[str]) -> dict[str, Any]:
    """Our verdict with the given gates on and every other one off, as upstream's run of the case."""
    converted = harness_case(case)
    node = converted["scenario"]["nodeNames"][0]
    run = harness.run_ours(converted, drop_malformed=True, features=Features.from_enabled(features))
    return harness.our_verdict(run.outcomes[node])


def compare(case: Mapping[str, Any], *, run: str = "expected", features: Sequence[str] | None = None) -> CaseOutcome:
    """`run`: "expected" (the table's own answer, the case's features) or "defaults" (the 1.37 default gates).

    Verdict kinds must be equal (feasible / infeasible / error; our "undecided", a search budget that ran
    out, is a disagreement here, unlike in the random differential test, because the table's cases are
    small and upstream decides every one). Devices are compared, as sets per claim like the table's
    ConsistOf matchers, when the table's answer is order-independent (see `order_independent`) and for the
    table's own run only.
    """
    ours = ours_for(case, case["features"] if features is None else features)
    upstream = harness.upstream_verdict(node_result(case[run], case, features))
    free = order_independent(case)
    mismatch = ""
    if ours["kind"] != upstream["kind"]:
        mismatch = (
            f"ours {ours['kind']} ({ours.get('category', '')}: {ours.get('why', '')}), "
            f"upstream {upstream['kind']} ({upstream.get('why', '')})"
        )
    elif run == "expected" and free and canonical(_comparable(case, ours)) != canonical(_comparable(case, upstream)):
        mismatch = f"devices differ: ours {ours['allocation']}, upstream {upstream['allocation']}"
    return CaseOutcome(ours, upstream, free, mismatch)


def _comparable(case: Mapping[str, Any], verdict: Mapping[str, Any]) -> list[list[list[Any]]]:
    """The verdict's results, without the consumed capacity of shares where the export cannot carry it
    (expectations.CONSUMED_CAPACITY_NOT_COMPARED)."""
    if case["name"] not in CONSUMED_CAPACITY_NOT_COMPARED:
        return verdict["allocation"]
    return [[result[:5] for result in claim] for claim in verdict["allocation"]]


def gate_dependent(case: Mapping[str, Any]) -> bool:
    """The 1.37 default gates change upstream's answer: the case tests a gate turned off (or an alpha one)."""
    expected = harness.upstream_verdict(node_result(case["expected"], case))
    defaults = harness.upstream_verdict(node_result(case["defaults"], case, case["defaultFeatures"]))
    return expected["kind"] != defaults["kind"] or canonical(expected["allocation"]) != canonical(
        defaults["allocation"]
    )
