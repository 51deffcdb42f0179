"""The kustomize deployment: least-privilege RBAC, hardened pods, probes, and agreement with the config files.

The structural checks parse the YAML directly and always run; they are what keeps the RBAC rules equal to the
collections the live source watches when either changes. Building with kubectl's kustomize, which also proves
that generated ConfigMap names are wired into the Deployment, runs when kubectl is on PATH.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.service import ExtenderConfig
from extender.state.live import DEFAULT_KUEUE_CONFIGMAP
from tests.support.manifest_checks import (
    ALL_CHECKS,
    BIND,
    CONFIG,
    EXTENDER_ACCOUNT,
    KUBECTL,
    MANIFESTS,
    REQUEUE_CLASS,
    RESTRICT,
    Doc,
    base_docs,
    check_extender_role,
    check_extender_sidecar,
    check_hardened_pod,
    config,
    kustomization,
    one,
    pod_spec,
    resources_of,
    rules,
)


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
    assert [(s["namespace"], s["name"]) for s in binding["subjects"]] == [EXTENDER_ACCOUNT], "the extender's own"
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
    # the extender binds pods of the profile it serves, and reads its leader's Lease
    assert extender_config["bind"]["schedulerNames"] == [p["schedulerName"] for p in scheduler_config["profiles"]]
    lease = f"{election['resourceNamespace']}/{election['resourceName']}"
    assert lease == ExtenderConfig().leader.lease
    assert one(base_docs(), "Role", "dra-quota-extender:lease")["rules"][0]["resourceNames"] == [
        election["resourceName"]
    ]
    assert [e["urlPrefix"] for e in scheduler_config["extenders"]] == ["http://127.0.0.1:8888"]
    kueue_configmap = extender_config.get("quota", {}).get("kueueConfigMap", {})
    assert kueue_configmap.get("name", DEFAULT_KUEUE_CONFIGMAP[1]) == DEFAULT_KUEUE_CONFIGMAP[1]
    # the class the config requeues through is the one the base ships and grants patch on
    assert extender_config["requeue"]["deviceClassName"] == REQUEUE_CLASS == ExtenderConfig().requeue.device_class_name


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
