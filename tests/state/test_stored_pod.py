"""The verbs take the pod from the extender's view when it holds the very version sent (state/core.py
pod_identity, SchedulingService.stored_pod, wire.parse_extender_args): the same decision, without parsing the
request's copy again; any other request is parsed as before, bad input still a 400."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

import extender.transport.wire as wire
from extender.state.core import Pod, parse_pod, pod_identity
from extender.transport.app import create_app
from extender.transport.wire import WireError, parse_extender_args
from testkit.scenarios import gpu_pod
from tests.support.quota import base_objects
from tests.support.scenarios import engine_for

NODES = ["on-demand-0", "on-demand-1", "spot-0"]


def _versioned(pod: dict[str, Any], version: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["resourceVersion"] = version
    return pod


def test_identity_needs_four_non_empty_strings() -> None:
    pod = _versioned(gpu_pod("p"), "7")
    assert pod_identity(pod) == ("team-a", "p", pod["metadata"]["uid"], "7")
    for field, value in (("resourceVersion", ""), ("uid", None), ("namespace", 3), ("name", ["p"])):
        broken = copy.deepcopy(pod)
        broken["metadata"][field] = value
        assert pod_identity(broken) is None, field
    without = copy.deepcopy(pod)
    del without["metadata"]["resourceVersion"]
    assert pod_identity(without) is None
    assert pod_identity({"metadata": "x"}) is None
    assert pod_identity({}) is None


def test_parse_takes_the_stored_copy_only_when_it_is_given_one(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[object] = []
    monkeypatch.setattr(wire, "parse_pod", lambda raw: parsed.append(raw) or parse_pod(raw))
    raw = _versioned(gpu_pod("p"), "7")
    held = parse_pod(raw)
    asked: list[tuple[str, str, str, str]] = []

    def stored(namespace: str, name: str, uid: str, version: str) -> Pod | None:
        asked.append((namespace, name, uid, version))
        return held if version == "7" else None

    args = parse_extender_args({"Pod": raw, "NodeNames": NODES}, max_nodes=10, stored=stored)
    assert args.pod is held and not parsed
    newer = _versioned(raw, "8")
    assert parse_extender_args({"Pod": newer, "NodeNames": NODES}, max_nodes=10, stored=stored).pod == parse_pod(newer)
    assert parsed == [newer]
    assert asked == [("team-a", "p", raw["metadata"]["uid"], "7"), ("team-a", "p", raw["metadata"]["uid"], "8")]
    # Without a version (or without `stored`) nothing is looked up; bad input is still refused by the parse.
    unversioned = gpu_pod("q")
    parse_extender_args({"Pod": unversioned, "NodeNames": NODES}, max_nodes=10, stored=stored)
    assert len(asked) == 2
    bad = _versioned(gpu_pod("r"), "9")
    bad["spec"]["resourceClaims"] = [{"name": "gpu"}]  # neither a claim nor a template named
    with pytest.raises(WireError, match="exactly one of resourceClaimName"):
        parse_extender_args({"Pod": bad, "NodeNames": NODES}, max_nodes=10, stored=stored)


def _objects(*pods: dict[str, Any]) -> list[dict[str, Any]]:
    return [*base_objects({"on-demand": {"nominal": 4}, "spot": {"nominal": 4}}, spot_nodes=1, gpus=4), *pods]


def test_the_verbs_decide_the_view_copy_at_that_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod the view holds at version 5: a filter sending version 5 is decided on the view's copy (not parsed),
    one sending version 6 on its own copy; both decisions are the ones a parse would give."""
    held = _versioned(gpu_pod("p"), "5")
    engine = engine_for(_objects(held))
    assert engine.stored_pod("team-a", "p", held["metadata"]["uid"], "5") is engine.snapshot().pods["team-a/p"]
    assert engine.stored_pod("team-a", "p", held["metadata"]["uid"], "6") is None
    assert engine.stored_pod("team-a", "p", "another-uid", "5") is None
    assert engine.stored_pod("team-a", "nobody", held["metadata"]["uid"], "5") is None
    decided: list[Pod] = []
    real_filter = engine.filter
    monkeypatch.setattr(engine, "filter", lambda pod, names: decided.append(pod) or real_filter(pod, names))
    parsed: list[object] = []
    monkeypatch.setattr(wire, "parse_pod", lambda raw: parsed.append(raw) or parse_pod(raw))
    client = create_app(engine).test_client()

    def filtered(pod: dict[str, Any]) -> dict[str, Any]:
        body = orjson.dumps({"Pod": pod, "NodeNames": NODES})
        return client.post("/filter", data=body, content_type="application/json").get_json()

    same = filtered(held)
    assert decided[-1] is engine.snapshot().pods["team-a/p"] and not parsed
    newer = _versioned(held, "6")
    assert filtered(newer) == same
    assert parsed == [newer] and decided[-1] is not engine.snapshot().pods["team-a/p"]
    assert decided[-1] == parse_pod(newer)
    # A request naming version 5 is about the pod the API server holds at 5: its own copy is not read.
    rewritten = copy.deepcopy(held)
    rewritten["spec"]["resourceClaims"] = []
    assert filtered(rewritten) == same


def test_a_version_that_changes_nothing_parsed_makes_no_new_snapshot_and_still_finds_the_view_copy() -> None:
    """kube-scheduler lifting a pod's scheduling gates, a kubelet writing its conditions or starting it, a
    finalizer on a claim: new resourceVersions, nothing the models parse. The store makes no new version (the
    view keeper and the next verb have nothing to catch up on), and a verb sending the pod at that newer version
    still gets the view's copy, until a real change of the pod (or its deletion) ends that."""
    held = _versioned(gpu_pod("p"), "5")
    held["spec"]["schedulingGates"] = [{"name": "example.com/gate"}]
    engine = engine_for(_objects(held))
    store, uid = engine.store, held["metadata"]["uid"]
    stored = engine.snapshot().pods["team-a/p"]
    version = store.version

    ungated = _versioned(held, "6")
    del ungated["spec"]["schedulingGates"]
    ungated["status"] = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    store.apply("Pod", "MODIFIED", ungated)
    assert store.version == version and engine.snapshot().pods["team-a/p"] is stored
    assert engine.stored_pod("team-a", "p", uid, "6") is stored
    assert engine.stored_pod("team-a", "p", uid, "5") is stored
    assert engine.stored_pod("team-a", "p", uid, "7") is None

    bound = _versioned(ungated, "7")
    bound["spec"]["nodeName"] = "on-demand-0"
    store.apply("Pod", "MODIFIED", bound)
    assert store.version == version + 1
    now = engine.snapshot().pods["team-a/p"]
    assert now.node_name == "on-demand-0" and now.resource_version == "7"
    assert engine.stored_pod("team-a", "p", uid, "7") is now
    assert engine.stored_pod("team-a", "p", uid, "6") is None  # stood for the unbound copy only
    # A snapshot taken before the real change never stands for a version after it.
    assert not store.pod_at_version(stored, "7") and not store.pod_at_version(stored, "8")
    written = _versioned(bound, "8")
    written["status"] = {"conditions": [{"type": "PodScheduled", "status": "True"}], "podIP": "10.0.0.7"}
    store.apply("Pod", "MODIFIED", written)
    assert store.version == version + 1 and engine.stored_pod("team-a", "p", uid, "8") is now
    assert not store.pod_at_version(stored, "8")
    running = _versioned(written, "9")
    running["status"]["phase"] = "Running"  # the kubelet started it: all the view reads of the phase is terminal
    store.apply("Pod", "MODIFIED", running)
    assert store.version == version + 1 and engine.stored_pod("team-a", "p", uid, "9") is now
    finished = _versioned(running, "10")
    finished["status"]["phase"] = "Succeeded"
    store.apply("Pod", "MODIFIED", finished)
    assert store.version == version + 2 and engine.snapshot().pods["team-a/p"].is_terminal
    assert engine.stored_pod("team-a", "p", uid, "9") is None
    store.apply("Pod", "MODIFIED", _versioned(finished, "11"))
    assert engine.stored_pod("team-a", "p", uid, "11") is engine.snapshot().pods["team-a/p"]
    store.apply("Pod", "DELETED", finished)
    assert engine.stored_pod("team-a", "p", uid, "11") is None
    store.apply("Pod", "ADDED", _versioned(bound, "12"))
    assert engine.stored_pod("team-a", "p", uid, "11") is None  # the alias went with the deleted pod


def test_a_claim_finalizer_makes_no_new_snapshot_an_allocation_does() -> None:
    engine = engine_for(_objects())
    store = engine.store
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "team-a", "uid": "c-uid", "resourceVersion": "10"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
    }
    store.apply("ResourceClaim", "ADDED", claim)
    version = store.version
    protected = copy.deepcopy(claim)
    protected["metadata"].update(resourceVersion="11", finalizers=["resource.kubernetes.io/delete-protection"])
    store.apply("ResourceClaim", "MODIFIED", protected)
    assert store.version == version
    assert engine.snapshot().claims["team-a/c"].resource_version == "10"
    allocated = copy.deepcopy(protected)
    allocated["metadata"]["resourceVersion"] = "12"
    allocated["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "on-demand-0", "device": "gpu-0"}]
            }
        }
    }
    store.apply("ResourceClaim", "MODIFIED", allocated)
    assert store.version == version + 1
    assert engine.snapshot().claims["team-a/c"].allocation is not None
