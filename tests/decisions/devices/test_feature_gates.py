"""The allocator with a DRA feature gate turned off behaves as upstream's experimental allocator with it off
(k8s.io/dynamic-resource-allocation@v0.37.2 structured/internal/experimental/allocator_experimental.go and
pools_experimental.go; the plugin's PreFilter for DRAPrioritizedList). Upstream's own table checks the same
per case (tests/upstream_table); these pin each gate on our objects, through both the shortcut and the search,
and that the memos never carry a verdict from one gate set to another."""

from __future__ import annotations

from dataclasses import replace

import pytest

from extender.decisions.devices.features import DEFAULT_FEATURES, Features
from extender.decisions.devices.results import CATEGORY_FEATURE_GATE, Allocation, NotAllocatable
from extender.decisions.devices.selection import DeviceMatcher
from testkit import builders as b
from tests.support.allocation import cluster, decide, template_pod

TAINT = [{"key": "broken", "value": "yes", "effect": "NoSchedule"}]


def _devices(outcome: object) -> list[str]:
    assert isinstance(outcome, Allocation), outcome
    return [chosen.device.name for claim in outcome.claims for chosen in claim.devices]


def _store(devices: list[dict], requests: list[dict], **slice_options: object):
    return cluster(
        b.node("n1"), b.gpu_slice("n1", devices=devices, **slice_options), b.device_class(), *template_pod(requests)
    )


def _pod(requests: list[dict]) -> dict:
    return template_pod(requests)[-1]


def test_defaults_are_kubernetes_1_37():
    assert (
        Features.from_enabled(
            [
                "DRAAdminAccess",
                "DRAConsumableCapacity",
                "DRADeviceBindingConditions+DRAResourceClaimDeviceStatus",
                "DRADeviceTaints",
                "DRAExtendedResource",
                "DRAFractionalCapacityRange",
                "DRAPartitionableDevices",
                "DRAPrioritizedList",
            ]
        )
        == DEFAULT_FEATURES
    )
    with pytest.raises(ValueError, match="DRAListTypeAttributes"):
        Features.from_enabled(["DRAListTypeAttributes"])


def test_prioritized_list_off_refuses_first_available_as_unschedulable():
    requests = [b.first_available_request("gpu", [b.subrequest("one", 1)])]
    store = _store([b.gpu_device(0, node_name="n1")], requests)
    assert _devices(decide(store, _pod(requests))["n1"]) == ["gpu-0"]
    outcome = decide(store, _pod(requests), features=replace(DEFAULT_FEATURES, prioritized_list=False))["n1"]
    assert isinstance(outcome, NotAllocatable)
    assert outcome.category == CATEGORY_FEATURE_GATE and outcome.unresolvable and not outcome.fatal
    assert "has subrequests, but the DRAPrioritizedList feature is disabled" in outcome.summary


def test_admin_access_off_is_an_allocator_error():
    requests = [b.exact_request(admin=True)]
    store = _store([b.gpu_device(0, node_name="n1")], requests)
    assert _devices(decide(store, _pod(requests))["n1"]) == ["gpu-0"]
    outcome = decide(store, _pod(requests), features=replace(DEFAULT_FEATURES, admin_access=False))["n1"]
    assert isinstance(outcome, NotAllocatable) and outcome.fatal
    assert "admin access is requested, but the feature is disabled" in outcome.summary


def test_consumable_capacity_off_refuses_capacity_requests():
    request = b.exact_request()
    request["exactly"]["capacity"] = {"requests": {"memory": "10Gi"}}
    store = _store([b.gpu_device(0, node_name="n1")], [request])
    outcome = decide(store, _pod([request]), features=replace(DEFAULT_FEATURES, consumable_capacity=False))["n1"]
    assert isinstance(outcome, NotAllocatable) and outcome.fatal
    assert "has capacity requests, but the DRAConsumableCapacity feature is disabled" in outcome.summary


def test_with_every_incubating_gate_off_the_stable_allocator_ignores_capacity_requests():
    """structured.NewAllocator picks the stable allocator when DRAConsumableCapacity, DRADeviceBindingConditions
    and DRAFractionalCapacityRange are all off; it does not read capacity requests (nor shares: one held by
    another claim blocks the whole device, as the plugin's foreachAllocatedDevice reports it)."""
    request = b.exact_request()
    request["exactly"]["capacity"] = {"requests": {"memory": "500Gi"}}  # more than any device has
    device = b.gpu_device(0, node_name="n1")
    device["allowMultipleAllocations"] = True
    store = _store([device, b.gpu_device(1, node_name="n1")], [request])
    stable = replace(
        DEFAULT_FEATURES, consumable_capacity=False, device_binding_conditions=False, fractional_capacity_range=False
    )
    assert stable.stable_allocator and not DEFAULT_FEATURES.stable_allocator
    assert _devices(decide(store, _pod([request]), features=stable)["n1"]) == ["gpu-0"]
    held = b.claim("held", "other", [b.exact_request("gpu")], allocated=[("gpu", "n1", "gpu-0")])
    held["status"]["allocation"]["devices"]["results"][0]["shareID"] = "6bd28448-0000-4000-8000-998124f761d4"
    store = cluster(
        b.node("n1"),
        b.gpu_slice("n1", devices=[device, b.gpu_device(1, node_name="n1")]),
        b.device_class(),
        held,
        *template_pod([request]),
    )
    assert _devices(decide(store, _pod([request]), features=stable)["n1"]) == ["gpu-1"]
    # with the gate on the share leaves room; the capacity request (500Gi) is what no device can serve then
    assert isinstance(decide(store, _pod([request]))["n1"], NotAllocatable)


@pytest.mark.parametrize("count", [1, 2])  # 1: the one-request shortcut; 2 with two requests: the search
def test_device_taints_off_ignores_taints_and_memos_keep_gate_sets_apart(count):
    requests = [b.exact_request(f"r{i}") for i in range(count)]
    devices = [b.gpu_device(i, node_name="n1", taints=TAINT) for i in range(count)]
    store = _store(devices, requests)
    matcher = DeviceMatcher()  # one set of caches across all three calls
    off = replace(DEFAULT_FEATURES, device_taints=False)
    assert isinstance(decide(store, _pod(requests), matcher=matcher)["n1"], NotAllocatable)
    assert sorted(_devices(decide(store, _pod(requests), matcher=matcher, features=off)["n1"])) == [
        f"gpu-{i}" for i in range(count)
    ]
    assert isinstance(decide(store, _pod(requests), matcher=matcher)["n1"], NotAllocatable)
    assert len(matcher.caches.gated) == 1


def test_binding_conditions_off_makes_such_devices_unselectable():
    bound = b.gpu_device(0, node_name="n1")
    bound["bindingConditions"] = ["attached"]
    bound["bindingFailureConditions"] = ["failed"]
    requests = [b.exact_request()]
    off = replace(DEFAULT_FEATURES, device_binding_conditions=False)
    only_bound = _store([bound], requests)
    assert _devices(decide(only_bound, _pod(requests))["n1"]) == ["gpu-0"]
    assert isinstance(decide(only_bound, _pod(requests), features=off)["n1"], NotAllocatable)
    both = _store([bound, b.gpu_device(1, node_name="n1")], requests)
    assert _devices(decide(both, _pod(requests), features=off)["n1"]) == ["gpu-1"]


def test_partitionable_devices_off_refuses_counter_consumers_and_counter_slices():
    consumer = b.gpu_device(0, node_name="n1", consumes=[{"counterSet": "set", "counters": {"mem": {"value": "4"}}}])
    requests = [b.exact_request()]
    store = cluster(
        b.node("n1"),
        b.gpu_slice("n1", devices=[consumer, b.gpu_device(1, node_name="n1")], slice_count=2, name="a"),
        b.gpu_slice(
            "n1",
            devices=[],
            slice_count=2,
            name="b",
            shared_counters=[{"name": "set", "counters": {"mem": {"value": "8"}}}],
        ),
        b.device_class(),
        *template_pod(requests),
    )
    assert _devices(decide(store, _pod(requests))["n1"]) == ["gpu-0"]
    off = replace(DEFAULT_FEATURES, partitionable_devices=False)
    assert _devices(decide(store, _pod(requests), features=off)["n1"]) == ["gpu-1"]


def test_partitionable_devices_off_reason_says_the_gate_refuses_counter_consumers():
    consumer = b.gpu_device(0, node_name="n1", consumes=[{"counterSet": "set", "counters": {"mem": {"value": "4"}}}])
    requests = [b.exact_request()]
    store = cluster(
        b.node("n1"),
        b.gpu_slice("n1", devices=[consumer], slice_count=2, name="a"),
        b.gpu_slice(
            "n1",
            devices=[],
            slice_count=2,
            name="b",
            shared_counters=[{"name": "set", "counters": {"mem": {"value": "8"}}}],
        ),
        b.device_class(),
        *template_pod(requests),
    )
    outcome = decide(store, _pod(requests), features=replace(DEFAULT_FEATURES, partitionable_devices=False))["n1"]
    assert isinstance(outcome, NotAllocatable), outcome
    assert outcome.category == CATEGORY_FEATURE_GATE and outcome.unresolvable and outcome.free == 0, outcome
    assert "need the DRAPartitionableDevices feature (disabled)" in outcome.summary, outcome
