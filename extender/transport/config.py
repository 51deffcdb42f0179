"""The extender's own configuration file (YAML), validated strictly at start.

A typo in an option must stop the extender with a message naming the option, not silently fall back to a
default that schedules differently than the operator intended.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from extender.decisions.quota_context import KueueConfigRef
from extender.decisions.quota_decision import UNMAPPED_IGNORE, UNMAPPED_REJECT
from extender.decisions.scheduling import DecisionOptions
from extender.decisions.scoring import STRATEGIES, ScoringWeights
from extender.state.errors import ObjectError
from extender.state.kueue import DeviceClassMappings, parse_device_class_mappings


class ConfigError(ValueError):
    """The configuration file is invalid."""


@dataclass(frozen=True)
class ExtenderConfig:
    listen: str = "127.0.0.1:8888"
    decisions: DecisionOptions = DecisionOptions()
    device_class_mappings: DeviceClassMappings | None = None
    kueue_config: KueueConfigRef = KueueConfigRef()
    reservation_ttl_seconds: float = 60.0
    bind_enabled: bool = False
    max_body_bytes: int = 8 * 1024 * 1024
    max_nodes_per_request: int = 10_000
    request_deadline_seconds: float = 4.0
    diagnostics_history: int = 2048
    diagnostics_history_verdicts: int = 250_000
    stale_grace_seconds: float = 60.0
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""  # set: only clients with a certificate signed by this CA are answered
    diagnostics_listen: str = ""  # set: diagnostics and metrics move to this separate plain-HTTP listener
    log_format: str = "json"
    log_level: str = "INFO"
    extra: Mapping[str, Any] = field(default_factory=dict)


_TOP_LEVEL = {
    "listen",
    "scoring",
    "quota",
    "reservations",
    "bind",
    "limits",
    "diagnostics",
    "source",
    "logging",
    "search",
    "tls",
}


def _section(raw: Mapping[str, Any], name: str, allowed: set[str]) -> Mapping[str, Any]:
    value = raw.get(name) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name}: must be a mapping")
    unknown = set(value) - allowed
    if unknown:
        raise ConfigError(
            f"{name}: unknown option(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(allowed))}"
        )
    return value


def _number(section: Mapping[str, Any], key: str, where: str, default: float, *, minimum: float = 0) -> float:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise ConfigError(f"{where}.{key}: must be a number >= {minimum}, got {value!r}")
    return float(value)


def _integer(section: Mapping[str, Any], key: str, where: str, default: int, *, minimum: int = 0) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}.{key}: must be an integer >= {minimum}, got {value!r}")
    return value


def parse_config(raw: Mapping[str, Any]) -> ExtenderConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError("the configuration must be a YAML mapping")
    unknown = set(raw) - _TOP_LEVEL
    if unknown:
        raise ConfigError(f"unknown top-level option(s) {', '.join(sorted(unknown))}")
    listen = raw.get("listen", "127.0.0.1:8888")
    if not isinstance(listen, str) or ":" not in listen:
        raise ConfigError(f"listen: must be HOST:PORT, got {listen!r}")

    scoring = _section(raw, "scoring", {"strategy", "weights", "allowPodAnnotation"})
    strategy = scoring.get("strategy", "MostAllocated")
    if strategy not in STRATEGIES:
        raise ConfigError(f"scoring.strategy: must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    weights_raw = scoring.get("weights") or {}
    if not isinstance(weights_raw, Mapping) or set(weights_raw) - {"deviceFit", "firstAvailable", "quotaHeadroom"}:
        raise ConfigError("scoring.weights: allowed keys are deviceFit, firstAvailable, quotaHeadroom")
    defaults = ScoringWeights()
    weights = ScoringWeights(
        device_fit=_integer(weights_raw, "deviceFit", "scoring.weights", defaults.device_fit),
        first_available=_integer(weights_raw, "firstAvailable", "scoring.weights", defaults.first_available),
        quota_headroom=_integer(weights_raw, "quotaHeadroom", "scoring.weights", defaults.quota_headroom),
    )
    allow_annotation = scoring.get("allowPodAnnotation", True)
    if not isinstance(allow_annotation, bool):
        raise ConfigError("scoring.allowPodAnnotation: must be true or false")

    quota = _section(raw, "quota", {"unmappedDeviceClasses", "deviceClassMappings", "kueueConfigMap"})
    unmapped = quota.get("unmappedDeviceClasses", UNMAPPED_IGNORE)
    if unmapped not in (UNMAPPED_IGNORE, UNMAPPED_REJECT):
        raise ConfigError(f"quota.unmappedDeviceClasses: must be {UNMAPPED_IGNORE} or {UNMAPPED_REJECT}")
    mappings = None
    if quota.get("deviceClassMappings") is not None:
        try:
            mappings = parse_device_class_mappings({"resources": {"deviceClassMappings": quota["deviceClassMappings"]}})
        except (ObjectError, ValueError) as error:
            raise ConfigError(f"quota.deviceClassMappings: {error}") from None
    cm_raw = quota.get("kueueConfigMap") or {}
    if not isinstance(cm_raw, Mapping) or set(cm_raw) - {"namespace", "name", "key"}:
        raise ConfigError("quota.kueueConfigMap: allowed keys are namespace, name, key")
    default_ref = KueueConfigRef()
    kueue_ref = KueueConfigRef(
        namespace=str(cm_raw.get("namespace", default_ref.namespace)),
        name=str(cm_raw.get("name", default_ref.name)),
        key=str(cm_raw.get("key", default_ref.key)),
    )

    reservations = _section(raw, "reservations", {"ttlSeconds"})
    bind = _section(raw, "bind", {"enabled"})
    limits = _section(raw, "limits", {"maxBodyBytes", "maxNodesPerRequest", "requestDeadlineSeconds"})
    diagnostics = _section(raw, "diagnostics", {"history", "historyNodeVerdicts", "listen"})
    tls = _section(raw, "tls", {"certFile", "keyFile", "clientCAFile"})
    for key in ("certFile", "keyFile", "clientCAFile"):
        if not isinstance(tls.get(key, ""), str):
            raise ConfigError(f"tls.{key}: must be a file path")
    if bool(tls.get("certFile")) != bool(tls.get("keyFile")):
        raise ConfigError("tls: certFile and keyFile go together")
    if tls.get("clientCAFile") and not tls.get("certFile"):
        raise ConfigError("tls.clientCAFile needs tls.certFile and tls.keyFile (client certificates need TLS)")
    for key in ("certFile", "keyFile", "clientCAFile"):
        if tls.get(key) and not Path(tls[key]).is_file():
            raise ConfigError(f"tls.{key}: {tls[key]} does not exist")
    diagnostics_listen = diagnostics.get("listen", "")
    if diagnostics_listen and (not isinstance(diagnostics_listen, str) or ":" not in diagnostics_listen):
        raise ConfigError(f"diagnostics.listen: must be HOST:PORT, got {diagnostics_listen!r}")
    source = _section(raw, "source", {"staleGraceSeconds"})
    logging_section = _section(raw, "logging", {"format", "level"})
    search = _section(raw, "search", {"budget"})
    log_format = logging_section.get("format", "json")
    if log_format not in ("json", "text"):
        raise ConfigError("logging.format: must be json or text")
    log_level = str(logging_section.get("level", "INFO")).upper()
    if log_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError("logging.level: must be DEBUG, INFO, WARNING or ERROR")
    bind_enabled = bind.get("enabled", False)
    if not isinstance(bind_enabled, bool):
        raise ConfigError("bind.enabled: must be true or false")
    return ExtenderConfig(
        listen=listen,
        decisions=DecisionOptions(
            scoring_strategy=strategy,
            weights=weights,
            unmapped_classes=unmapped,
            search_budget=_integer(search, "budget", "search", 20_000, minimum=1),
            allow_strategy_annotation=allow_annotation,
        ),
        device_class_mappings=mappings,
        kueue_config=kueue_ref,
        reservation_ttl_seconds=_number(reservations, "ttlSeconds", "reservations", 60.0, minimum=1),
        bind_enabled=bind_enabled,
        max_body_bytes=_integer(limits, "maxBodyBytes", "limits", 8 * 1024 * 1024, minimum=1024),
        max_nodes_per_request=_integer(limits, "maxNodesPerRequest", "limits", 10_000, minimum=1),
        request_deadline_seconds=_number(limits, "requestDeadlineSeconds", "limits", 4.0, minimum=0.1),
        diagnostics_history=_integer(diagnostics, "history", "diagnostics", 2048, minimum=1),
        diagnostics_history_verdicts=_integer(diagnostics, "historyNodeVerdicts", "diagnostics", 250_000, minimum=1),
        stale_grace_seconds=_number(source, "staleGraceSeconds", "source", 60.0, minimum=1),
        tls_cert_file=tls.get("certFile", ""),
        tls_key_file=tls.get("keyFile", ""),
        tls_client_ca_file=tls.get("clientCAFile", ""),
        diagnostics_listen=diagnostics_listen,
        log_format=log_format,
        log_level=log_level,
    )


def load_config(path: str | Path | None) -> ExtenderConfig:
    if path is None:
        return ExtenderConfig()
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: invalid YAML: {error}") from None
    return parse_config(raw)
