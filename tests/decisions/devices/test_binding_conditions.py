"""Binding conditions (DRADeviceBindingConditions, on by default since 1.36): devices that need a binding step
are parsed, and the allocator prefers pools without them, as upstream's incubating GatherPools orders pools
(pools_incubating.go: those with any device setting bindingConditions go after all others, each group by ID)."""

from __future__ import annotations

from typing import Any

from extender.decisions.devices.results import Allocation
from extender.state.dra.devices import parse_resource_slice
from testkit import builders as b
from testkit.scenarios import RESOURCE, gpu_pod
from tests.support.allocation import cluster, decide, template_pod
from tests.support.quota import base_objects, filter_pod
from tests.support.scenarios import engine_for


def bound_device(index: int) -> dict[str, Any]:
    device = b.gpu_device(index)
    device["bindingConditions"] = ["dra.example.com/attached"]
    device["bindingFailureConditions"] = ["dra.example.com/attach-failed"]
    device["bindsToNode"] = True
    return device


def test_binding_fields_are_parsed():
    parsed = parse_resource_slice(b.gpu_slice("n1", 0, devices=[bound_device(0), b.gpu_device(1)]))
    first, second = parsed.devices
    assert first.binding_conditions == ("dra.example.com/attached",)
    assert first.binding_failure_conditions == ("dra.example.com/attach-failed",)
    assert first.binds_to_node
    assert second.binding_conditions is None and not second.binds_to_node


def chosen_pools(requests: list[dict[str, Any]], *slices: dict[str, Any]) -> list[str]:
    template, pod = template_pod(requests)
    outcome = decide(cluster(b.node("n1"), *slices, b.device_class(), template), pod)["n1"]
    assert isinstance(outcome, Allocation), outcome
    return [chosen.device.pool for claim in outcome.claims for chosen in claim.devices]


def test_pools_without_binding_conditions_are_tried_first_on_both_allocator_paths():
    # "a" sorts first by name, but needs a binding step: the devices of "b" and "c" are taken first.
    slices = [
        b.gpu_slice("n1", 0, pool="a", name="a", devices=[bound_device(0)]),
        b.gpu_slice("n1", 0, pool="b", name="b", devices=[b.gpu_device(1)]),
        b.gpu_slice("n1", 0, pool="c", name="c", devices=[b.gpu_device(2)]),
    ]
    assert chosen_pools([b.exact_request("gpu", 2)], *slices) == ["b", "c"]  # the one-request shortcut
    assert chosen_pools([b.exact_request("x", 1), b.exact_request("y", 1)], *slices) == ["b", "c"]  # the search
    # Only when the others do not suffice.
    assert chosen_pools([b.exact_request("gpu", 3)], *slices) == ["b", "c", "a"]


def waiting_claim(*, allocated: bool) -> dict[str, Any]:
    """p1's claim as kube-scheduler leaves it while PreBind waits for the devices' binding conditions:
    allocated (results carry the conditions), reserved for p1, p1 not bound. After a binding failure
    condition the scheduler clears the allocation and the reservation."""
    obj = b.claim(
        "p1-gpu",
        "team-a",
        [b.exact_request("gpu", 2)],
        allocated=[("gpu", "on-demand-0", "gpu-0"), ("gpu", "on-demand-0", "gpu-1")] if allocated else None,
        allocated_node="on-demand-0" if allocated else None,
        reserved_for=[("p1", "uid-team-a-p1")] if allocated else None,
    )
    if allocated:
        for result in obj["status"]["allocation"]["devices"]["results"]:
            result["bindingConditions"] = ["dra.example.com/attached"]
            result["bindingFailureConditions"] = ["dra.example.com/attach-failed"]
        obj["status"]["devices"] = [
            {
                "driver": b.DRIVER,
                "pool": "on-demand-0",
                "device": device,
                "conditions": [{"type": "dra.example.com/attached", "status": "False", "reason": "Attaching"}],
            }
            for device in ("gpu-0", "gpu-1")
        ]
    return obj


def test_a_claim_waiting_for_binding_conditions_holds_its_devices_and_quota_until_a_failure_clears_it():
    objects = base_objects({"on-demand": {"nominal": 4}}, od_nodes=1, spot_nodes=0, gpus=4)
    waiting_pod = b.pod("p1", "team-a", templates={"gpu": "two"}, queue="q", claim_statuses={"gpu": "p1-gpu"})
    engine = engine_for([*objects, waiting_pod, waiting_claim(allocated=True)])
    assert engine.quota_view().usage == {("team-a", "on-demand", RESOURCE): 2}
    # Two of the node's four devices are held: a pod wanting all four does not fit, one wanting two does.
    assert not filter_pod(engine, gpu_pod("p2", template="four")).passed
    assert filter_pod(engine, gpu_pod("p3", template="two")).passed
    # The driver reports a binding failure; kube-scheduler clears the allocation: devices and quota are free.
    engine.reservations.release("uid-team-a-p3")
    engine.store.apply("ResourceClaim", "MODIFIED", waiting_claim(allocated=False))
    assert engine.quota_view().usage == {}
    assert filter_pod(engine, gpu_pod("p2", template="four")).passed
