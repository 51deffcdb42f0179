"""The PromQL expressions the monitoring files hold, and the metric names each one reads.

The names come from a small lexer, not a PromQL parser: strings, label matchers `{...}`, ranges `[...]` and the
label lists of `by`/`without`/`on`/`ignoring`/`group_left`/`group_right` are cut out, and what remains as an
identifier not called as a function and not a keyword is a metric name. That every expression parses is
promtool's to check (tests/deploy/test_monitoring_rules.py); the two together catch a renamed or misspelt metric.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "manifests" / "monitoring" / "alert-rules.yaml"
RULE_TESTS = Path(__file__).resolve().parent / "alert-rules.test.yaml"
DASHBOARD = ROOT / "docs" / "dashboards" / "dra-quota-extender.json"
CHART_DASHBOARD = ROOT / "manifests" / "helm" / "dra-quota-scheduler" / "files" / "dashboard.json"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = frozenset(("and", "or", "unless", "bool", "offset", "inf", "nan", "start", "end"))
_GRAFANA_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
# Grafana's own variables, as a Prometheus query would see them
_BUILTIN_VARIABLES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _LABEL_LIST.sub("", text)
    return {
        match.group(1)
        for match in _IDENTIFIER.finditer(text)
        if match.group(2) is None and match.group(1).lower() not in _KEYWORDS
    }


def rule_expressions(rule_file: dict[str, Any]) -> dict[str, str]:
    """Alert (or recorded series) name -> expression, of a rule file's (or a PrometheusRule's spec's) groups."""
    return {
        rule.get("alert") or rule["record"]: rule["expr"] for group in rule_file["groups"] for rule in group["rules"]
    }


def load_rules(path: Path = RULES) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded


def load_dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def dashboard_expressions(dashboard: dict[str, Any]) -> dict[str, str]:
    """Where -> the PromQL Prometheus would run, Grafana's variables substituted: a constant by its value, a
    query variable by the match-everything its "All" sends, `$__rate_interval` by a range. Panels' targets and
    the query variables' `label_values(<selector>, label)`."""
    constants = {var["name"]: str(var["query"]) for var in dashboard["templating"]["list"] if var["type"] == "constant"}

    def substitute(expr: str) -> str:
        def value(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(2)
            return _BUILTIN_VARIABLES.get(name) or constants.get(name) or ".*"

        return _GRAFANA_VARIABLE.sub(value, expr)

    found: dict[str, str] = {}
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", ()):
            found[f"panel {panel['title']!r} target {target['refId']}"] = substitute(target["expr"])
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query)
            assert match is not None, f"variable {var['name']}: not a label_values(selector, label) query: {query}"
            found[f"variable {var['name']}"] = substitute(match.group(1))
    return found


def _panels(panels: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", ()))


def test_series_names(tests_file: Path = RULE_TESTS) -> dict[str, set[str]]:
    """Series name -> the alerts whose test groups feed it, from promtool's `input_series`."""
    loaded = yaml.safe_load(tests_file.read_text(encoding="utf-8"))
    names: dict[str, set[str]] = {}
    for group in loaded["tests"]:
        alerts = {case["alertname"] for case in group.get("alert_rule_test", ())}
        for series in group["input_series"]:
            names.setdefault(series["series"].split("{", 1)[0], set()).update(alerts)
    return names


test_series_names.__test__ = False  # type: ignore[attr-defined]  # a helper, not a pytest test


# How a family of each type is sampled in the text format (prometheus_client writes `_created` beside counters
# and histograms; Prometheus ingests it as a series too).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "unknown": ("",),
}


def exposed_names(text: str) -> set[str]:
    """The series names a Prometheus scraping `text` (the text exposition format) can query: every family by
    its declared type, sampled or not (a labelled counter nobody has incremented yet still declares itself)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + suffix for suffix in _SUFFIXES[family.type])
        names.update(sample.name for sample in family.samples)
    return names
