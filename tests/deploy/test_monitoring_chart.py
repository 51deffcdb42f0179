"""The chart's monitoring objects (monitoring.* values): off by default, and when on, the same rules as the plain
rule file, the same ServiceMonitor as manifests/monitoring, the dashboard of docs/; thresholds reach the rules.

helm and kustomize as in tests/deploy/test_helm_chart.py (built from Go modules into tools/.build/), promtool as in
tests/deploy/test_monitoring_rules.py. The API server's view of the objects: tests/deploy/test_monitoring_apiserver.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_helm_chart import CHART, MANIFESTS, by_key, helm_template, kustomize_build, run, tools
from tests.deploy.test_monitoring_rules import check_rules, promtool, promtool_run
from tests.monitoring.expressions import CHART_DASHBOARD, DASHBOARD, RULE_TESTS, load_rules, rule_expressions

pytestmark = pytest.mark.helm

__all__ = ["promtool", "tools"]  # fixtures, imported to be used here

ALL_ON = ["monitoring.prometheusRule.enabled=true", "monitoring.serviceMonitor.enabled=true"]
ALL_ON += ["monitoring.dashboard.enabled=true"]
MONITORING_KINDS = {"PrometheusRule", "ServiceMonitor"}


def only(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return found


def test_monitoring_is_off_by_default(tools: dict[str, Path]) -> None:
    docs = helm_template(tools)
    assert not [d for d in docs if d["kind"] in MONITORING_KINDS or d["apiVersion"].startswith("monitoring.")]
    assert not [d for d in docs if d["metadata"]["name"] == "dra-quota-scheduler-dashboard"]


def test_helm_lint_with_monitoring_on(tools: dict[str, Path]) -> None:
    args: list[str | Path] = [tools["helm"], "lint", "--strict", CHART]
    for value in [*ALL_ON, "networkPolicy.enabled=true", "monitoring.prometheusRule.labels.release=kps"]:
        args += ["--set", value]
    assert "0 chart(s) failed" in run(args)


def test_the_prometheus_rule_is_the_plain_rule_file(tools: dict[str, Path]) -> None:
    docs = helm_template(tools, *ALL_ON)
    rule = only(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "kube-system"
    assert rule["spec"] == load_rules()


def test_the_service_monitor_is_the_kustomize_one_and_scrapes_only_the_metrics_port(tools: dict[str, Path]) -> None:
    docs = helm_template(tools, *ALL_ON)
    monitor = only(docs, "ServiceMonitor")
    assert by_key([monitor]) == by_key(kustomize_build(tools, MANIFESTS / "monitoring"))
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("http-metrics", "/metrics")
    # the port is the metrics Service's one port, which targets the extender's metrics listener
    service = only(docs, "Service", "dra-quota-scheduler-metrics")
    assert service["metadata"]["labels"].items() >= monitor["spec"]["selector"]["matchLabels"].items()
    (port,) = service["spec"]["ports"]
    assert (port["name"], port["port"]) == ("http-metrics", 9090)
    deployment = only(docs, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    (extender,) = [c for c in [*spec["initContainers"], *spec["containers"]] if c["name"] == "extender"]
    (container_port,) = [p for p in extender["ports"] if p["name"] == port["targetPort"]]
    assert container_port["containerPort"] == 9090


def test_the_dashboard_config_map_is_the_docs_dashboard(tools: dict[str, Path]) -> None:
    assert CHART_DASHBOARD.read_bytes() == DASHBOARD.read_bytes(), "files/dashboard.json is a copy of docs/"
    docs = helm_template(tools, *ALL_ON, "monitoring.dashboard.labels.team=platform")
    configmap = only(docs, "ConfigMap", "dra-quota-scheduler-dashboard")
    assert json.loads(configmap["data"]["dra-quota-extender.json"]) == json.loads(DASHBOARD.read_text())
    assert configmap["metadata"]["labels"] == {
        "grafana_dashboard": "1",
        "team": "platform",
        "app.kubernetes.io/part-of": "dra-quota-scheduler",
    }


def test_thresholds_and_labels_reach_the_rules(tools: dict[str, Path], promtool: Path, tmp_path: Path) -> None:
    values = [
        "monitoring.prometheusRule.enabled=true",
        "monitoring.prometheusRule.labels.release=kps",
        "monitoring.alerts.verbLatencySeconds=4",
        "monitoring.alerts.verbErrorRatio=0.05",
        "monitoring.alerts.quotaDrift=2",
        "monitoring.alerts.quotaDriftFor=1h",
        "monitoring.alerts.viewStaleSeconds=600",
        "monitoring.alerts.watchRelists=20",
        "monitoring.alerts.restoredExpiredWindow=3h",
    ]
    rule = only(helm_template(tools, *values), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    exprs = rule_expressions(rule["spec"])
    assert exprs["DraExtenderVerbLatencyNearTimeout"].endswith("> 4")
    assert exprs["DraExtenderVerbErrors"].endswith("> 0.05")
    assert exprs["DraExtenderQuotaDrift"] == "max without (instance, pod) (abs(dra_extender_quota_drift)) > 2"
    assert exprs["DraExtenderViewStale"].endswith("> 600")
    assert exprs["DraExtenderWatchRelistStorm"].endswith("> 20")
    assert "[3h]" in exprs["DraExtenderRestoredReservationsExpired"]
    (drift,) = [r for r in rule["spec"]["groups"][0]["rules"] if r["alert"] == "DraExtenderQuotaDrift"]
    assert drift["for"] == "1h" and "for 1h" in drift["annotations"]["description"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]), encoding="utf-8")
    check_rules(promtool, path)


def test_the_unit_tests_pass_on_the_charts_rules(tools: dict[str, Path], promtool: Path, tmp_path: Path) -> None:
    """The rendered PrometheusRule, not only the plain file, through promtool's unit tests."""
    rule = only(helm_template(tools, "monitoring.prometheusRule.enabled=true"), "PrometheusRule")
    (tmp_path / "chart-rules.yaml").write_text(yaml.safe_dump(rule["spec"]), encoding="utf-8")
    tests = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    tests["rule_files"] = ["chart-rules.yaml"]
    (tmp_path / "chart-rules.test.yaml").write_text(yaml.safe_dump(tests), encoding="utf-8")
    result = promtool_run(promtool, "test", "rules", tmp_path / "chart-rules.test.yaml")
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"


def test_a_bad_threshold_fails_the_render_or_the_check(tools: dict[str, Path], promtool: Path, tmp_path: Path):
    """A `for` that is no duration is refused by the chart's values schema before anything renders; the same rule
    written by hand (the kustomize path) is refused by promtool, as the API server's CRD schema would."""
    args = [str(tools["helm"]), "template", "x", str(CHART), "--set", "monitoring.prometheusRule.enabled=true"]
    args += ["--set", "monitoring.alerts.notReadyFor=five"]
    refused = subprocess.run(args, capture_output=True, text=True, check=False, timeout=60)
    assert refused.returncode != 0 and "/monitoring/alerts/notReadyFor" in refused.stderr
    args[-1] = "monitoring.alerts.notReadyFor=5m"
    rendered = subprocess.run(args, capture_output=True, text=True, check=True, timeout=60).stdout
    rule = only([d for d in yaml.safe_load_all(rendered) if d], "PrometheusRule")
    for group in rule["spec"]["groups"]:
        for item in group["rules"]:
            if item.get("alert") == "DraExtenderNotReady":
                item["for"] = "five"
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]), encoding="utf-8")
    result = promtool_run(promtool, "check", "rules", path)
    assert result.returncode != 0
