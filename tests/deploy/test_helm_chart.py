"""The Helm chart (manifests/helm/dra-quota-scheduler): lint, and equality with the kustomize deployment.

helm and kustomize are built from Go modules (testkit/builds/tools.py: helm v4.3.2, kustomize v5.8.1 = the kustomize of
kubectl v1.37.2) into tools/.build/. The kustomize side is rendered by that real kustomize, never re-implemented
here, so "the chart renders the same objects" means the same as `kubectl kustomize manifests/` of kubectl 1.37.
Default values must render exactly the kustomize base (names, hashed ConfigMap names and config text
included); values turning on the bind verb and the NetworkPolicy must render what the two kustomize components
add. Server-side dry-run against a real kube-apiserver is in tests/kube/test_live_apiserver.py.

Without Go (and no tools built) these tests skip; with CI=true they fail instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.service import load_config
from testkit.builds import tools as tools_build
from tests.deploy.test_values_schema import CONFIG_CASES
from tests.support.manifest_checks import (
    ALL_CHECKS,
    check_extender_sidecar,
    check_hardened_pod,
    check_least_privilege,
    one,
)
from tests.support.paths import ROOT

pytestmark = pytest.mark.helm

MANIFESTS = ROOT / "manifests"
CHART = MANIFESTS / "helm" / "dra-quota-scheduler"
IN_CI = os.environ.get("CI", "").lower() == "true"

Doc = dict[str, Any]
Key = tuple[str, str, str | None, str]


@pytest.fixture(scope="session")
def tools() -> dict[str, Path]:
    paths = tools_build.binaries()
    if not all(os.access(p, os.X_OK) for p in paths.values()):
        try:
            tools_build.find_go()
        except tools_build.BuildError as error:
            if IN_CI:
                pytest.fail(f"{error} (CI=true: a missing prerequisite is a failure)", pytrace=False)
            pytest.skip(str(error))
    try:
        return tools_build.ensure_tools()
    except tools_build.BuildError as error:
        pytest.fail(f"building helm/kustomize failed: {error}", pytrace=False)


def run(cmd: list[str | Path], timeout: float = 120) -> str:
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"{' '.join(map(str, cmd))}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def docs_of(text: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all(text) if d]


def helm_template(tools: dict[str, Path], *values: str, namespace: str = "kube-system") -> list[Doc]:
    args: list[str | Path] = [tools["helm"], "template", "dra-quota-scheduler", CHART, "--namespace", namespace]
    for value in values:
        args += ["--set", value]
    return docs_of(run(args))


def kustomize_build(tools: dict[str, Path], directory: Path) -> list[Doc]:
    return docs_of(run([tools["kustomize"], "build", directory]))


def by_key(docs: Iterable[Doc]) -> dict[Key, Doc]:
    out: dict[Key, Doc] = {}
    for doc in docs:
        meta = doc["metadata"]
        key = (doc["apiVersion"], doc["kind"], meta.get("namespace"), meta["name"])
        assert key not in out, f"rendered twice: {key}"
        out[key] = doc
    return out


def with_components(tmp_path: Path, *components: str) -> Path:
    """A copy of manifests/ whose kustomization enables the given components."""
    shutil.copytree(MANIFESTS, tmp_path / "manifests", ignore=shutil.ignore_patterns("helm"))
    with (tmp_path / "manifests" / "kustomization.yaml").open("a", encoding="utf-8") as file:
        file.write("components:\n" + "".join(f"- components/{c}\n" for c in components))
    return tmp_path / "manifests"


_HASH = re.compile(r"-[a-z0-9]{10}$")


def unhashed(docs: list[Doc]) -> list[Doc]:
    """ConfigMaps with their generated suffix removed and their config text parsed, for comparing renders whose
    config files are equal as YAML but not as text (the chart writes a changed config as YAML without comments)."""
    out = []
    for doc in yaml.safe_load(yaml.safe_dump(docs)):
        if doc["kind"] == "ConfigMap":
            doc["metadata"]["name"] = _HASH.sub("", doc["metadata"]["name"])
            doc["data"] = {k: yaml.safe_load(v) for k, v in doc["data"].items()}
        if doc["kind"] == "Deployment":
            for volume in doc["spec"]["template"]["spec"]["volumes"]:
                if "configMap" in volume:
                    volume["configMap"]["name"] = _HASH.sub("", volume["configMap"]["name"])
        out.append(doc)
    return out


def config_of(docs: list[Doc], prefix: str, key: str) -> Doc:
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith(prefix + "-")]
    return yaml.safe_load(configmap["data"][key])


# --- tests ---------------------------------------------------------------------------------------------------


def test_helm_lint_strict(tools: dict[str, Path]) -> None:
    out = run([tools["helm"], "lint", "--strict", CHART])
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    for values in (["bind.enabled=true", "networkPolicy.enabled=true"], ["tls.enabled=true", "tls.secretName=x"]):
        run([tools["helm"], "lint", "--strict", CHART, *(a for v in values for a in ("--set", v))])


def helm_refusal(tools: dict[str, Path], tmp_path: Path, command: str, values: Doc) -> str | None:
    """helm `command` (lint or template) of the chart with `values` from a file: None when accepted, else its
    output saying why."""
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    args = [tools["helm"], command, *(["--strict"] if command == "lint" else ["x"]), CHART, "-f", path]
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=60, check=False)
    return None if result.returncode == 0 else result.stdout + result.stderr


@pytest.mark.parametrize(("name", "config", "refused"), CONFIG_CASES, ids=[case[0] for case in CONFIG_CASES])
def test_helm_lint_refuses_an_extender_config_the_extender_would(
    tools: dict[str, Path], tmp_path: Path, name: str, config: Doc, refused: bool
) -> None:
    """tests/deploy/test_values_schema.py checks the extender refuses exactly the cases marked refused."""
    refusal = helm_refusal(tools, tmp_path, "lint", {"extender": {"config": config}})
    assert (refusal is not None) is refused, refusal
    if refused:
        assert refusal is not None and "extender.config" in refusal.replace("/extender/config", "extender.config")


def test_helm_template_refuses_the_bogus_strategy_and_unknown_values(tools: dict[str, Path], tmp_path: Path) -> None:
    refusal = helm_refusal(tools, tmp_path, "template", {"extender": {"config": {"scoring": {"strategy": "Bogus"}}}})
    assert refusal is not None and "/extender/config/scoring/strategy" in refusal and "MostAllocated" in refusal
    assert helm_refusal(tools, tmp_path, "template", {"replica": 3}) is not None
    assert helm_refusal(tools, tmp_path, "template", {"scheduler": {"image": {"tags": "v1.37.2"}}}) is not None


def test_an_empty_image_tag_is_refused_by_path(tools: dict[str, Path]) -> None:
    """`--set image.tag=` would render `image: dra-quota-extender:`; the schema names the value instead."""
    for value in ("image.tag=", "image.repository=", "scheduler.image.tag="):
        result = subprocess.run(
            [str(tools["helm"]), "template", "x", str(CHART), "--set", value],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        path = "/" + value.removesuffix("=").replace(".", "/")
        assert result.returncode != 0 and path in result.stderr, (value, result.stderr)
        assert "minLength" in result.stderr or "length must be >= 1" in result.stderr, result.stderr


def test_the_values_schema_checks_the_monitoring_block(tools: dict[str, Path], tmp_path: Path) -> None:
    good = {"monitoring": {"serviceMonitor": {"enabled": True, "labels": {"release": "x"}, "interval": "1m30s"}}}
    assert helm_refusal(tools, tmp_path, "lint", good) is None
    for bad in (
        {"monitoring": {"anything": [1]}},
        {"monitoring": {"alerts": {"notReadyFor": "5 minutes"}}},
        {"monitoring": {"alerts": {"verbErrorRatio": -1}}},
        {"monitoring": {"prometheusRule": {"enabled": "yes"}}},
    ):
        assert helm_refusal(tools, tmp_path, "lint", bad) is not None, bad


def test_tools_are_the_pinned_versions(tools: dict[str, Path]) -> None:
    assert "v4.3.2" in run([tools["helm"], "version", "--short"])
    assert run([tools["kustomize"], "version"]).strip() == "v5.8.1"


def test_default_values_render_exactly_the_kustomize_base(tools: dict[str, Path]) -> None:
    chart, base = by_key(helm_template(tools)), by_key(kustomize_build(tools, MANIFESTS))
    assert sorted(chart) == sorted(base)
    for key, doc in base.items():
        assert chart[key] == doc, key  # including the hashed ConfigMap names and the config files' text


def test_bind_and_network_policy_render_what_the_kustomize_components_add(tools: dict[str, Path], tmp_path: Path):
    chart = helm_template(tools, "bind.enabled=true", "networkPolicy.enabled=true")
    kustomized = kustomize_build(tools, with_components(tmp_path, "bind", "restrict-ingress"))
    assert by_key(unhashed(chart)) == by_key(unhashed(kustomized))
    # and the config the extender will load is valid, with the bind verb on
    extender = config_of(chart, "dra-extender-config", "extender.yaml")
    path = tmp_path / "extender.yaml"
    path.write_text(yaml.safe_dump(extender), encoding="utf-8")
    assert load_config(str(path)).bind.enabled is True


def test_every_deployment_check_holds_for_the_chart(tools: dict[str, Path]) -> None:
    for check in ALL_CHECKS:
        check(helm_template(tools))
    # everything on: the same checks but least privilege (the bind verb adds the extender's one write)
    docs = helm_template(
        tools, "bind.enabled=true", "tls.enabled=true", "tls.secretName=s", "networkPolicy.enabled=true"
    )
    for check in ALL_CHECKS:
        if check is not check_least_privilege:
            check(docs)


def test_tls_values_wire_both_sides(tools: dict[str, Path], tmp_path: Path) -> None:
    docs = helm_template(tools, "tls.enabled=true", "tls.secretName=extender-tls", "tls.clientAuth=true")
    extender = config_of(docs, "dra-extender-config", "extender.yaml")
    tls_dir = "/etc/dra-quota-scheduler-tls"
    assert extender["tls"] == {
        "certFile": f"{tls_dir}/tls.crt",
        "keyFile": f"{tls_dir}/tls.key",
        "clientCAFile": f"{tls_dir}/ca.crt",
    }
    # the extender accepts it (it checks the files exist: stand-ins where the Secret would be mounted)
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / name).write_text("", encoding="utf-8")
    local = {key: value.replace(tls_dir, str(tmp_path)) for key, value in extender["tls"].items()}
    path = tmp_path / "extender.yaml"
    path.write_text(yaml.safe_dump({**extender, "tls": local}), encoding="utf-8")
    loaded = load_config(str(path))
    assert (loaded.tls.cert_file, loaded.tls.client_ca_file) == (local["certFile"], local["clientCAFile"])
    (entry,) = config_of(docs, "dra-quota-scheduler-config", "kube-scheduler-config.yaml")["extenders"]
    assert entry["urlPrefix"] == "https://127.0.0.1:8888" and entry["enableHTTPS"] is True
    assert entry["tlsConfig"] == {
        "caFile": f"{tls_dir}/ca.crt",
        "certFile": f"{tls_dir}/client.crt",
        "keyFile": f"{tls_dir}/client.key",
    }
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "tls", "secret": {"secretName": "extender-tls"}} in spec["volumes"]
    for container in [*spec["initContainers"], *spec["containers"]]:
        assert {"name": "tls", "mountPath": tls_dir, "readOnly": True} in container["volumeMounts"], container["name"]
    check_hardened_pod(docs)
    check_extender_sidecar(docs)


def test_tls_without_a_secret_is_refused(tools: dict[str, Path]) -> None:
    result = subprocess.run(
        [str(tools["helm"]), "template", "x", str(CHART), "--set", "tls.enabled=true"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0 and "tls.enabled needs tls.secretName" in result.stderr


def test_values_reach_the_objects(tools: dict[str, Path], tmp_path: Path) -> None:
    docs = helm_template(
        tools,
        "replicas=3",
        "image.repository=registry.example/dra-quota-extender",
        "image.tag=v9",
        "scheduler.image.tag=v1.37.2",
        "extender.resources.limits.memory=4Gi",
        "extender.config.scoring.strategy=LeastAllocated",
        "extender.config.quota.kueueConfigMap.name=my-kueue-config",
        "scheduler.config.percentageOfNodesToScore=100",
        namespace="dra-system",
    )
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    spec = deployment["spec"]["template"]["spec"]
    (extender,) = spec["initContainers"]
    assert extender["image"] == "registry.example/dra-quota-extender:v9"
    assert extender["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert spec["containers"][0]["image"] == "registry.k8s.io/kube-scheduler:v1.37.2"
    config = config_of(docs, "dra-extender-config", "extender.yaml")
    assert config["scoring"]["strategy"] == "LeastAllocated" and config["scoring"]["weights"]["deviceFit"] == 2
    path = tmp_path / "extender.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert load_config(str(path)).kueue_config.name == "my-kueue-config"
    # the read role follows the Kueue ConfigMap's name; the release namespace is used everywhere but for the
    # RoleBinding to kube-system's extension-apiserver-authentication-reader Role
    role = one(docs, "ClusterRole", "dra-quota-extender:read")
    assert [r["resourceNames"] for r in role["rules"] if "resourceNames" in r] == [["my-kueue-config"]]
    namespaces = {d["metadata"].get("namespace") for d in docs if d["kind"] != "RoleBinding"}
    assert namespaces <= {None, "dra-system"}
    bindings = {d["metadata"]["name"]: d for d in docs if d["kind"] == "RoleBinding"}
    assert bindings["dra-quota-scheduler:extension-apiserver-authentication-reader"]["metadata"]["namespace"] == (
        "kube-system"
    )
    assert bindings["dra-quota-scheduler:leader-election"]["metadata"]["namespace"] == "dra-system"
    scheduler = config_of(docs, "dra-quota-scheduler-config", "kube-scheduler-config.yaml")
    assert scheduler["leaderElection"]["resourceNamespace"] == "dra-system"
    for doc in docs:
        for subject in doc.get("subjects", []):
            assert subject["namespace"] == "dra-system"


def test_a_config_change_renames_its_configmap(tools: dict[str, Path]) -> None:
    """The hash suffix follows the content, so pods roll when the config changes (as with kustomize)."""
    default = {d["metadata"]["name"] for d in helm_template(tools) if d["kind"] == "ConfigMap"}
    changed = {
        d["metadata"]["name"]
        for d in helm_template(tools, "extender.config.reservations.ttlSeconds=30")
        if d["kind"] == "ConfigMap"
    }
    assert len(default - changed) == 1 and len(changed - default) == 1
    assert next(iter(changed - default)).startswith("dra-extender-config-")


def test_chart_config_files_are_copies_of_config() -> None:
    for name in ("extender.yaml", "kube-scheduler-config.yaml"):
        assert (CHART / "files" / name).read_text(encoding="utf-8") == (ROOT / "config" / name).read_text(
            encoding="utf-8"
        ), f"config/{name} changed: run manifests/sync-configs.sh to refresh the chart's files/"


def test_chart_defaults_agree_with_the_kustomization_images() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text(encoding="utf-8"))
    images = {i["name"]: i for i in kustomization["images"]}
    assert values["scheduler"]["image"]["tag"] == images["registry.k8s.io/kube-scheduler"]["newTag"]
    assert values["image"]["repository"] == images["dra-quota-extender"]["newName"]


def test_the_readmes_helm_commands_run(tools: dict[str, Path]) -> None:
    """README.md's `helm lint` and `helm template` lines, as written, with helm where `make tools` puts it."""
    from tests.deploy.test_readme import block_with, commands, readme

    lines = commands(block_with(readme(), "$HELM lint"))
    helm_line = next(line for line in lines if line.startswith("HELM="))
    assert (ROOT / helm_line.removeprefix("HELM=")).resolve() == tools["helm"].resolve()
    for line in lines:
        if line.startswith(("$HELM lint", "$HELM template")):
            args = line.split()[1:]
            out = run([tools["helm"], *args], timeout=120)
            assert out
    rendered = docs_of(run([tools["helm"], *next(x for x in lines if x.startswith("$HELM template")).split()[1:]]))
    (extender,) = one(rendered, "Deployment")["spec"]["template"]["spec"]["initContainers"]
    assert extender["image"] == "registry.example.com/dra-quota-extender:v0.1.0"


def test_the_readmes_kustomize_image_line_sets_the_image(tools: dict[str, Path], tmp_path: Path) -> None:
    """README.md's `kustomize edit set image` line, run in a copy of the repository's manifests/ and tools/."""
    from tests.deploy.test_readme import block_with, commands, readme

    (line,) = [line for line in commands(block_with(readme(), "kubectl apply -k")) if "edit set image" in line]
    shutil.copytree(MANIFESTS, tmp_path / "manifests", ignore=shutil.ignore_patterns("helm"))
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / ".build").symlink_to(tools["kustomize"].parent.parent)
    result = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    deployment = one(kustomize_build(tools, tmp_path / "manifests"), "Deployment")
    (extender,) = deployment["spec"]["template"]["spec"]["initContainers"]
    assert extender["image"] == "registry.example.com/dra-quota-extender:v0.1.0"
