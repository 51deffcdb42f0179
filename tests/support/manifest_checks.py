"""What the deployment manifests must hold, as checks shared by the kustomize tests (test_manifests) and the Helm
chart tests (test_helm_chart), so both renders are held to the same rules."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from extender.state.kinds import KINDS
from extender.state.live import DEFAULT_KUEUE_CONFIGMAP

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CONFIG = ROOT / "config"
BIND = MANIFESTS / "components" / "bind"
RESTRICT = MANIFESTS / "components" / "restrict-ingress"
READ_VERBS = {"get", "list", "watch"}
EXTENDER_ROLE = "dra-quota-extender:read"
REQUEUE_ROLE = "dra-quota-extender:requeue"
REQUEUE_CLASS = "dra-extender-requeue"  # config/extender.yaml requeue.deviceClassName
SERVICE_ACCOUNT = ("kube-system", "dra-quota-scheduler")  # kube-scheduler's, the pod's
EXTENDER_ACCOUNT = ("kube-system", "dra-quota-extender")  # the extender's own
EXTENDER_TOKEN_SECRET = "dra-quota-extender-token"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
KUBECTL = shutil.which("kubectl")

Doc = dict[str, Any]


def load(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def kustomization(directory: Path) -> Doc:
    return load(directory / "kustomization.yaml")[0]


def resources_of(directory: Path) -> list[Doc]:
    return [doc for name in kustomization(directory).get("resources", []) for doc in load(directory / name)]


def base_docs() -> list[Doc]:
    return resources_of(MANIFESTS)


def one(docs: Iterable[Doc], kind: str, name: str | None = None) -> Doc:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(docs: Iterable[Doc]) -> Doc:
    return one(docs, "Deployment", "dra-quota-scheduler")["spec"]["template"]["spec"]


def all_containers(spec: Mapping[str, Any]) -> list[Doc]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def container(spec: Mapping[str, Any], name: str) -> Doc:
    return next(c for c in all_containers(spec) if c["name"] == name)


def rules(docs: Iterable[Doc], *kinds: str) -> list[tuple[str, Doc]]:
    return [(d["metadata"]["name"], rule) for d in docs if d["kind"] in kinds for rule in d.get("rules", [])]


def config(name: str) -> Doc | None:
    path = CONFIG / name
    return yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None


# --- checks shared by the raw files and kubectl's build --------------------------------------------------------


def check_extender_role(docs: list[Doc]) -> None:
    role = one(docs, "ClusterRole", EXTENDER_ROLE)
    granted = set()
    for rule in role["rules"]:
        assert set(rule["verbs"]) == READ_VERBS, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.add((group, resource))
                if resource == "configmaps":
                    assert rule["resourceNames"] == [DEFAULT_KUEUE_CONFIGMAP[1]], "only Kueue's ConfigMap"
                else:
                    assert "resourceNames" not in rule
    assert granted == {(info.group, info.plural) for info in KINDS}
    binding = one(docs, "ClusterRoleBinding", EXTENDER_ROLE)
    assert binding["roleRef"]["name"] == EXTENDER_ROLE
    assert [(s["namespace"], s["name"]) for s in binding["subjects"]] == [EXTENDER_ACCOUNT]


def check_least_privilege(docs: list[Doc]) -> None:
    """Reads only; the two writes of the base are by name: kube-scheduler's own lease, and the extender's patch of
    the requeue DeviceClass the base ships (selecting no device)."""
    for role, rule in rules(docs, "Role", "ClusterRole"):
        if set(rule["verbs"]) <= READ_VERBS:
            continue
        if role == REQUEUE_ROLE:
            assert rule["resources"] == ["deviceclasses"] and rule["resourceNames"] == [REQUEUE_CLASS]
            assert rule["verbs"] == ["patch"]
            continue
        assert role == "dra-quota-scheduler:leader-election", f"{role} writes: {rule}"
        assert rule["resources"] == ["leases"] and rule["resourceNames"] == ["dra-quota-scheduler"]
        assert set(rule["verbs"]) == {"get", "update"}
    requeue_class = one(docs, "DeviceClass", REQUEUE_CLASS)
    assert "namespace" not in requeue_class["metadata"], "DeviceClass is cluster-scoped"
    assert requeue_class["spec"] == {"selectors": [{"cel": {"expression": "false"}}]}, "selects no device"
    binding = one(docs, "ClusterRoleBinding", REQUEUE_ROLE)
    assert [(s["namespace"], s["name"]) for s in binding["subjects"]] == [EXTENDER_ACCOUNT]
    for _, rule in rules(docs, "Role", "ClusterRole"):
        assert not {"pods/binding", "bindings", "*"} & set(rule["resources"]), rule
        assert "*" not in rule["verbs"] and "*" not in rule["apiGroups"]


def check_scheduler_roles(docs: list[Doc]) -> None:
    bound = {
        (d["kind"], d["roleRef"]["name"])
        for d in docs
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and [(s.get("namespace"), s["name"]) for s in d["subjects"]] == [SERVICE_ACCOUNT]
    }
    assert {
        ("ClusterRoleBinding", "system:kube-scheduler"),
        ("ClusterRoleBinding", "system:volume-scheduler"),
        ("RoleBinding", "extension-apiserver-authentication-reader"),
        ("RoleBinding", "dra-quota-scheduler:leader-election"),
    } <= bound
    assert not [role for _, role in bound if role.startswith("dra-quota-extender:")], "the extender's roles are its own"
    sa = one(docs, "ServiceAccount", SERVICE_ACCOUNT[1])
    assert sa["metadata"]["namespace"] == SERVICE_ACCOUNT[0]
    assert pod_spec(docs)["serviceAccountName"] == SERVICE_ACCOUNT[1]


def bound_roles(docs: Iterable[Doc], account: tuple[str, str]) -> set[tuple[str, str]]:
    """(binding kind, role name) of every binding naming `account` among its subjects."""
    return {
        (d["kind"], d["roleRef"]["name"])
        for d in docs
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and account in [(s.get("namespace"), s["name"]) for s in d["subjects"] if s["kind"] == "ServiceAccount"]
    }


def _token_volume(spec: Mapping[str, Any], container_name: str) -> Doc:
    mounts = [m for m in container(spec, container_name)["volumeMounts"] if m["mountPath"] == TOKEN_DIR]
    assert len(mounts) == 1 and mounts[0].get("readOnly") is True, f"{container_name} mounts one token, read-only"
    return next(v for v in spec["volumes"] if v["name"] == mounts[0]["name"])


def check_one_identity_per_container(docs: list[Doc]) -> None:
    """Least privilege in one pod: the pod's automatic token is off, kube-scheduler mounts the pod's projected
    token (its ServiceAccount, bound to system:kube-scheduler), the extender the token of its own ServiceAccount,
    which holds only the extender's roles; neither sees the other's."""
    spec = pod_spec(docs)
    assert spec["automountServiceAccountToken"] is False
    for account in (SERVICE_ACCOUNT, EXTENDER_ACCOUNT):
        sa = one(docs, "ServiceAccount", account[1])
        assert sa["metadata"]["namespace"] == account[0] and sa["automountServiceAccountToken"] is False
    scheduler = _token_volume(spec, "kube-scheduler")
    sources = scheduler["projected"]["sources"]
    assert [s["serviceAccountToken"] for s in sources if "serviceAccountToken" in s] == [
        {"path": "token", "expirationSeconds": 3607}
    ]
    extender = _token_volume(spec, "extender")
    assert extender["secret"]["secretName"] == EXTENDER_TOKEN_SECRET
    secret = one(docs, "Secret", EXTENDER_TOKEN_SECRET)
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"]["kubernetes.io/service-account.name"] == EXTENDER_ACCOUNT[1]
    assert secret["metadata"]["namespace"] == EXTENDER_ACCOUNT[0]
    roles = bound_roles(docs, EXTENDER_ACCOUNT)
    assert roles and all(role.startswith("dra-quota-extender:") for _, role in roles), roles
    assert ("ClusterRoleBinding", EXTENDER_ROLE) in roles and ("RoleBinding", "dra-quota-extender:lease") in roles
    lease = one(docs, "Role", "dra-quota-extender:lease")
    assert lease["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["dra-quota-scheduler"],
         "verbs": ["get"]}
    ]  # fmt: skip


def check_hardened_pod(docs: list[Doc]) -> None:
    spec = pod_spec(docs)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert {c["name"] for c in all_containers(spec)} == {"extender", "kube-scheduler"}
    for c in all_containers(spec):
        security = c["securityContext"]
        assert security.get("readOnlyRootFilesystem") is True, c["name"]
        assert security.get("runAsNonRoot") is True, c["name"]
        assert security.get("allowPrivilegeEscalation") is False, c["name"]
        assert security["capabilities"]["drop"] == ["ALL"], c["name"]
        for part in ("requests", "limits"):
            assert set(c["resources"][part]) == {"cpu", "memory"}, (c["name"], part)
        assert c.get("livenessProbe") and c.get("readinessProbe"), c["name"]
        assert any(m["mountPath"] == "/tmp" for m in c["volumeMounts"]), "writable /tmp under a read-only root"


def check_extender_sidecar(docs: list[Doc]) -> None:
    spec = pod_spec(docs)
    extender = container(spec, "extender")
    assert extender in spec.get("initContainers", []) and extender["restartPolicy"] == "Always", "native sidecar"
    command = [*extender["command"], *extender["args"]]
    assert command[:5] == ["dra-extender", "serve", "--in-cluster", "--config", "/etc/dra-extender/extender.yaml"]
    port = next(p for p in extender["ports"] if p["name"] == "http")
    assert port["containerPort"] == 9090
    # startup and readiness: the view is synced (filter answers only then); liveness: the verbs are not wedged
    assert extender["startupProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert extender["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    assert extender["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    name, _, tag = extender["image"].rpartition(":")
    assert name.endswith("dra-quota-extender") or "@sha256:" in extender["image"]
    assert tag and tag != "latest", "the image is pinned"
    mounts = {m["mountPath"]: m["name"] for m in extender["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/etc/dra-extender"]]["configMap"]["name"].startswith("dra-extender-config")

    scheduler = container(spec, "kube-scheduler")
    assert re.fullmatch(r"registry\.k8s\.io/kube-scheduler:v1\.(3[4-9]|[4-9]\d)\.\d+", scheduler["image"])
    assert "--config=/etc/kubernetes/dra-quota-scheduler/kube-scheduler-config.yaml" in scheduler["command"]
    mounts = {m["mountPath"]: m["name"] for m in scheduler["volumeMounts"]}
    config_volume = volumes[mounts["/etc/kubernetes/dra-quota-scheduler"]]
    assert config_volume["configMap"]["name"].startswith("dra-quota-scheduler-config")


def check_metrics_service(docs: list[Doc]) -> None:
    service = one(docs, "Service", "dra-quota-scheduler-metrics")
    labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert port["port"] == 9090 and port["targetPort"] == "http"
    assert service["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1] if name in command else ""


def check_only_metrics_face_the_pod_network(docs: list[Doc]) -> None:
    """Diagnostics (every tenant's quota, pod names, what-if queries) are not reachable from another pod's
    address: the listeners the deployment binds outside loopback serve /metrics and the probes, nothing else."""
    from extender.cli import listener_settings
    from extender.service import ExtenderConfig
    from tests.support.scenarios import engine_for

    extender = container(pod_spec(docs), "extender")
    command = [*extender["command"], *extender["args"]]
    addresses = {
        "scheduling": _flag(command, "--listen"),
        "diagnostics": _flag(command, "--diagnostics-listen"),
        "metrics": _flag(command, "--metrics-listen"),
    }
    assert addresses["scheduling"].startswith("127.0.0.1:")
    assert addresses["diagnostics"].startswith("127.0.0.1:"), "diagnostics on loopback"
    listeners = listener_settings(
        engine_for([]), ExtenderConfig(), addresses["scheduling"], addresses["diagnostics"], addresses["metrics"]
    )
    exposed = [listener for listener in listeners if not listener.address.startswith("127.0.0.1:")]
    assert [listener.address for listener in exposed] == [addresses["metrics"]]
    (metrics,) = exposed
    routes = {rule.rule for rule in metrics.app.url_map.iter_rules() if rule.endpoint != "static"}  # type: ignore[attr-defined]
    assert "/metrics" in routes and {"/healthz", "/livez", "/readyz"} <= routes
    assert not [route for route in routes if route.startswith("/diagnostics") or route in ("/filter", "/bind")]
    port = next(p for p in extender["ports"] if p["name"] == "http")
    assert addresses["metrics"].endswith(f":{port['containerPort']}"), "the exposed port is the metrics listener"
    assert len(extender["ports"]) == 1, "no other container port"


ALL_CHECKS = (
    check_only_metrics_face_the_pod_network,
    check_one_identity_per_container,
    check_extender_role,
    check_least_privilege,
    check_scheduler_roles,
    check_hardened_pod,
    check_extender_sidecar,
    check_metrics_service,
)


# --- the raw files ---------------------------------------------------------------------------------------------
