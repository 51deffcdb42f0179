"""Binding conditions (DRADeviceBindingConditions, on by default since 1.36): devices that need a binding step
are parsed, and the allocator prefers pools without them, as upstream's incubating GatherPools orders pools
(pools_incubating.go: those with any device setting bindingConditions go after all others, each group by ID)."""

from __future__ import annotations

from typing import Any

from extender.decisions.allocator import Allocation
from extender.state.dra import parse_resource_slice
from tests import builders as b
from tests.test_allocator import cluster, decide, template_pod


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
