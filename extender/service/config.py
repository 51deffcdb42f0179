"""The extender's own configuration file (YAML), validated strictly at start.

A typo in an option must stop the extender with a message naming the option, not silently fall back to a
default that schedules differently than the operator intended.

The section dataclasses below are the single source of every option: the YAML key (field metadata `key`), the
default (the field's default), the type and bounds. The loader walks them, config/extender.yaml documents them
(a test keeps its values equal to these defaults), and the rest of the program reads typed sections.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from extender.decisions.devices.features import (
    DEFAULT_FEATURES,
    GATE_DEPENDENCIES,
    LOCKED_GATES,
    UNIMPLEMENTED_ALPHA_GATES,
    Features,
)
from extender.decisions.gang.features import WORKLOAD_GATE_DEPENDENCIES, WorkloadFeatures
from extender.decisions.quota.charges import UNMAPPED_IGNORE, UNMAPPED_REJECT
from extender.decisions.quota.context import KueueConfigRef
from extender.decisions.scheduling import DecisionOptions
from extender.decisions.scoring import STRATEGIES, STRATEGY_MOST, ScoringWeights
from extender.state.errors import ObjectError
from extender.state.kueue.device_class_mappings import DeviceClassMappings, parse_device_class_mappings


class ConfigError(ValueError):
    """The configuration file is invalid."""


def option(
    key: str,
    default: Any,
    *,
    minimum: float = 0,
    choices: tuple[str, ...] = (),
    parse: Callable[[Any, str], Any] | None = None,
) -> Any:
    """A field of a section: its YAML key, default and validation in one place."""
    section = type(default) if dataclasses.is_dataclass(default) else None
    metadata = {"key": key, "minimum": minimum, "choices": choices, "parse": parse, "section": section}
    if section is None:
        return field(default=default, metadata=metadata)
    return field(default_factory=lambda: default, metadata=metadata)  # sections are frozen: one shared default


def _host_port(value: Any, where: str) -> str:
    if value == "":
        return ""
    if not isinstance(value, str) or ":" not in value:
        raise ConfigError(f"{where}: must be HOST:PORT, got {value!r}")
    return value


def _mappings(value: Any, where: str) -> DeviceClassMappings | None:
    if value is None:
        return None
    try:
        return parse_device_class_mappings({"resources": {"deviceClassMappings": value}})
    except (ObjectError, ValueError) as error:
        raise ConfigError(f"{where}: {error}") from None


def _file(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: must be a file path")
    if value and not Path(value).is_file():
        raise ConfigError(f"{where}: {value} does not exist")
    return value


def _names(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{where}: must be a list of non-empty strings, got {value!r}")
    return tuple(v.strip() for v in value)


def _log_level(value: Any, where: str) -> str:
    level = str(value).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"{where}: must be DEBUG, INFO, WARNING or ERROR")
    return level


JOURNAL_AUTO = "auto"
_WEIGHTS = ScoringWeights()
_KUEUE_CONFIG = KueueConfigRef()


@dataclass(frozen=True, slots=True)
class WeightsSection:
    device_fit: int = option("deviceFit", _WEIGHTS.device_fit)
    first_available: int = option("firstAvailable", _WEIGHTS.first_available)
    quota_headroom: int = option("quotaHeadroom", _WEIGHTS.quota_headroom)


@dataclass(frozen=True, slots=True)
class ScoringSection:
    strategy: str = option("strategy", STRATEGY_MOST, choices=STRATEGIES)
    weights: WeightsSection = option("weights", WeightsSection())
    allow_pod_annotation: bool = option("allowPodAnnotation", True)


@dataclass(frozen=True, slots=True)
class KueueConfigMapSection:
    namespace: str = option("namespace", _KUEUE_CONFIG.namespace)
    name: str = option("name", _KUEUE_CONFIG.name)
    key: str = option("key", _KUEUE_CONFIG.key)


@dataclass(frozen=True, slots=True)
class QuotaSection:
    unmapped_device_classes: str = option(
        "unmappedDeviceClasses", UNMAPPED_IGNORE, choices=(UNMAPPED_IGNORE, UNMAPPED_REJECT)
    )
    kueue_config_map: KueueConfigMapSection = option("kueueConfigMap", KueueConfigMapSection())
    device_class_mappings: DeviceClassMappings | None = option("deviceClassMappings", None, parse=_mappings)


@dataclass(frozen=True, slots=True)
class ReservationsSection:
    ttl_seconds: float = option("ttlSeconds", 60.0, minimum=1)
    # Where `serve` with a live source keeps the ledger across restarts (state/reservation_journal.py): "auto"
    # (the temporary directory, one file per listen address and API server), a file path, or "" (memory only).
    journal: str = option("journal", JOURNAL_AUTO)
    # A gang's attempt (service/gang_attempts.py) is lost when no member is asked about for this long while the
    # group is not placed: kube-scheduler filters a gang's pods back to back, then binds or reverts them all.
    gang_window_seconds: float = option("gangAttemptWindowSeconds", 2.0, minimum=0.2)


@dataclass(frozen=True, slots=True)
class LeaderSection:
    # The kube-scheduler's leader-election Lease, namespace/name (service/leadership.py; the one
    # config/kube-scheduler-config.yaml elects on): while another replica holds it, filter refuses pods it would
    # reserve for. "" when kube-scheduler runs without leader election.
    lease: str = option("lease", "kube-system/dra-quota-scheduler")
    # The hostname of the kube-scheduler beside this extender, as its holderIdentity starts: "" for this
    # machine's (a sidecar shares its pod's hostname).
    identity: str = option("identity", "")
    # A Lease reading older than this (reads failing) tells nothing: reserve as a single scheduler's extender.
    stale_seconds: float = option("staleSeconds", 10.0, minimum=1)


@dataclass(frozen=True, slots=True)
class BindSection:
    enabled: bool = option("enabled", False)
    # bind answers only for pods of these schedulers (spec.schedulerName), and only on a node the extender's own
    # filter passed the pod on (service/bind_proofs.py) within filterMaxAgeSeconds.
    scheduler_names: tuple[str, ...] = option("schedulerNames", ("dra-quota-scheduler",), parse=_names)
    filter_max_age_seconds: float = option("filterMaxAgeSeconds", 600.0, minimum=1)


@dataclass(frozen=True, slots=True)
class LimitsSection:
    # kube-scheduler's filter body with nodeCacheCapable: the Pod and node names (~40 bytes each): 10,000 nodes
    # fit in well under 1 MiB. The Nodes form (full Node objects) needs more: raise it for that.
    max_body_bytes: int = option("maxBodyBytes", 1024 * 1024, minimum=1024)
    max_nodes_per_request: int = option("maxNodesPerRequest", 10_000, minimum=1)
    request_deadline_seconds: float = option("requestDeadlineSeconds", 4.0, minimum=0.1)


@dataclass(frozen=True, slots=True)
class SearchSection:
    budget: int = option("budget", 20_000, minimum=1)


@dataclass(frozen=True, slots=True)
class ExplainSection:
    max_nodes: int = option("maxNodes", 1000, minimum=1)
    deadline_seconds: float = option("deadlineSeconds", 10.0, minimum=0.1)
    concurrency: int = option("concurrency", 2, minimum=1)


def _auth_mode(value: Any, where: str) -> str:
    if value not in ("none", "kubernetes"):
        raise ConfigError(f"{where}: must be none or kubernetes, got {value!r}")
    return str(value)


@dataclass(frozen=True, slots=True)
class DiagnosticsAuthSection:
    mode: str = option("mode", "none", parse=_auth_mode)
    cache_seconds: float = option("cacheSeconds", 60.0, minimum=0)
    # TokenReview spec.audiences: empty for the API server's own audiences (any token that works against the
    # API server); set, only tokens minted for one of these (kubectl create token --audience ...).
    audiences: tuple[str, ...] = option("audiences", (), parse=_names)


@dataclass(frozen=True, slots=True)
class DiagnosticsSection:
    history: int = option("history", 2048, minimum=1)
    history_node_verdicts: int = option("historyNodeVerdicts", 250_000, minimum=1)
    listen: str = option("listen", "", parse=_host_port)
    max_connections: int = option("maxConnections", 64, minimum=1)
    max_body_bytes: int = option("maxBodyBytes", 256 * 1024, minimum=1024)
    yaml_max_bytes: int = option("yamlMaxBytes", 64 * 1024, minimum=0)
    # At most this many requests for diagnostics, the web view and explains at once in the process (429 beyond):
    # the rest of the worker threads stay free for kube-scheduler's verbs.
    concurrency: int = option("concurrency", 4, minimum=1)
    # Host names (besides IP addresses and localhost) the diagnostics answer to; ".example.com" with subdomains.
    allowed_hosts: tuple[str, ...] = option("allowedHosts", (), parse=_names)
    explain: ExplainSection = option("explain", ExplainSection())
    auth: DiagnosticsAuthSection = option("auth", DiagnosticsAuthSection())


@dataclass(frozen=True, slots=True)
class RequeueSection:
    device_class_name: str = option("deviceClassName", "dra-extender-requeue")  # config/extender.yaml says why
    min_interval_seconds: float = option("minIntervalSeconds", 1.0, minimum=0.1)


@dataclass(frozen=True, slots=True)
class MetricsSection:
    listen: str = option("listen", "", parse=_host_port)
    max_connections: int = option("maxConnections", 32, minimum=1)


@dataclass(frozen=True, slots=True)
class ServerSection:
    read_timeout_seconds: float = option("readTimeoutSeconds", 3.0, minimum=0.1)
    request_timeout_seconds: float = option("requestTimeoutSeconds", 30.0, minimum=1)
    max_connections: int = option("maxConnections", 128, minimum=1)
    liveness_probe_timeout_seconds: float = option("livenessProbeTimeoutSeconds", 2.0, minimum=0.1)
    stuck_request_seconds: float = option("stuckRequestSeconds", 20.0, minimum=1)


@dataclass(frozen=True, slots=True)
class TlsSection:
    cert_file: str = option("certFile", "", parse=_file)
    key_file: str = option("keyFile", "", parse=_file)
    client_ca_file: str = option("clientCAFile", "", parse=_file)  # set: only clients with a cert from this CA
    # The identities kube-scheduler's client certificate may carry (subject CN or a DNS/URI SAN); with
    # clientCAFile, any other certificate of the CA is refused. Required when the verbs listen off loopback.
    client_names: tuple[str, ...] = option("clientNames", (), parse=_names)


@dataclass(frozen=True, slots=True)
class SourceSection:
    stale_grace_seconds: float = option("staleGraceSeconds", 60.0, minimum=1)
    verdict_grace_seconds: float = option("verdictGraceSeconds", 2.0, minimum=0)


@dataclass(frozen=True, slots=True)
class LoggingSection:
    format: str = option("format", "json", choices=("json", "text"))
    level: str = option("level", "INFO", parse=_log_level)


@dataclass(frozen=True, slots=True)
class FeaturesSection:
    """kube-scheduler's DRA feature gates, spelled as upstream (pkg/features/kube_features.go, v1.37.2), with
    its 1.37 defaults: set them as the cluster's kube-scheduler has them, so that our verdicts are its verdicts.
    The alpha gates are off and must stay off: the allocator does not implement them (a start-up error)."""

    admin_access: bool = option("DRAAdminAccess", DEFAULT_FEATURES.admin_access)
    consumable_capacity: bool = option("DRAConsumableCapacity", DEFAULT_FEATURES.consumable_capacity)
    device_binding_conditions: bool = option("DRADeviceBindingConditions", DEFAULT_FEATURES.device_binding_conditions)
    device_taints: bool = option("DRADeviceTaints", DEFAULT_FEATURES.device_taints)
    extended_resource: bool = option("DRAExtendedResource", DEFAULT_FEATURES.extended_resource)
    fractional_capacity_range: bool = option("DRAFractionalCapacityRange", DEFAULT_FEATURES.fractional_capacity_range)
    partitionable_devices: bool = option("DRAPartitionableDevices", DEFAULT_FEATURES.partitionable_devices)
    prioritized_list: bool = option("DRAPrioritizedList", DEFAULT_FEATURES.prioritized_list)
    # alpha, off in 1.37, not implemented
    derived_attributes: bool = option("DRADerivedAttributes", False)
    device_compatibility_groups: bool = option("DRADeviceCompatibilityGroups", False)
    list_type_attributes: bool = option("DRAListTypeAttributes", False)
    optional_node_operations: bool = option("DRAOptionalNodeOperations", False)
    # workload-aware scheduling (decisions/gang/features.py): beta and alpha, off in 1.37
    generic_workload: bool = option("GenericWorkload", False)
    workload_resource_claims: bool = option("DRAWorkloadResourceClaims", False)
    topology_aware: bool = option("TopologyAwareWorkloadScheduling", False)
    composite_pod_group: bool = option("CompositePodGroup", False)
    workload_with_job: bool = option("WorkloadWithJob", False)

    def value(self) -> Features:
        """The gates the allocator honours, as one frozen value."""
        return Features(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Features)})

    def workload(self) -> WorkloadFeatures:
        """The workload-aware scheduling gates, as one frozen value."""
        return WorkloadFeatures(**{f.name: getattr(self, f.name) for f in dataclasses.fields(WorkloadFeatures)})


def _check_features(section: FeaturesSection) -> None:
    keys = {f.metadata["key"]: f.name for f in dataclasses.fields(FeaturesSection)}
    enabled = [gate for gate in UNIMPLEMENTED_ALPHA_GATES if getattr(section, keys[gate])]
    if enabled:
        raise ConfigError(
            f"features: {', '.join(enabled)} is alpha and not implemented by this extender; leave it false "
            "(a kube-scheduler with it on may decide differently than the extender)"
        )
    locked = [gate for gate in LOCKED_GATES if not getattr(section, keys[gate])]
    if locked:
        raise ConfigError(
            f"features: {', '.join(locked)} is GA and locked to true in Kubernetes 1.37 (kube-scheduler refuses "
            "to start with it off)"
        )
    for gate, needs in {**GATE_DEPENDENCIES, **WORKLOAD_GATE_DEPENDENCIES}.items():
        if getattr(section, keys[gate]) and not getattr(section, keys[needs]):
            raise ConfigError(f"features: {gate} needs {needs}; turn both off (as kube-scheduler requires)")


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    listen: str = option("listen", "127.0.0.1:8888", parse=_host_port)
    scoring: ScoringSection = option("scoring", ScoringSection())
    quota: QuotaSection = option("quota", QuotaSection())
    reservations: ReservationsSection = option("reservations", ReservationsSection())
    leader: LeaderSection = option("leader", LeaderSection())
    bind: BindSection = option("bind", BindSection())
    requeue: RequeueSection = option("requeue", RequeueSection())
    limits: LimitsSection = option("limits", LimitsSection())
    search: SearchSection = option("search", SearchSection())
    diagnostics: DiagnosticsSection = option("diagnostics", DiagnosticsSection())
    metrics: MetricsSection = option("metrics", MetricsSection())
    server: ServerSection = option("server", ServerSection())
    tls: TlsSection = option("tls", TlsSection())
    source: SourceSection = option("source", SourceSection())
    logging: LoggingSection = option("logging", LoggingSection())
    features: FeaturesSection = option("features", FeaturesSection())

    @property
    def decisions(self) -> DecisionOptions:
        """What the decision functions need of the configuration."""
        weights = self.scoring.weights
        return DecisionOptions(
            scoring_strategy=self.scoring.strategy,
            weights=ScoringWeights(weights.device_fit, weights.first_available, weights.quota_headroom),
            unmapped_classes=self.quota.unmapped_device_classes,
            search_budget=self.search.budget,
            allow_strategy_annotation=self.scoring.allow_pod_annotation,
            features=self.features.value(),
            workload=self.features.workload(),
        )

    @property
    def kueue_config(self) -> KueueConfigRef:
        ref = self.quota.kueue_config_map
        return KueueConfigRef(ref.namespace, ref.name, ref.key)


S = TypeVar("S")


def _scalar(value: Any, kind: Any, where: str, minimum: float, choices: tuple[str, ...]) -> Any:
    if kind in (bool, "bool"):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: must be true or false, got {value!r}")
        return value
    if kind in (int, "int"):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"{where}: must be an integer >= {minimum:g}, got {value!r}")
        return value
    if kind in (float, "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise ConfigError(f"{where}: must be a number >= {minimum:g}, got {value!r}")
        return float(value)
    if choices and value not in choices:
        raise ConfigError(f"{where}: must be one of {', '.join(choices)}, got {value!r}")
    if not isinstance(value, str):
        raise ConfigError(f"{where}: must be a string, got {value!r}")
    return value


def parse_section(section_type: type[S], raw: Any, where: str = "") -> S:
    """A section from its YAML mapping: unknown keys rejected, every value checked, absent keys defaulted."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where or 'the configuration'}: must be a mapping")
    fields = {f.metadata["key"]: f for f in dataclasses.fields(section_type)}  # type: ignore[arg-type]  # S is a dataclass
    unknown = set(raw) - set(fields)
    if unknown:
        label = f"{where}: unknown option(s)" if where else "unknown top-level option(s)"
        raise ConfigError(f"{label} {', '.join(sorted(map(str, unknown)))}; allowed: {', '.join(sorted(fields))}")
    values: dict[str, Any] = {}
    for key, spec in fields.items():
        if key not in raw:
            continue
        path = f"{where}.{key}" if where else key
        value = raw[key]
        if spec.metadata["parse"] is not None:
            values[spec.name] = spec.metadata["parse"](value, path)
        elif spec.metadata["section"] is not None:
            values[spec.name] = parse_section(spec.metadata["section"], value, path)
        else:
            values[spec.name] = _scalar(value, spec.type, path, spec.metadata["minimum"], spec.metadata["choices"])
    return section_type(**values)


def parse_config(raw: Any) -> ExtenderConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError("the configuration must be a YAML mapping")
    gates = raw.get("features")
    if isinstance(gates, Mapping):
        known = {f.metadata["key"] for f in dataclasses.fields(FeaturesSection)}
        unknown = sorted(map(str, set(gates) - known))
        if unknown:
            raise ConfigError(
                f"features: unknown feature gate(s) {', '.join(unknown)} (names as kube-scheduler spells them); "
                f"known: {', '.join(sorted(known))}"
            )
    config = parse_section(ExtenderConfig, raw)
    _check_features(config.features)
    tls = config.tls
    if bool(tls.cert_file) != bool(tls.key_file):
        raise ConfigError("tls: certFile and keyFile go together")
    if tls.client_ca_file and not tls.cert_file:
        raise ConfigError("tls.clientCAFile needs tls.certFile and tls.keyFile (client certificates need TLS)")
    if tls.client_names and not tls.client_ca_file:
        raise ConfigError("tls.clientNames needs tls.clientCAFile (the names are those of client certificates)")
    return config


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
