"""The kustomize deployment: least-privilege RBAC, hardened pods, probes, and agreement with the config files.

The structural checks parse the YAML directly and always run; they are what keeps the RBAC rules equal to the
collections the live source watches when either changes. Building with kubectl's kustomize, which also proves
that generated ConfigMap names are wired into the Deployment, runs when kubectl is on PATH.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.state.kinds import KINDS
from extender.state.live import DEFAULT_KUEUE_CONFIGMAP

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
CONFIG = ROOT / "config"
BIND = MANIFESTS / "components" / "bind"
RESTRICT = MANIFESTS / "components" / "restrict-ingress"
READ_VERBS = {"get", "list", "watch"}
EXTENDER_ROLE = "dra-quota-extender:read"
SERVICE_ACCOUNT = ("kube-system", "dra-quota-scheduler")
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
    assert [(s["namespace"], s["name"]) for s in binding["subjects"]] == [SERVICE_ACCOUNT]


def check_least_privilege(docs: list[Doc]) -> None:
    """Reads only; the one write of the base is kube-scheduler's own lease, by name."""
    for role, rule in rules(docs, "Role", "ClusterRole"):
        if set(rule["verbs"]) <= READ_VERBS:
            continue
        assert role == "dra-quota-scheduler:leader-election", f"{role} writes: {rule}"
        assert rule["resources"] == ["leases"] and rule["resourceNames"] == ["dra-quota-scheduler"]
        assert set(rule["verbs"]) == {"get", "update"}
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
        ("ClusterRoleBinding", EXTENDER_ROLE),
    } <= bound
    sa = one(docs, "ServiceAccount", SERVICE_ACCOUNT[1])
    assert sa["metadata"]["namespace"] == SERVICE_ACCOUNT[0]
    assert pod_spec(docs)["serviceAccountName"] == SERVICE_ACCOUNT[1]


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
    check_extender_role,
    check_least_privilege,
    check_scheduler_roles,
    check_hardened_pod,
    check_extender_sidecar,
    check_metrics_service,
)


# --- the raw files ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda check: check.__name__)
def test_base_manifests(check: Any) -> None:
    check(base_docs())


def test_kustomization_generates_the_configmaps_from_the_shared_config_files() -> None:
    k = kustomization(MANIFESTS)
    generators = {g["name"]: g["files"] for g in k["configMapGenerator"]}
    assert generators == {
        "dra-extender-config": ["config/extender.yaml"],
        "dra-quota-scheduler-config": ["config/kube-scheduler-config.yaml"],
    }
    for name in ("extender.yaml", "kube-scheduler-config.yaml"):
        copy = (MANIFESTS / "config" / name).read_text(encoding="utf-8")
        assert copy == (MANIFESTS.parent / "config" / name).read_text(encoding="utf-8"), (
            f"config/{name} changed: run manifests/sync-configs.sh to refresh manifests/config/"
        )
    images = {i["name"]: i for i in k["images"]}
    assert images["dra-quota-extender"]["newName"] == "dra-quota-extender"
    assert re.fullmatch(r"v1\.(3[4-9]|[4-9]\d)\.\d+", images["registry.k8s.io/kube-scheduler"]["newTag"])
    assert k["namespace"] == "kube-system"
    for name in k["resources"]:
        assert (MANIFESTS / name).is_file(), name


def test_every_manifest_matches_the_kubernetes_schema() -> None:
    """Unknown or misspelt fields would be dropped by the API server's decoder, silently: catch them here."""
    import kubernetes.client as models

    docs = [*base_docs(), *resources_of(BIND), *resources_of(RESTRICT)]
    for doc in docs:
        model = getattr(models, f"V1{doc['kind']}")
        if not hasattr(model, "model_dump"):
            pytest.skip("this kubernetes client predates pydantic models")
        echoed = model.from_dict(doc).model_dump(by_alias=True, exclude_none=True, mode="json")
        assert _differences(doc, echoed) == [], f"{doc['kind']} {doc['metadata']['name']}"


def _differences(sent: Any, echoed: Any, path: str = "") -> list[str]:
    if isinstance(sent, Mapping) and isinstance(echoed, Mapping):
        out = [f"{path}.{key}: unknown field" for key in sent if key not in echoed]
        return out + [d for key in sent if key in echoed for d in _differences(sent[key], echoed[key], f"{path}.{key}")]
    if isinstance(sent, list) and isinstance(echoed, list) and len(sent) == len(echoed):
        return [
            d for i, (a, b) in enumerate(zip(sent, echoed, strict=True)) for d in _differences(a, b, f"{path}[{i}]")
        ]
    return [] if sent == echoed else [f"{path}: {sent!r} became {echoed!r}"]


def test_bind_component_is_the_only_grant_of_pods_binding() -> None:
    component = kustomization(BIND)
    assert component["kind"] == "Component"
    docs = resources_of(BIND)
    granted = [(role, rule) for role, rule in rules(docs, "ClusterRole", "Role")]
    assert [(rule["apiGroups"], rule["resources"], rule["verbs"]) for _, rule in granted] == [
        ([""], ["pods/binding"], ["create"])
    ]
    binding = one(docs, "ClusterRoleBinding")
    assert [(s["namespace"], s["name"]) for s in binding["subjects"]] == [SERVICE_ACCOUNT]
    replaced = {g["name"]: (g["behavior"], g["files"]) for g in component["configMapGenerator"]}
    assert replaced == {
        "dra-extender-config": ("replace", ["extender.yaml"]),
        "dra-quota-scheduler-config": ("replace", ["kube-scheduler-config.yaml"]),
    }


def test_bind_component_configs_differ_from_config_only_in_the_bind_switch() -> None:
    shared_extender, shared_scheduler = config("extender.yaml"), config("kube-scheduler-config.yaml")
    if shared_extender is None or shared_scheduler is None:
        pytest.skip("config/ files not present")
    bind_extender = yaml.safe_load((BIND / "extender.yaml").read_text(encoding="utf-8"))
    bind_scheduler = yaml.safe_load((BIND / "kube-scheduler-config.yaml").read_text(encoding="utf-8"))
    hint = "config/*.yaml changed: run manifests/components/bind/sync-configs.sh to refresh the bind component's copies"
    assert bind_extender["bind"]["enabled"] is True
    assert shared_extender["bind"].get("enabled", False) is False
    assert {**bind_extender, "bind": shared_extender["bind"]} == shared_extender, hint
    assert [e.pop("bindVerb") for e in bind_scheduler["extenders"]] == ["bind"]
    assert bind_scheduler == shared_scheduler, hint


def test_configs_agree_with_the_deployment() -> None:
    extender_config, scheduler_config = config("extender.yaml"), config("kube-scheduler-config.yaml")
    if extender_config is None or scheduler_config is None:
        pytest.skip("config/ files not present")
    election = scheduler_config["leaderElection"]
    assert election["leaderElect"] is True
    lease_role = one(base_docs(), "Role", "dra-quota-scheduler:leader-election")
    assert lease_role["metadata"]["namespace"] == election["resourceNamespace"]
    assert lease_role["rules"][0]["resourceNames"] == [election["resourceName"]]
    assert [p["schedulerName"] for p in scheduler_config["profiles"]] == ["dra-quota-scheduler"]
    assert [e["urlPrefix"] for e in scheduler_config["extenders"]] == ["http://127.0.0.1:8888"]
    kueue_configmap = extender_config.get("quota", {}).get("kueueConfigMap", {})
    assert kueue_configmap.get("name", DEFAULT_KUEUE_CONFIGMAP[1]) == DEFAULT_KUEUE_CONFIGMAP[1]


def test_restrict_ingress_component_admits_only_labelled_namespaces() -> None:
    assert kustomization(RESTRICT)["kind"] == "Component"
    policy = one(resources_of(RESTRICT), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [9090, 10259]
    assert set(rule["from"][0]) == {"namespaceSelector"}


def test_readme_documents_the_build_and_the_extenders_stanza() -> None:
    readme = (MANIFESTS / "README.md").read_text(encoding="utf-8")
    assert "kubectl apply -k manifests/" in readme
    assert "extenders:" in readme and "urlPrefix: http://127.0.0.1:8888" in readme


# --- kubectl's kustomize, when available -----------------------------------------------------------------------

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def kustomize_build(directory: Path) -> list[Doc]:
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@needs_kubectl
def test_kubectl_builds_the_base_with_every_check_passing() -> None:
    if config("extender.yaml") is None:
        pytest.skip("config/ files not present")
    docs = kustomize_build(MANIFESTS)
    for check in ALL_CHECKS:
        check(docs)
    spec = pod_spec(docs)
    generated = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    for volume in spec["volumes"]:
        if "configMap" in volume:
            assert volume["configMap"]["name"] in generated, "hashed name wired into the Deployment"
    by_prefix = {name.rsplit("-", 1)[0]: cm for name, cm in generated.items()}
    assert set(by_prefix["dra-extender-config"]["data"]) == {"extender.yaml"}
    assert set(by_prefix["dra-quota-scheduler-config"]["data"]) == {"kube-scheduler-config.yaml"}
    assert all(d["metadata"].get("namespace", "kube-system") == "kube-system" for d in docs)
    assert not any(d["kind"] == "NetworkPolicy" for d in docs)


@needs_kubectl
def test_kubectl_builds_with_the_optional_components(tmp_path: Path) -> None:
    if config("extender.yaml") is None:
        pytest.skip("config/ files not present")
    shutil.copytree(MANIFESTS, tmp_path / "manifests")
    shutil.copytree(CONFIG, tmp_path / "config")
    with (tmp_path / "manifests" / "kustomization.yaml").open("a", encoding="utf-8") as file:
        file.write("components:\n- components/bind\n- components/restrict-ingress\n")
    docs = kustomize_build(tmp_path / "manifests")
    check_extender_role(docs)
    check_hardened_pod(docs)
    check_extender_sidecar(docs)
    bind_rules = [rule for role, rule in rules(docs, "ClusterRole") if "pods/binding" in rule["resources"]]
    assert bind_rules == [{"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}]
    configmaps = {d["metadata"]["name"].rsplit("-", 1)[0]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    assert yaml.safe_load(configmaps["dra-extender-config"]["extender.yaml"])["bind"]["enabled"] is True
    scheduler = yaml.safe_load(configmaps["dra-quota-scheduler-config"]["kube-scheduler-config.yaml"])
    assert [e.get("bindVerb") for e in scheduler["extenders"]] == ["bind"]
    assert one(docs, "NetworkPolicy")["metadata"]["namespace"] == "kube-system"
