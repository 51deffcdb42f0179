"""Properties of the allocator on small random instances, checked against a brute-force search.

Every allocation found must use free, distinct, selectable, tolerated devices that satisfy the claims'
constraints; and the allocator must say "infeasible" exactly when no assignment of devices to request slots
exists (the brute force tries them all).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.decisions.devices.feasibility import device_outcomes
from extender.decisions.devices.pod_claims import resolve_pod_claims
from extender.decisions.devices.results import Allocation
from extender.decisions.devices.selection import DeviceMatcher
from extender.state.core import parse_pod
from extender.state.store import ClusterStore
from testkit import builders as b

SELECTORS = {
    "any": None,
    "a-is-1": "device.attributes['gpu.example.com'].a == 1",
    "big": "device.capacity['gpu.example.com'].memory.compareTo(quantity('40Gi')) > 0",
}
TAINT = {"key": "k", "value": "v", "effect": "NoSchedule"}


@st.composite
def instances(draw: st.DrawFn) -> dict[str, Any]:
    device_count = draw(st.integers(1, 6))
    devices = []
    for index in range(device_count):
        devices.append(
            {
                "a": draw(st.integers(0, 2)),
                "memory": draw(st.sampled_from(["24Gi", "80Gi"])),
                "allocated": draw(st.booleans()),
                "tainted": draw(st.integers(0, 5)) == 0,
                "index": index,
            }
        )
    requests = []
    for index in range(draw(st.integers(1, 3))):
        requests.append(
            {
                "name": f"r{index}",
                "count": draw(st.integers(1, 3)),
                "selector": draw(st.sampled_from(sorted(SELECTORS))),
                "tolerates": draw(st.booleans()),
            }
        )
    constraint = draw(st.sampled_from([None, "match", "distinct"]))
    return {"devices": devices, "requests": requests, "constraint": constraint}


def build(instance: dict[str, Any]) -> tuple[ClusterStore, dict[str, Any]]:
    store = ClusterStore()
    devices = []
    allocated = []
    for device in instance["devices"]:
        devices.append(
            b.gpu_device(
                device["index"],
                memory=device["memory"],
                extra_attributes={"a": {"int": device["a"]}},
                taints=[TAINT] if device["tainted"] else None,
            )
        )
        if device["allocated"]:
            allocated.append(("gpu", "n1", f"gpu-{device['index']}"))
    store.apply("Node", "ADDED", b.node("n1"))
    store.apply("ResourceSlice", "ADDED", b.gpu_slice("n1", 0, devices=devices))
    store.apply("DeviceClass", "ADDED", b.device_class())
    if allocated:
        store.apply(
            "ResourceClaim",
            "ADDED",
            b.claim("held", "ns", [b.exact_request("gpu", len(allocated))], allocated=allocated),
        )
    requests = []
    for request in instance["requests"]:
        selector = SELECTORS[request["selector"]]
        tolerations = [{"key": "k", "operator": "Exists"}] if request["tolerates"] else None
        requests.append(
            b.exact_request(
                request["name"], request["count"], selectors=[selector] if selector else None, tolerations=tolerations
            )
        )
    constraints = None
    if instance["constraint"] == "match":
        constraints = [{"matchAttribute": "gpu.example.com/a"}]
    elif instance["constraint"] == "distinct":
        constraints = [{"distinctAttribute": "gpu.example.com/a"}]
    store.apply("ResourceClaimTemplate", "ADDED", b.claim_template("t", "ns", requests, constraints))
    return store, b.pod("p", "ns", templates={"c": "t"})


def usable(device: dict[str, Any], request: dict[str, Any]) -> bool:
    if device["allocated"] or (device["tainted"] and not request["tolerates"]):
        return False
    if request["selector"] == "a-is-1":
        return device["a"] == 1
    if request["selector"] == "big":
        return device["memory"] == "80Gi"
    return True


def brute_force_feasible(instance: dict[str, Any]) -> bool:
    devices = instance["devices"]
    slots = [request for request in instance["requests"] for _ in range(request["count"])]
    for assignment in itertools.permutations(range(len(devices)), len(slots)):
        if not all(usable(devices[d], slot) for d, slot in zip(assignment, slots, strict=True)):
            continue
        values = [devices[d]["a"] for d in assignment]
        if instance["constraint"] == "match" and len(set(values)) > 1:
            continue
        if instance["constraint"] == "distinct" and len(set(values)) != len(values):
            continue
        return True
    return False


def check_allocation(instance: dict[str, Any], outcome: Allocation) -> None:
    by_name = {f"gpu-{d['index']}": d for d in instance["devices"]}
    requests = {r["name"]: r for r in instance["requests"]}
    picks = [(c.request, c.device.name) for claim in outcome.claims for c in claim.devices]
    assert len({name for _, name in picks}) == len(picks), "a device used twice"
    for request_name, device_name in picks:
        assert usable(by_name[device_name], requests[request_name]), (request_name, device_name)
    for name, request in requests.items():
        assert sum(1 for r, _ in picks if r == name) == request["count"]
    values = [by_name[name]["a"] for _, name in picks]
    if instance["constraint"] == "match":
        assert len(set(values)) == 1
    if instance["constraint"] == "distinct":
        assert len(set(values)) == len(values)


@pytest.mark.slow  # 300 generated instances, each checked against a brute-force search
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_allocator_agrees_with_brute_force(instance):
    store, pod_obj = build(instance)
    snapshot = store.snapshot()
    found = device_outcomes(snapshot, resolve_pod_claims(snapshot, parse_pod(pod_obj)), ["n1"], DeviceMatcher())
    outcome = found.by_node(["n1"])["n1"]
    expected = brute_force_feasible(instance)
    assert isinstance(outcome, Allocation) == expected, outcome
    if isinstance(outcome, Allocation):
        check_allocation(instance, outcome)
