"""Strict decoding of the objects a person hands us (explain's file, the web view's what-if form, the plugin's -f):
unknown fields are refused with their JSON path, in kube-apiserver's words (sigs.k8s.io/json UnmarshalStrict,
apimachinery's strictDecodingError); objects from kube-scheduler and the API server stay lenient."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from extender import cli, kubectl_plugin
from extender.commands.outcomes import EXIT_INPUT
from extender.kube.strict_objects import (
    AliasRefusedError,
    DuplicateFieldError,
    StrictDecodingError,
    check,
    load_documents,
    unknown_fields,
)
from extender.transport.app import create_app
from tests.support.paths import ROOT
from tests.support.requirements import missing_requirement
from tests.support.web import demo_service

DEMO = ROOT / "extender" / "demo" / "cluster.yaml"
DEMO_POD = ROOT / "extender" / "demo" / "pod-two-gpus.yaml"
EXAMPLES = ROOT.parent / "shared" / "examples" / "dra-example-driver"


def demo_pod() -> dict:
    return next(d for d in yaml.safe_load_all(DEMO_POD.read_text(encoding="utf-8")) if d and d["kind"] == "Pod")


def with_typo(pod: dict) -> dict:
    """The demo pod with `resourceClaims` spelled `resourceClaim`: kube-apiserver refuses it."""
    typo = copy.deepcopy(pod)
    typo["spec"]["resourceClaim"] = typo["spec"].pop("resourceClaims")
    return typo


def test_unknown_fields_are_named_by_their_path_as_kube_apiserver_names_them() -> None:
    pod = demo_pod()
    assert unknown_fields(pod) == []
    assert unknown_fields(with_typo(pod)) == ["spec.resourceClaim"]
    nested = copy.deepcopy(pod)
    nested["spec"]["containers"][0]["imagex"] = "x"
    nested["spec"]["containers"][0].setdefault("resources", {})["claims"] = [{"nam": "gpu"}]
    nested["metadata"]["labelz"] = {}
    with pytest.raises(StrictDecodingError) as refused:
        check(nested)
    assert str(refused.value) == (  # in the document's order, as the decoder meets them
        'strict decoding error: unknown field "metadata.labelz", '
        'unknown field "spec.containers[0].resources.claims[0].nam", unknown field "spec.containers[0].imagex"'
    )


def test_maps_and_free_form_fields_take_any_key() -> None:
    pod = demo_pod()
    pod["metadata"]["labels"] = {"any/key": "v"}
    pod["metadata"]["annotations"] = {"whatever": "v"}
    pod["spec"]["nodeSelector"] = {"x": "y"}
    pod["spec"]["containers"][0]["resources"] = {"limits": {"example.com/gpu": "1"}}
    assert unknown_fields(pod) == []
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {
            "devices": {
                "requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 1, "selectorz": []}}],
                "config": [{"opaque": {"driver": "d", "parameters": {"anything": {"goes": 1}}}}],
            }
        },
    }
    assert unknown_fields(claim) == ["spec.devices.requests[0].exactly.selectorz"]
    # kinds without a schema in the client (Kueue's CRDs) are decoded leniently
    assert unknown_fields({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "spec": {"x": 1}}) == []


def test_the_upstream_example_specs_decode_without_unknown_fields() -> None:
    """The DRA example driver's specs (pods, claims, templates, device classes) are valid for kube-apiserver:
    the schema source must accept every field they use."""
    if not EXAMPLES.is_dir():
        missing_requirement(f"{EXAMPLES} is missing (the shared test data)")
    checked = 0
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict):
                assert unknown_fields(document) == [], path
                checked += 1
    assert checked > 50


def test_explain_and_the_plugin_refuse_a_typo(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump(with_typo(demo_pod())), encoding="utf-8")
    expected = f'error: {typo}: Pod train-1: strict decoding error: unknown field "spec.resourceClaim"\n'
    assert cli.main(["explain", str(typo)]) == EXIT_INPUT
    assert capsys.readouterr() == ("", expected)
    assert kubectl_plugin.main(["--snapshot", str(DEMO), "explain", "-f", str(typo)]) == EXIT_INPUT
    assert capsys.readouterr() == ("", expected)


def test_the_what_if_form_refuses_a_typo() -> None:
    client = create_app(demo_service(), serve_scheduling=False).test_client()
    response = client.post("/ui/explain", data={"pod": yaml.safe_dump(with_typo(demo_pod()))})
    assert response.status_code == 400
    assert "unknown field &#34;spec.resourceClaim&#34;" in response.get_data(as_text=True)


def test_kube_schedulers_pods_stay_lenient() -> None:
    """A pod kube-scheduler sends (from the API server, possibly newer than our client) is not checked."""
    service = demo_service()
    client = create_app(service).test_client()
    pod = demo_pod()
    pod["spec"]["aFieldOfANewerRelease"] = True
    response = client.post("/filter", json={"Pod": pod, "NodeNames": ["gpu-od-1"]})
    assert response.status_code == 200, response.get_data(as_text=True)


def test_a_field_given_twice_is_refused_with_its_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """PyYAML keeps the last of two equal keys silently; kube-apiserver refuses a duplicate field."""
    text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: team-a\n  name: q\nspec:\n  containers: []\n"
    assert load_documents("c:\n  <<: {b: 1, d: 3}\n  b: 2\n") == [{"c": {"b": 2, "d": 3}}]  # merge keys
    with pytest.raises(AliasRefusedError, match=r"alias \*x refused"):  # aliases are refused, merged or not
        load_documents("a: &x {b: 1}\nc:\n  <<: *x\n  b: 2\n")
    with pytest.raises(DuplicateFieldError):
        load_documents(text)
    twice = tmp_path / "twice.yaml"
    twice.write_text(text, encoding="utf-8")
    assert cli.main(["explain", str(twice)]) == EXIT_INPUT
    assert capsys.readouterr() == (
        "",
        f'error: {twice}: strict decoding error: line 6, column 3: duplicate field "name"\n',
    )
    client = create_app(demo_service(), serve_scheduling=False).test_client()
    response = client.post("/ui/explain", data={"pod": text})
    assert response.status_code == 400 and "duplicate field &#34;name&#34;" in response.get_data(as_text=True)
