"""One Kubernetes release across the product: the kube-scheduler the deployment runs, the one the e2e suite runs,
and the release whose DRA feature-gate defaults the extender's `features:` section follows.

The e2e harness's pin (tests/e2e/harness/go.mod, k8s.io/kubernetes) is the one place that defines it;
manifests/sync-configs.sh writes it into the kustomize base, the Helm chart and manifests/README.md. The gate
defaults are compared with upstream's own table (pkg/features/kube_features.go of that release, read from the Go
module cache): a default the extender assumes must be the default kube-scheduler of that release has.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from extender.decisions.devices.features import GATES, LOCKED_GATES, UNIMPLEMENTED_ALPHA_GATES
from extender.service.config import FeaturesSection
from testkit.builds.go import build_env, locate_go
from testkit.builds.kubernetes import kubernetes_version
from tests.support.paths import ROOT
from tests.support.requirements import missing_requirement

MANIFESTS = ROOT / "manifests"
CHART = MANIFESTS / "helm" / "dra-quota-scheduler"
SYNC = "run manifests/sync-configs.sh to write the e2e harness's release everywhere"


@pytest.fixture(scope="module")
def release() -> str:
    return kubernetes_version()


def _minor(release: str) -> str:
    match = re.fullmatch(r"v(\d+\.\d+)\.\d+", release)
    assert match, release
    return match.group(1)


def _scheduler_images(docs: list[dict]) -> list[str]:
    return [
        container["image"]
        for doc in docs
        if doc and doc.get("kind") == "Deployment"
        for container in doc["spec"]["template"]["spec"]["containers"]
        if container["name"] == "kube-scheduler"
    ]


def test_kustomize_base_runs_the_pinned_kube_scheduler(release: str) -> None:
    deployment = list(yaml.safe_load_all((MANIFESTS / "deployment.yaml").read_text(encoding="utf-8")))
    assert _scheduler_images(deployment) == [f"registry.k8s.io/kube-scheduler:{release}"], SYNC
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text(encoding="utf-8"))
    tags = {image["name"]: image.get("newTag") for image in kustomization["images"]}
    assert tags["registry.k8s.io/kube-scheduler"] == release, SYNC


def test_chart_runs_the_pinned_kube_scheduler_and_requires_its_minor(release: str) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    image = values["scheduler"]["image"]
    assert (image["repository"], image["tag"]) == ("registry.k8s.io/kube-scheduler", release), SYNC
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    # kube-scheduler must not be newer than the API server (Kubernetes' version skew policy).
    assert chart["kubeVersion"] == f">={_minor(release)}.0-0", SYNC


def test_deployment_docs_name_the_pinned_release(release: str) -> None:
    text = (MANIFESTS / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"registry\.k8s\.io/kube-scheduler:(v[\d.]+)", text))
    assert named == {release}, SYNC
    assert f"Requirements: Kubernetes {_minor(release)} or newer" in text, SYNC
    for page in (ROOT / "README.md", ROOT / "docs" / "deploying.md"):
        text = page.read_text(encoding="utf-8")
        assert set(re.findall(r"kube-scheduler (v\d+\.\d+\.\d+)", text)) == {release}, (page, SYNC)
        assert set(re.findall(r"Kubernetes (\d+\.\d+) or newer", text)) == {_minor(release)}, (page, SYNC)


def test_features_defaults_name_the_pinned_release(release: str) -> None:
    assert FeaturesSection.__doc__ is not None and release in FeaturesSection.__doc__
    for config in (ROOT / "config" / "extender.yaml", CHART / "files" / "extender.yaml"):
        text = config.read_text(encoding="utf-8")
        assert f"Defaults: Kubernetes {_minor(release)}." in text, config


def _kube_features_go(release: str) -> str:
    go = locate_go()
    if go is None:
        missing_requirement("Go is not installed: it reads pkg/features/kube_features.go from the module cache")
    result = subprocess.run(
        [go, "mod", "download", "-json", f"k8s.io/kubernetes@{release}"],
        capture_output=True,
        text=True,
        timeout=600,
        env=build_env(),
        cwd=ROOT / "tests" / "e2e" / "harness",
        check=False,
    )
    directory = json.loads(result.stdout or "{}").get("Dir") if result.returncode == 0 else None
    if not directory:
        missing_requirement(f"k8s.io/kubernetes@{release} could not be downloaded: {result.stderr.strip()}")
    return (Path(directory) / "pkg" / "features" / "kube_features.go").read_text(encoding="utf-8")


_SPEC = re.compile(r'\{Version: version\.MustParse\("(\d+)\.(\d+)"\), Default: (true|false)[^}]*\}')


def upstream_defaults(source: str, minor: str) -> dict[str, tuple[bool, bool]]:
    """Gate -> (default, locked) at `minor`, from defaultVersionedKubernetesFeatureGates: the last versioned spec
    not newer than the release, as component-base's featuregate picks it."""
    wanted = tuple(int(part) for part in minor.split("."))
    table = source[source.index("defaultVersionedKubernetesFeatureGates") :]
    out: dict[str, tuple[bool, bool]] = {}
    for gate, body in re.findall(r"\n\t(\w+): \{\n(.*?)\n\t\},", table, flags=re.S):
        specs = [
            (int(major), int(minor_), default == "true", "LockToDefault: true" in spec.group(0))
            for spec in _SPEC.finditer(body)
            for major, minor_, default in [spec.groups()]
        ]
        current = [spec for spec in specs if (spec[0], spec[1]) <= wanted]
        if current:
            out.setdefault(gate, (current[-1][2], current[-1][3]))
    return out


def _our_defaults() -> dict[str, bool]:
    return {gate: on for gate, (_, on) in GATES.items()} | dict.fromkeys(UNIMPLEMENTED_ALPHA_GATES, False)


def test_feature_gate_defaults_are_those_of_the_pinned_release(release: str) -> None:
    defaults = upstream_defaults(_kube_features_go(release), _minor(release))
    ours = _our_defaults()
    assert {gate: defaults[gate][0] for gate in ours} == ours


def test_locked_gates_are_those_of_the_pinned_release(release: str) -> None:
    defaults = upstream_defaults(_kube_features_go(release), _minor(release))
    assert {gate for gate in _our_defaults() if defaults[gate][1]} == set(LOCKED_GATES)


def test_upstream_defaults_reads_the_versioned_table() -> None:
    source = """
var defaultVersionedKubernetesFeatureGates = map[featuregate.Feature]featuregate.VersionedSpecs{
	DRAX: {
		{Version: version.MustParse("1.34"), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.GA, LockToDefault: true},
	},
}
"""
    assert upstream_defaults(source, "1.35") == {"DRAX": (False, False)}
    assert upstream_defaults(source, "1.37") == {"DRAX": (True, True)}
    assert upstream_defaults(source, "1.33") == {}
