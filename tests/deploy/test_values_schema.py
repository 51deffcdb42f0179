"""The chart's values.schema.json is generated from the extender's config schema (python -m tools.values_schema),
so helm refuses what the extender would refuse at start. Here: the committed file is the generated one, and the
cases tests/deploy/test_helm_chart.py gives helm are judged the same way by the extender itself (so that a helm verdict
agreeing with the expectation means agreeing with the extender)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from extender.service.config import ConfigError, parse_config
from tests.support.paths import ROOT
from tools import values_schema

CHART_CONFIG = ROOT / "manifests" / "helm" / "dra-quota-scheduler" / "files" / "extender.yaml"

# extender.config values -> whether the extender refuses them (merged over the chart's files/extender.yaml).
CONFIG_CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("strategy-bogus", {"scoring": {"strategy": "Bogus"}}, True),
    ("unknown-option", {"scoring": {"stratgy": "LeastAllocated"}}, True),
    ("unknown-section", {"scheduling": {}}, True),
    ("ttl-below-minimum", {"reservations": {"ttlSeconds": 0}}, True),
    ("integer-as-text", {"limits": {"maxNodesPerRequest": "many"}}, True),
    ("integer-as-fraction", {"search": {"budget": 1.5}}, True),
    ("bool-as-text", {"bind": {"enabled": "yes"}}, True),
    ("alpha-gate-on", {"features": {"DRADerivedAttributes": True}}, True),
    ("locked-gate-off", {"features": {"DRAAdminAccess": False}}, True),
    ("unknown-gate", {"features": {"DRANoSuchGate": True}}, True),
    ("auth-mode", {"diagnostics": {"auth": {"mode": "oidc"}}}, True),
    ("listen-without-port", {"metrics": {"listen": "9090"}}, True),
    ("log-level", {"logging": {"level": "verbose"}}, True),
    ("section-as-text", {"server": "fast"}, True),
    ("gate-dependency-off", {"features": {"DRAConsumableCapacity": False}}, True),
    (
        "gate-and-dependency-off",
        {"features": {"DRAConsumableCapacity": False, "DRAFractionalCapacityRange": False}},
        False,
    ),
    ("cert-without-key", {"tls": {"certFile": "/etc/tls/tls.crt"}}, True),
    ("client-ca-without-cert", {"tls": {"clientCAFile": "/etc/tls/ca.crt"}}, True),
    ("client-names-without-ca", {"tls": {"clientNames": ["kube-scheduler"]}}, True),
    ("client-names-not-a-list", {"tls": {"clientNames": "kube-scheduler"}}, True),
    ("allowed-hosts", {"diagnostics": {"allowedHosts": ["dra.example.com"], "concurrency": 2}}, False),
    ("bind-scheduler-names", {"bind": {"schedulerNames": ["default-scheduler"]}}, False),
    ("strategy-and-weights", {"scoring": {"strategy": "LeastAllocated", "weights": {"deviceFit": 3}}}, False),
    ("log-level-lower-case", {"logging": {"level": "debug"}}, False),
    ("metrics-listen", {"metrics": {"listen": "0.0.0.0:9090"}}, False),
    ("ttl-fraction", {"reservations": {"ttlSeconds": 30.5}}, False),
    ("gate-off", {"features": {"DRADeviceTaints": False}}, False),
    ("mappings", {"quota": {"deviceClassMappings": [{"name": "example.com/gpu", "deviceClassNames": ["gpu"]}]}}, False),
]


def merged(base: Any, over: Any) -> Any:
    """The chart's merge of extender.config over the file: maps merged key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {key: merged(base.get(key), over[key]) if key in base else over[key] for key in over} | {
            key: value for key, value in base.items() if key not in over
        }
    return over


def extender_refuses(config: dict[str, Any]) -> bool:
    try:
        parse_config(merged(yaml.safe_load(CHART_CONFIG.read_text(encoding="utf-8")), config))
    except ConfigError:
        return True
    return False


@pytest.mark.parametrize(("name", "config", "refused"), CONFIG_CASES, ids=[case[0] for case in CONFIG_CASES])
def test_the_extender_judges_the_cases_as_listed(name: str, config: dict[str, Any], refused: bool) -> None:
    assert extender_refuses(config) is refused


def test_committed_schema_is_the_generated_one() -> None:
    assert values_schema.SCHEMA_PATH.read_text(encoding="utf-8") == values_schema.render(), (
        "run python -m tools.values_schema"
    )


def test_every_option_of_the_config_file_is_in_the_schema() -> None:
    """config/extender.yaml (every option with its default) passes the generated schema's key structure."""
    schema = values_schema.extender_config_schema()

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        if node.get("type") == "object" and isinstance(value, dict) and "properties" in node:
            for key, child in value.items():
                assert key in node["properties"], f"{path}{key} is not in the schema"
                walk(child, node["properties"][key], f"{path}{key}.")

    walk(yaml.safe_load((ROOT / "config" / "extender.yaml").read_text(encoding="utf-8")), schema, "")
