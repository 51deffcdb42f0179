"""Conformance against upstream's own allocator test table (k8s.io/dynamic-resource-allocation v0.37.2,
structured/internal/allocatortesting: allocator_testing.go and lexicographical_testing.go).

The table is extracted at test time (tests/upstream_table/table.py builds our exporter inside a temporary copy
of the module); every case becomes our objects (convert.py, through the differential harness) and our verdict
is compared with the table's (compare.py). Out-of-scope cases are skipped with their reason, known
disagreements are strict xfails with theirs (expectations.py); a summary per feature area is printed at the
end of the run (conftest.py).

Skipped when Go is missing, except with CI=true, where that fails the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from testkit.builds.oracle import OracleUnavailableError
from tests.differential.harness import in_ci
from tests.upstream_table.compare import compare, gate_dependent
from tests.upstream_table.expectations import (
    DEFAULTS_EXPECTED_FAILURES,
    EXPECTED_FAILURES,
    OUT_OF_SCOPE_CASES,
    out_of_scope,
)
from tests.upstream_table.table import load_table

pytestmark = pytest.mark.oracle

# Upstream v0.37.2 has 275 + 4 named cases; far fewer means the export lost some.
MIN_CASES = 270


def _load() -> tuple[list[dict[str, Any]], str]:
    try:
        return load_table(), ""
    except OracleUnavailableError as error:
        if in_ci():
            raise
        return [], str(error)


TABLE, UNAVAILABLE = _load()
BY_NAME = {case["name"]: case for case in TABLE}


def _params(cases: list[dict[str, Any]], failures: Mapping[str, str]) -> list[Any]:
    params = []
    for case in cases:
        marks = []
        reason = out_of_scope(case)
        if reason:
            marks.append(pytest.mark.skip(reason=f"out of scope: {reason}"))
        elif case["name"] in failures:
            marks.append(pytest.mark.xfail(strict=True, reason=failures[case["name"]]))
        params.append(pytest.param(case, id=case["name"], marks=marks))
    return params


@pytest.fixture(autouse=True)
def _need_table() -> None:
    if UNAVAILABLE:
        pytest.skip(f"upstream allocator table unavailable: {UNAVAILABLE}")


def test_table_export_is_faithful() -> None:
    """The export saw the whole table, and upstream's own matchers accept every recorded answer."""
    assert len(TABLE) >= MIN_CASES, f"only {len(TABLE)} cases exported"
    assert len(BY_NAME) == len(TABLE), "case names must be unique"
    rejected = {case["name"]: case["checkFailures"] for case in TABLE if case["checkFailures"]}
    assert not rejected, f"upstream's matchers reject the recorded answer: {rejected}"
    for name in [*EXPECTED_FAILURES, *OUT_OF_SCOPE_CASES, *DEFAULTS_EXPECTED_FAILURES]:
        assert name in BY_NAME, f"expectations.py names {name!r}, which the table does not have"
    for name in EXPECTED_FAILURES:
        assert not out_of_scope(BY_NAME[name]), f"{name} is both out of scope and an expected failure"


@pytest.mark.parametrize("case", _params(TABLE, EXPECTED_FAILURES))
def test_case(case: dict[str, Any]) -> None:
    """Our verdict (and devices, where the table's are order-independent) equals the table's."""
    outcome = compare(case)
    assert not outcome.mismatch, outcome.mismatch


@pytest.mark.parametrize("case", _params([c for c in TABLE if gate_dependent(c)], DEFAULTS_EXPECTED_FAILURES))
def test_case_under_1_37_defaults(case: dict[str, Any]) -> None:
    """Cases whose answer depends on a gate being off: ours equals upstream's with the 1.37 default gates."""
    outcome = compare(case, run="defaults", features=case["defaultFeatures"])
    assert not outcome.mismatch, outcome.mismatch
