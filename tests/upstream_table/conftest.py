"""Prints the upstream-table summary at the end of a run: cases per feature area, agreeing, expected failures
by reason, out of scope by reason (the figures the issue asks for)."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

_outcomes: dict[str, str] = {}  # case name -> "agree" | "xfail" | "skip" | "fail" | "xpass"
_TEST = "test_upstream_table.py::test_case["


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _TEST not in report.nodeid:
        return
    name = report.nodeid.split(_TEST, 1)[1].rstrip("]")
    if report.skipped:
        _outcomes[name] = "xfail" if hasattr(report, "wasxfail") else "skip"
    elif report.when == "call":
        if report.passed:
            _outcomes[name] = "xpass" if hasattr(report, "wasxfail") else "agree"
        else:
            strict_xpass = "XPASS(strict)" in str(report.longrepr)
            _outcomes[name] = "xpass" if hasattr(report, "wasxfail") or strict_xpass else "fail"
    elif report.failed:
        _outcomes[name] = "fail"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _outcomes:
        return
    from tests.upstream_table import table
    from tests.upstream_table.expectations import EXPECTED_FAILURES, area, out_of_scope
    from tests.upstream_table.test_upstream_table import BY_NAME

    per_area: dict[str, Counter[str]] = defaultdict(Counter)
    skip_reasons: Counter[str] = Counter()
    xfail_reasons: Counter[str] = Counter()
    for name, outcome in _outcomes.items():
        case = BY_NAME.get(name)
        if case is None:
            continue
        per_area[area(case)][outcome] += 1
        if outcome == "skip":
            skip_reasons[out_of_scope(case)] += 1
        elif outcome == "xfail":
            xfail_reasons[EXPECTED_FAILURES.get(name, "")] += 1
    write = terminalreporter.write_line
    totals: Counter[str] = Counter(_outcomes.values())
    terminalreporter.section("upstream allocator table (v0.37.2)")
    write(table.build_note)
    write(
        f"{len(_outcomes)} cases: {totals['agree']} in scope agree, {totals['xfail']} expected failures, "
        f"{totals['skip']} out of scope, {totals['fail']} failed, {totals['xpass']} unexpectedly agree"
    )
    write(f"{'area':28} {'cases':>5} {'agree':>5} {'xfail':>5} {'skip':>5} {'fail':>5}")
    for name in sorted(per_area):
        c = per_area[name]
        write(f"{name:28} {sum(c.values()):5} {c['agree']:5} {c['xfail']:5} {c['skip']:5} {c['fail'] + c['xpass']:5}")
    for reason, count in xfail_reasons.most_common():
        write(f"  xfail {count:3}: {reason}")
    for reason, count in skip_reasons.most_common():
        write(f"  out of scope {count:3}: {reason}")
