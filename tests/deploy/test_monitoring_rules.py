"""The alert rules (manifests/monitoring/alert-rules.yaml) and the dashboard's expressions, through promtool.

promtool is Prometheus' own: `check rules` parses and validates every rule, `test rules` evaluates them over the
synthetic series of tests/monitoring/alert-rules.test.yaml and compares the alerts that fire, with their labels
and annotations, at each evaluation time. The dashboard's expressions go through the same parser as recording
rules. promtool is built from Go modules (testkit/builds/tools.py, pinned by tools/promtool/go.mod) into tools/.build/;
without Go these tests skip, with CI=true they fail.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from testkit.builds import tools as tools_build
from tests.monitoring.expressions import (
    DASHBOARD,
    ROOT,
    RULE_TESTS,
    RULES,
    dashboard_expressions,
    load_dashboard,
    load_rules,
    rule_expressions,
)

pytestmark = pytest.mark.helm  # a Go-built tool, like helm: not in `make unit`

IN_CI = os.environ.get("CI", "").lower() == "true"
RUNBOOKS = ROOT / "docs" / "monitoring.md"


@pytest.fixture(scope="session")
def promtool() -> Path:
    try:
        path = tools_build.promtool_path()
        if not os.access(path, os.X_OK):
            tools_build.find_go()
        return tools_build.ensure_promtool()
    except tools_build.BuildError as error:
        if IN_CI or "go build failed" in str(error):
            pytest.fail(f"promtool: {error}", pytrace=False)
        pytest.skip(str(error))


def promtool_run(promtool: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *map(str, args)], capture_output=True, text=True, timeout=120, check=False)


def check_rules(promtool: Path, path: Path) -> str:
    result = promtool_run(promtool, "check", "rules", "--lint=all", "--lint-fatal", path)
    assert result.returncode == 0, f"promtool check rules {path}:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def test_promtool_is_the_pinned_release(promtool: Path) -> None:
    result = promtool_run(promtool, "--version")
    release = tools_build.prometheus_release(tools_build.promtool_version())
    assert f"version {release}" in result.stdout + result.stderr


def test_the_rule_file_passes_promtool_check(promtool: Path) -> None:
    out = check_rules(promtool, RULES)
    assert f"SUCCESS: {len(rule_expressions(load_rules()))} rules found" in out


def test_promtool_catches_a_broken_rule(promtool: Path, tmp_path: Path) -> None:
    """The check is real: a rule with a syntax error, or a `for` that is no duration, fails it."""
    for broken in ("sum(dra_extender_ready", "dra_extender_ready == 0"):
        rules = load_rules()
        rules["groups"][0]["rules"][0]["expr"] = broken
        rules["groups"][0]["rules"][0]["for"] = "5m" if broken.startswith("sum(") else "five minutes"
        path = tmp_path / "broken.yaml"
        path.write_text(yaml.safe_dump(rules), encoding="utf-8")
        result = promtool_run(promtool, "check", "rules", path)
        assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


def test_the_rules_unit_tests_pass(promtool: Path) -> None:
    result = promtool_run(promtool, "test", "rules", RULE_TESTS)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "SUCCESS" in result.stdout + result.stderr


def test_the_unit_tests_fail_when_a_threshold_moves(promtool: Path, tmp_path: Path) -> None:
    """The unit tests pin the thresholds: with the drift alert's `for` cut to 10m, it fires at 25m, where the
    tests expect it still pending."""
    rules = load_rules()
    for rule in rules["groups"][0]["rules"]:
        if rule["alert"] == "DraExtenderQuotaDrift":
            rule["for"] = "10m"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules), encoding="utf-8")
    tests = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    tests["rule_files"] = ["rules.yaml"]
    (tmp_path / "rules.test.yaml").write_text(yaml.safe_dump(tests), encoding="utf-8")
    result = promtool_run(promtool, "test", "rules", tmp_path / "rules.test.yaml")
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "alertname: DraExtenderQuotaDrift, time: 25m" in out and "FAILED" in out


def test_every_alert_has_a_runbook_and_cases_that_fire_and_that_do_not() -> None:
    text = RUNBOOKS.read_text(encoding="utf-8")
    tests = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))["tests"]
    for group in load_rules()["groups"]:
        for rule in group["rules"]:
            name = rule["alert"]
            assert f"\n### {name}\n" in text, f"{name}: no runbook section in docs/monitoring.md"
            assert rule["annotations"]["runbook"] == f"docs/monitoring.md#{name.lower()}"
            cases = [case for group in tests for case in group.get("alert_rule_test", ()) if case["alertname"] == name]
            groups = [group for group in tests if any(c["alertname"] == name for c in group["alert_rule_test"])]
            assert any(case["exp_alerts"] for case in cases), f"{name}: no case where it fires"
            # some series of its tests must not fire: a case expecting nothing, or a pod that never alerts
            fed = {_pod_of(series["series"]) for group in groups for series in group["input_series"]}
            fired = {alert["exp_labels"].get("pod") for case in cases for alert in case["exp_alerts"]}
            assert any(not case["exp_alerts"] for case in cases) or fed - fired, f"{name}: no case where it doesn't"


def _pod_of(series: str) -> str:
    match = re.search(r'pod="([^"]*)"', series)
    assert match is not None, series
    return match.group(1)


def test_every_dashboard_expression_parses(promtool: Path, tmp_path: Path) -> None:
    """Each panel's and variable's query (Grafana's variables substituted) as a recording rule for promtool."""
    expressions = dashboard_expressions(load_dashboard(DASHBOARD))
    rules = [{"record": f"dashboard:expression_{i}", "expr": expr} for i, expr in enumerate(expressions.values())]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
    out = check_rules(promtool, path)
    assert f"SUCCESS: {len(rules)} rules found" in out
