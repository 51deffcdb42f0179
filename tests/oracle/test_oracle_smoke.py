"""Smoke tests: the Go oracle builds and the upstream allocator answers hand-checked scenarios.

Skipped when Go is missing, except in CI (CI=true), where a missing toolchain or a failed
build fails instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from testkit.builds.oracle import OracleBuildError, OracleUnavailableError, ensure_oracle_binary
from tests.oracle.oracle import run_scenarios

pytestmark = pytest.mark.oracle

DRIVER = "gpu.example.com"
CLASS = "gpu.example.com"

# The feature set of the brief: what the extender targets.
FEATURES = {
    "adminAccess": True,
    "prioritizedList": True,
    "partitionableDevices": True,
    "deviceTaints": True,
    "consumableCapacity": False,
    "deviceBindingAndStatus": False,
}


@pytest.fixture(scope="module")
def oracle_binary() -> Path:
    in_ci = os.environ.get("CI", "").lower() == "true"
    try:
        return ensure_oracle_binary()
    except OracleUnavailableError as exc:
        if in_ci:
            pytest.fail(f"CI=true and the oracle cannot be built: {exc}")
        pytest.skip(f"upstream-allocator oracle unavailable: {exc}")
    except OracleBuildError as exc:
        pytest.fail(f"building the upstream-allocator oracle failed: {exc}")


# ---- scenario builders -------------------------------------------------------------------------


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}


def gpu(name: str, memory_gi: int = 80, model: str = "LATEST-GPU-MODEL", index: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"model": {"string": model}, "index": {"int": index}},
        "capacity": {"memory": {"value": f"{memory_gi}Gi"}},
    }


def node_slice(node_name: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node_name,
            "devices": devices,
        },
    }


def device_class(name: str = CLASS) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }


def exactly(count: int | None = 1, mode: str | None = None, selectors: list[str] | None = None) -> dict:
    req: dict[str, Any] = {"deviceClassName": CLASS}
    if mode:
        req["allocationMode"] = mode
    if count is not None and mode != "All":
        req["count"] = count
    if selectors:
        req["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return req


def claim(
    name: str,
    requests: list[dict[str, Any]],
    constraints: list[dict[str, Any]] | None = None,
    namespace: str = "default",
    allocation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
        "spec": {"devices": {"requests": requests, "constraints": constraints or []}},
    }
    if allocation is not None:
        obj["status"] = {"allocation": allocation}
    return obj


def allocated(name: str, devices: list[tuple[str, str]]) -> dict[str, Any]:
    """A claim already holding (pool, device) pairs of the example driver."""
    results = [{"request": "gpu", "driver": DRIVER, "pool": pool, "device": dev} for pool, dev in devices]
    return claim(
        name,
        [{"name": "gpu", "exactly": exactly(len(devices))}],
        allocation={"devices": {"results": results}},
    )


def two_by_two(**devices_per_node: list[dict[str, Any]]) -> dict[str, Any]:
    """Nodes n1, n2 with two GPUs each (unless given)."""
    per_node = {
        "n1": devices_per_node.get("n1", [gpu("gpu-0", index=0), gpu("gpu-1", index=1)]),
        "n2": devices_per_node.get("n2", [gpu("gpu-0", index=0), gpu("gpu-1", index=1)]),
    }
    return {
        "features": dict(FEATURES),
        "nodes": [node(n) for n in per_node],
        "resourceSlices": [node_slice(n, devs) for n, devs in per_node.items()],
        "deviceClasses": [device_class()],
        "allocatedClaims": [],
        "claims": [],
        "nodeNames": list(per_node),
    }


def with_claims(scenario: dict[str, Any], *claims: dict[str, Any], name: str = "") -> dict[str, Any]:
    scenario["claims"] = list(claims)
    scenario["name"] = name
    return scenario


def devices_of(node_result: dict[str, Any]) -> list[str]:
    return [r["device"] for a in node_result["allocation"] for r in a["results"]]


def run_one(scenario: dict[str, Any]) -> dict[str, Any]:
    (result,) = run_scenarios([scenario])
    assert result["error"] == "", result
    return result["nodes"]


# ---- tests ----------------------------------------------------------------------------------------


def test_one_gpu_fits_on_both_nodes(oracle_binary):
    nodes = run_one(with_claims(two_by_two(), claim("c1", [{"name": "gpu", "exactly": exactly(1)}])))
    assert set(nodes) == {"n1", "n2"}
    for name, verdict in nodes.items():
        assert verdict["feasible"], verdict
        assert verdict["error"] == ""
        (alloc,) = verdict["allocation"]
        assert alloc["claim"] == "default/c1"
        (res,) = alloc["results"]
        assert res == {
            "request": "gpu",
            "driver": DRIVER,
            "pool": name,
            "device": "gpu-0",
            "adminAccess": False,
        }


def test_three_gpus_fit_nowhere(oracle_binary):
    nodes = run_one(with_claims(two_by_two(), claim("c1", [{"name": "gpu", "exactly": exactly(3)}])))
    for verdict in nodes.values():
        assert verdict == {"feasible": False, "allocation": [], "error": "", "reason": ""}


def test_all_mode_takes_every_gpu(oracle_binary):
    scenario = two_by_two(n2=[gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2")])
    nodes = run_one(with_claims(scenario, claim("c1", [{"name": "gpu", "exactly": exactly(mode="All")}])))
    assert devices_of(nodes["n1"]) == ["gpu-0", "gpu-1"]
    assert devices_of(nodes["n2"]) == ["gpu-0", "gpu-1", "gpu-2"]


def test_all_mode_with_one_gpu_taken_is_infeasible(oracle_binary):
    scenario = with_claims(two_by_two(), claim("c1", [{"name": "gpu", "exactly": exactly(mode="All")}]))
    scenario["allocatedClaims"] = [allocated("busy", [("n1", "gpu-0")])]
    nodes = run_one(scenario)
    assert not nodes["n1"]["feasible"]
    assert devices_of(nodes["n2"]) == ["gpu-0", "gpu-1"]


def test_first_available_picks_first_satisfiable_subrequest(oracle_binary):
    request = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "two", "deviceClassName": CLASS, "count": 2},
            {"name": "one", "deviceClassName": CLASS, "count": 1},
        ],
    }
    scenario = with_claims(two_by_two(), claim("c1", [request]))
    scenario["allocatedClaims"] = [allocated("busy", [("n1", "gpu-0")])]
    nodes = run_one(scenario)
    n1 = nodes["n1"]["allocation"][0]["results"]
    n2 = nodes["n2"]["allocation"][0]["results"]
    assert [(r["request"], r["device"]) for r in n1] == [("gpu/one", "gpu-1")]
    assert [(r["request"], r["device"]) for r in n2] == [("gpu/two", "gpu-0"), ("gpu/two", "gpu-1")]


def test_cel_capacity_selector(oracle_binary):
    scenario = two_by_two(
        n1=[gpu("gpu-0", memory_gi=16), gpu("gpu-1", memory_gi=80)],
        n2=[gpu("gpu-0", memory_gi=16), gpu("gpu-1", memory_gi=24)],
    )
    selector = f"device.capacity['{DRIVER}'].memory.compareTo(quantity('40Gi')) >= 0"
    nodes = run_one(with_claims(scenario, claim("c1", [{"name": "gpu", "exactly": exactly(1, selectors=[selector])}])))
    assert devices_of(nodes["n1"]) == ["gpu-1"]
    assert nodes["n2"] == {"feasible": False, "allocation": [], "error": "", "reason": ""}


def test_match_attribute_constraint(oracle_binary):
    scenario = two_by_two(
        n1=[gpu("gpu-0", model="A"), gpu("gpu-1", model="B")],
        n2=[gpu("gpu-0", model="B"), gpu("gpu-1", model="B")],
    )
    c = claim(
        "c1",
        [{"name": "a", "exactly": exactly(1)}, {"name": "b", "exactly": exactly(1)}],
        constraints=[{"requests": ["a", "b"], "matchAttribute": f"{DRIVER}/model"}],
    )
    nodes = run_one(with_claims(scenario, c))
    assert not nodes["n1"]["feasible"]
    assert nodes["n1"]["error"] == ""
    assert [(r["request"], r["device"]) for r in nodes["n2"]["allocation"][0]["results"]] == [
        ("a", "gpu-0"),
        ("b", "gpu-1"),
    ]


def test_already_allocated_device_is_excluded(oracle_binary):
    scenario = two_by_two()
    scenario["allocatedClaims"] = [allocated("busy", [("n1", "gpu-0")])]
    one = claim("one", [{"name": "gpu", "exactly": exactly(1)}])
    two = claim("two", [{"name": "gpu", "exactly": exactly(2)}])
    r_one, r_two = run_scenarios([with_claims(dict(scenario), one), with_claims(dict(scenario), two)])
    assert devices_of(r_one["nodes"]["n1"]) == ["gpu-1"]
    assert devices_of(r_one["nodes"]["n2"]) == ["gpu-0"]
    assert not r_two["nodes"]["n1"]["feasible"]
    assert devices_of(r_two["nodes"]["n2"]) == ["gpu-0", "gpu-1"]


def test_claims_of_one_pod_are_allocated_together(oracle_binary):
    c1 = claim("c1", [{"name": "gpu", "exactly": exactly(1)}])
    c2 = claim("c2", [{"name": "gpu", "exactly": exactly(1)}])
    scenario = with_claims(two_by_two(), c1, c2)
    scenario["allocatedClaims"] = [allocated("busy", [("n2", "gpu-1")])]
    nodes = run_one(scenario)
    assert [(a["claim"], devices_of({"allocation": [a]})) for a in nodes["n1"]["allocation"]] == [
        ("default/c1", ["gpu-0"]),
        ("default/c2", ["gpu-1"]),
    ]
    assert not nodes["n2"]["feasible"]


def test_cel_runtime_error_is_an_error(oracle_binary):
    selector = f"device.attributes['{DRIVER}'].noSuchAttribute == 'x'"
    nodes = run_one(
        with_claims(two_by_two(), claim("c1", [{"name": "gpu", "exactly": exactly(1, selectors=[selector])}]))
    )
    for verdict in nodes.values():
        assert not verdict["feasible"]
        assert "no such key" in verdict["error"], verdict


def test_missing_device_class_is_unschedulable_everywhere(oracle_binary):
    c = claim("c1", [{"name": "gpu", "exactly": {"deviceClassName": "nope", "count": 1}}])
    nodes = run_one(with_claims(two_by_two(), c))
    for verdict in nodes.values():
        assert not verdict["feasible"]
        assert verdict["error"] == ""
        assert "device class nope does not exist" in verdict["reason"]


def test_batch_keeps_order_and_reports_bad_input_per_scenario(oracle_binary):
    scenarios = []
    for count in range(5):
        scenarios.append(with_claims(two_by_two(), claim("c", [{"name": "gpu", "exactly": exactly(count + 1)}])))
    scenarios.append({"features": {"noSuchFeature": True}})
    results = run_scenarios(scenarios)
    assert [r["nodes"]["n1"]["feasible"] for r in results[:5]] == [True, True, False, False, False]
    assert "unknown feature" in results[5]["error"]
