"""Consumable capacity (DRAConsumableCapacity, on by default since 1.36): devices with
allowMultipleAllocations shared by capacity, requestPolicy rounding, what other shares hold.

The rules follow k8s.io/dynamic-resource-allocation v0.37.2 structured/internal/incubating (consumable_capacity.go
and allocateDevice); upstream's own table (tests/upstream_table) checks the same against its cases, these check
our wiring: the state model, the store's shared-allocation index and both allocator paths.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import orjson
import pytest

from extender.decisions.devices.results import (
    CATEGORY_CAPACITY,
    CATEGORY_NO_DEVICES,
    CATEGORY_TAKEN,
    Allocation,
    NotAllocatable,
)
from extender.state.capacity import (
    CapacityError,
    CapacityPolicy,
    CapacityRange,
    DeviceCapacity,
    consumed_for_request,
    request_fits,
    violates_policy,
)
from extender.state.quantity import parse_quantity
from extender.transport.app import create_app
from testkit import builders as b
from tests.support.allocation import cluster, decide, template_pod
from tests.support.scenarios import engine_for

Gi = 2**30


def q(text: str) -> Fraction:
    return parse_quantity(text)


def shared_gpu(name: str = "gpu-0", memory: str = "80Gi", policy: dict[str, Any] | None = None) -> dict[str, Any]:
    device = b.gpu_device(0, name=name, memory=memory)
    # Only memory: a capacity without a policy that a share does not ask for is consumed whole (upstream
    # calculateConsumedCapacity), so `compute` would let only one share in.
    del device["capacity"]["compute"]
    device["allowMultipleAllocations"] = True
    if policy is not None:
        device["capacity"]["memory"]["requestPolicy"] = policy
    return device


def memory_request(name: str, amount: str | None, count: int = 1) -> dict[str, Any]:
    request = b.exact_request(name, count)
    if amount is not None:
        request["exactly"]["capacity"] = {"requests": {"memory": amount}}
    return request


def holder(name: str, device: str, *, share: str | None, memory: str | None = None) -> dict[str, Any]:
    """Another pod's claim, allocated: a share of `device` (with shareID) or the whole device (without)."""
    obj = b.claim(name, "other", [b.exact_request("gpu")], allocated=[("gpu", "n1", device)])
    result = obj["status"]["allocation"]["devices"]["results"][0]
    if share is not None:
        result["shareID"] = share
    if memory is not None:
        result["consumedCapacity"] = {"memory": memory}
    return obj


def outcome_for(devices: list[dict[str, Any]], requests: list[dict[str, Any]], *held: dict[str, Any]) -> Any:
    template, pod = template_pod(requests)
    store = cluster(b.node("n1"), b.gpu_slice("n1", 0, devices=devices), b.device_class(), *held, template)
    return decide(store, pod)["n1"]


def taken(outcome: Any) -> list[tuple[str, str, bool, tuple[tuple[str, Fraction], ...]]]:
    assert isinstance(outcome, Allocation), outcome
    return [
        (chosen.request, chosen.device.name, chosen.shared, chosen.consumed_capacity)
        for claim in outcome.claims
        for chosen in claim.devices
    ]


# --- the arithmetic ----------------------------------------------------------------------------------------------


def test_a_request_is_rounded_up_to_the_range_step_and_the_default_fills_a_missing_request():
    capacity = DeviceCapacity(
        q("80Gi"), CapacityPolicy(q("10Gi"), None, CapacityRange(q("10Gi"), q("40Gi"), q("10Gi")))
    )
    assert consumed_for_request(q("15Gi"), capacity) == q("20Gi")
    assert consumed_for_request(q("1Gi"), capacity) == q("10Gi")  # below min: min
    assert consumed_for_request(None, capacity) == q("10Gi")  # no request: the default
    assert consumed_for_request(None, DeviceCapacity(q("80Gi"))) == q("80Gi")  # no policy either: all of it
    assert violates_policy(q("50Gi"), capacity.policy)  # over max
    assert not violates_policy(q("30Gi"), capacity.policy)


def test_valid_values_round_up_to_the_next_value_and_others_violate():
    policy = CapacityPolicy(q("1"), (q("1"), q("2"), q("4")), None)
    capacity = DeviceCapacity(q("4"), policy)
    assert consumed_for_request(q("3"), capacity) == q("4")
    assert consumed_for_request(q("5"), capacity) == q("5")  # past the last value: kept, and then invalid
    assert violates_policy(q("5"), policy)


def test_fractional_ranges_use_milli_units():
    capacity = DeviceCapacity(q("1"), CapacityPolicy(None, None, CapacityRange(q("100m"), q("1"), q("250m"))))
    assert consumed_for_request(q("300m"), capacity) == q("350m")  # 100m + 1 * 250m
    assert consumed_for_request(q("300m"), capacity, fractional=False) == q("1")  # whole units, as with the gate off


def test_requests_upstream_cannot_represent_or_negative_ones_are_errors_not_skips():
    huge = DeviceCapacity(q("4"), CapacityPolicy(None, None, CapacityRange(q("1"), None, q("1"))))
    with pytest.raises(CapacityError, match="cannot be represented"):
        request_fits({"memory": Fraction(2**64)}, {"memory": huge}, {})
    with pytest.raises(CapacityError, match="negative"):
        request_fits({"memory": q("-1")}, {"memory": DeviceCapacity(q("4"))}, {})
    assert request_fits({"other": q("1")}, {"memory": DeviceCapacity(q("4"))}, {}) is None  # a capacity it lacks


def test_what_other_shares_hold_is_counted():
    capacities = {"memory": DeviceCapacity(q("80Gi"))}
    assert request_fits({"memory": q("40Gi")}, capacities, {"memory": q("40Gi")}) == {"memory": q("40Gi")}
    assert request_fits({"memory": q("41Gi")}, capacities, {"memory": q("40Gi")}) is None


# --- the allocator -------------------------------------------------------------------------------------------------


def test_pods_share_one_gpu_by_capacity_and_never_beyond_it():
    held = holder("first", "gpu-0", share="aaaa", memory="40Gi")
    fits = outcome_for([shared_gpu()], [memory_request("gpu", "40Gi")], held)
    assert taken(fits) == [("gpu", "gpu-0", True, (("memory", q("40Gi")),))]
    too_much = outcome_for([shared_gpu()], [memory_request("gpu", "41Gi")], held)
    assert isinstance(too_much, NotAllocatable) and not too_much.unresolvable, too_much
    assert too_much.category == CATEGORY_TAKEN and "not enough capacity left" in too_much.summary
    assert "1 could serve it, 0 are free with enough capacity left" in too_much.detail


def test_a_capacity_without_policy_and_request_is_consumed_whole():
    device = shared_gpu()
    device["capacity"]["compute"] = {"value": "100"}
    outcome = outcome_for([device], [memory_request("a", "10Gi"), memory_request("b", "10Gi")])
    assert isinstance(outcome, NotAllocatable), outcome  # each share would take all 100 of compute
    device["capacity"]["compute"]["requestPolicy"] = {"default": "10"}  # now each share takes 10 of it
    both = outcome_for([device], [memory_request("a", "10Gi"), memory_request("b", "10Gi")])
    assert [dict(c)["compute"] for _, _, _, c in taken(both)] == [q("10"), q("10")]


def test_a_share_without_capacity_requests_takes_the_whole_device_without_a_policy():
    # No request and no policy: a share consumes the whole value, so a second share does not fit.
    held = holder("first", "gpu-0", share="aaaa", memory="80Gi")
    outcome = outcome_for([shared_gpu()], [memory_request("gpu", None)], held)
    assert isinstance(outcome, NotAllocatable), outcome


def test_two_requests_of_one_pod_share_one_device():
    policy = {"default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}}
    requests = [memory_request("a", "15Gi"), memory_request("b", None)]
    outcome = outcome_for([shared_gpu(policy=policy)], requests)
    assert [(r, d, s, dict(c)["memory"]) for r, d, s, c in taken(outcome)] == [
        ("a", "gpu-0", True, q("20Gi")),
        ("b", "gpu-0", True, q("10Gi")),
    ]


def test_a_device_held_whole_is_in_use_even_if_it_allows_multiple_allocations():
    outcome = outcome_for([shared_gpu()], [memory_request("gpu", "1Gi")], holder("first", "gpu-0", share=None))
    assert isinstance(outcome, NotAllocatable) and outcome.category == CATEGORY_TAKEN, outcome


def test_a_request_outside_the_policy_skips_the_device():
    policy = {"validRange": {"min": "10Gi", "max": "40Gi", "step": "10Gi"}, "default": "10Gi"}
    outcome = outcome_for([shared_gpu(policy=policy), shared_gpu("gpu-1")], [memory_request("gpu", "50Gi")])
    assert [d for _, d, _, _ in taken(outcome)] == ["gpu-1"]
    # Alone, the device can never serve it: no preemption helps, and the reason says so.
    alone = outcome_for([shared_gpu(policy=policy)], [memory_request("gpu", "50Gi")])
    assert isinstance(alone, NotAllocatable) and alone.unresolvable and alone.category == CATEGORY_NO_DEVICES
    assert "can serve its capacity request" in alone.summary and "memory=53687091200" in alone.detail


def test_a_plain_device_whose_value_breaks_its_own_policy_is_skipped_on_both_paths():
    """No default, and the whole value is over max: upstream skips it even for a request without capacity."""
    odd = b.gpu_device(0)
    odd["capacity"]["memory"]["requestPolicy"] = {"validRange": {"min": "1Gi", "max": "40Gi"}}
    plain = b.gpu_device(1)
    outcome = outcome_for([odd, plain], [b.exact_request("gpu", 1)])  # the one-request shortcut
    assert [d for _, d, _, _ in taken(outcome)] == ["gpu-1"]
    outcome = outcome_for([odd, plain], [b.exact_request("a", 1), b.exact_request("b", 1)])
    assert isinstance(outcome, NotAllocatable), outcome


def test_an_unrepresentable_capacity_request_fails_the_pod():
    policy = {"validRange": {"min": "1", "step": "1"}}
    outcome = outcome_for([shared_gpu(policy=policy)], [memory_request("gpu", "100E")])
    assert isinstance(outcome, NotAllocatable) and outcome.fatal and outcome.category == CATEGORY_CAPACITY, outcome


def test_counters_of_a_shared_device_are_charged_once():
    """Two shares of one partitionable device that consumes all of a counter: both fit."""
    device = shared_gpu()
    device["consumesCounters"] = [{"counterSet": "gpu-0-set", "counters": {"memory": {"value": "80Gi"}}}]
    counters = [{"name": "gpu-0-set", "counters": {"memory": {"value": "80Gi"}}}]
    template, pod = template_pod([memory_request("a", "10Gi"), memory_request("b", "10Gi")])
    store = cluster(
        b.node("n1"), b.gpu_slice("n1", 0, devices=[device], shared_counters=counters), b.device_class(), template
    )
    assert [d for _, d, _, _ in taken(decide(store, pod)["n1"])] == ["gpu-0", "gpu-0"]
    # Already shared by another pod: its counters are charged already, the next share does not charge again.
    store.apply("ResourceClaim", "ADDED", holder("first", "gpu-0", share="aaaa", memory="10Gi"))
    assert [d for _, d, _, _ in taken(decide(store, pod)["n1"])] == ["gpu-0", "gpu-0"]


def test_the_store_keeps_shares_incrementally():
    store = cluster(b.node("n1"), b.gpu_slice("n1", 0, devices=[shared_gpu()]), b.device_class())
    key = (b.DRIVER, "n1", "gpu-0")
    store.apply("ResourceClaim", "ADDED", holder("first", "gpu-0", share="aaaa", memory="30Gi"))
    store.apply("ResourceClaim", "ADDED", holder("second", "gpu-0", share="bbbb", memory="20Gi"))
    use = store.snapshot().shared_allocated[key]
    assert use.shares == 2 and use.consumed == {"memory": q("50Gi")}
    store.apply("ResourceClaim", "DELETED", holder("first", "gpu-0", share="aaaa", memory="30Gi"))
    snapshot = store.snapshot()
    assert snapshot.shared_allocated[key].consumed == {"memory": q("20Gi")}
    assert snapshot.allocated[key] == 1
    store.apply("ResourceClaim", "DELETED", holder("second", "gpu-0", share="bbbb", memory="20Gi"))
    assert key not in store.snapshot().shared_allocated


def test_filter_over_http_answers_capacity_verdicts_per_node_and_never_fails():
    """Through /filter (no queue label: devices only): a node whose shared GPU has room passes, one whose GPU
    is used up fails resolvably, a request outside the policy fails unresolvably; the answer is a 200."""
    policy = {"default": "10Gi", "validRange": {"min": "10Gi", "max": "40Gi", "step": "10Gi"}}
    objects = [
        b.namespace("team-a"),
        b.device_class(),
        b.node("roomy"),
        b.node("full"),
        b.gpu_slice("roomy", 0, devices=[shared_gpu(policy=policy)]),
        b.gpu_slice("full", 0, devices=[shared_gpu(policy=policy)]),
        b.claim_template("share-20", "team-a", [memory_request("gpu", "15Gi")]),
        b.claim_template("share-50", "team-a", [memory_request("gpu", "50Gi")]),
    ]
    used = holder("first", "gpu-0", share="aaaa", memory="70Gi")
    used["status"]["allocation"]["devices"]["results"][0]["pool"] = "full"
    objects.append(used)
    client = create_app(engine_for(objects)).test_client()

    def filter_(template: str) -> dict[str, Any]:
        pod = b.pod(f"p-{template}", "team-a", templates={"gpu": template})
        body = {"Pod": pod, "NodeNames": ["roomy", "full"]}
        response = client.post("/filter", data=orjson.dumps(body), content_type="application/json")
        assert response.status_code == 200
        return response.get_json()

    fits = filter_("share-20")
    assert fits["NodeNames"] == ["roomy"] and "capacity left" in fits["FailedNodes"]["full"]
    # explain (the same JSON /diagnostics shows) names the used-up device, what is left and its holder
    pod = b.pod("p-share-20", "team-a", templates={"gpu": "share-20"})
    report = client.post("/diagnostics/explain", data=orjson.dumps(pod), content_type="application/json").get_json()
    full = next(node for node in report["nodes"] if node["node"] == "full")
    assert "gpu.example.com/full/gpu-0: memory 10Gi of 80Gi left, held by claim other/first" in full["detail"], full
    outside = filter_("share-50")
    assert outside["NodeNames"] == []
    assert set(outside["FailedAndUnresolvableNodes"]) == {"roomy", "full"}
    assert "can serve its capacity request" in outside["FailedAndUnresolvableNodes"]["roomy"]


def test_a_capacity_shortfall_names_the_device_what_is_left_and_who_holds_it():
    """The node's detail (shown by /diagnostics and explain) says which device is used up, how
    much of what the request asks is left, and which claims (and pods) hold it; the reason kube-scheduler
    aggregates stays the same text on every node."""
    held = holder("first", "gpu-0", share="aaaa", memory="70Gi")
    held["status"]["reservedFor"] = [{"resource": "pods", "name": "trainer", "uid": "u-trainer"}]
    other = holder("second", "gpu-1", share="bbbb", memory="75Gi")
    too_much = outcome_for([shared_gpu("gpu-0"), shared_gpu("gpu-1")], [memory_request("gpu", "20Gi")], held, other)
    assert isinstance(too_much, NotAllocatable) and too_much.category == CATEGORY_TAKEN, too_much
    assert too_much.summary.endswith("not enough capacity left on the devices of class gpu.example.com")
    assert "2 could serve it, 0 are free with enough capacity left" in too_much.detail
    assert (
        "example.com/n1/gpu-0: memory 10Gi of 80Gi left, held by claim other/first (pod other/trainer)"
        in too_much.detail
    ), too_much.detail
    assert "example.com/n1/gpu-1: memory 5Gi of 80Gi left, held by claim other/second" in too_much.detail


# --- a malformed requestPolicy (bad input is a per-node reason, never a refused slice or a 500) ----------------


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"default": "10Gi", "validRange": {"min": "10Gi", "step": "0"}}, "requestPolicy.validRange.step"),
        ({"default": "10Gi", "validRange": {"min": "10Gi", "step": "-10Gi"}}, "requestPolicy.validRange.step"),
        ({"default": "10Gi", "validRange": {"step": "10Gi"}}, "requestPolicy.validRange.min"),
        ({"default": "ten", "validValues": ["10Gi"]}, "requestPolicy.default"),
        ({"validValues": "10Gi"}, "requestPolicy.validValues"),
        ("10Gi", "requestPolicy"),
    ],
)
def test_a_malformed_request_policy_makes_only_that_device_unusable_with_a_reason(policy: Any, field: str) -> None:
    """Upstream's API validation refuses these policies (validateRequestPolicyRange: step must be greater than
    zero, min is required), but only on create and on a changed capacity; its allocator divides by the step and
    reads min, so it cannot serve such a device. The slice still parses: the broken device is never allocated and
    the node's reason names slice, device and field; the slice's other device is used."""
    broken = shared_gpu("gpu-0")
    broken["capacity"]["memory"]["requestPolicy"] = policy
    fine = shared_gpu("gpu-1", policy={"default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}})
    outcome = outcome_for([broken, fine], [memory_request("gpu", "20Gi")])
    assert taken(outcome) == [("gpu", "gpu-1", True, (("memory", 20 * Gi),))]
    # two shares of 50Gi: the fine device holds one, the broken one cannot take the other; the reason says why
    two = outcome_for([broken, fine], [memory_request("a", "50Gi"), memory_request("b", "50Gi")])
    assert isinstance(two, NotAllocatable), two
    expected = "ResourceSlice n1-gpu.example.com, device gpu-0: malformed requestPolicy, field spec.devices[0]"
    assert expected in two.summary and field in two.summary, two.summary
    assert expected in two.detail
    alone = outcome_for([broken], [b.exact_request("gpu")])
    assert isinstance(alone, NotAllocatable) and alone.category == CATEGORY_NO_DEVICES and alone.unresolvable
    assert "1 matching device(s) unusable" in alone.summary and field in alone.summary, alone.summary


def test_a_valid_but_refused_policy_is_computed_with_as_upstream_allocator_does() -> None:
    """Validation also refuses an unsorted validValues list or a default outside it; upstream's allocator
    computes with them as they are (roundUpValidValues walks the list in order), so the device stays usable."""
    device = shared_gpu("gpu-0", policy={"default": "5Gi", "validValues": ["40Gi", "20Gi"]})
    outcome = outcome_for([device], [memory_request("gpu", "10Gi")])
    assert taken(outcome) == [("gpu", "gpu-0", True, (("memory", 40 * Gi),))]


def test_filter_over_http_with_a_malformed_request_policy_fails_that_node_only() -> None:
    """Through /filter and /diagnostics/explain: the node whose slice carries the malformed policy fails with the
    reason naming slice, device and field; the other node passes; every answer is a 200."""
    broken = shared_gpu("gpu-0", policy={"default": "10Gi", "validRange": {"min": "10Gi", "step": "0"}})
    objects = [
        b.namespace("team-a"),
        b.device_class(),
        b.node("bad"),
        b.node("good"),
        b.gpu_slice("bad", 0, devices=[broken]),
        b.gpu_slice("good", 0, devices=[shared_gpu(policy={"default": "10Gi"})]),
        b.claim_template("share", "team-a", [memory_request("gpu", "10Gi")]),
    ]
    client = create_app(engine_for(objects)).test_client()
    pod = b.pod("p", "team-a", templates={"gpu": "share"})
    response = client.post(
        "/filter", data=orjson.dumps({"Pod": pod, "NodeNames": ["bad", "good"]}), content_type="application/json"
    )
    assert response.status_code == 200
    answer = response.get_json()
    assert answer["NodeNames"] == ["good"]
    failed = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    assert set(failed) == {"bad"}
    assert "ResourceSlice bad-gpu.example.com, device gpu-0" in failed["bad"], failed
    assert "requestPolicy.validRange.step: must be greater than zero" in failed["bad"], failed
    report = client.post("/diagnostics/explain", data=orjson.dumps(pod), content_type="application/json")
    assert report.status_code == 200
    bad = next(node for node in report.get_json()["nodes"] if node["node"] == "bad")
    assert "requestPolicy.validRange.step" in bad["detail"], bad
    node = client.get("/diagnostics/nodes/bad")
    assert node.status_code == 200
    assert [device["state"] for device in node.get_json()["devices"]] == ["unusable"]
    (device,) = node.get_json()["devices"]
    assert "malformed requestPolicy" in device["why"] and "validRange.step" in device["why"], device


def test_devices_of_one_model_share_their_parsed_capacity_and_a_broken_one_is_named_each_time() -> None:
    """A capacity map is parsed once per distinct map (the devices of one model publish the same one); a map
    with a malformed policy is never answered from that memo: each device's reason names its own device."""
    from extender.state.dra.devices import parse_resource_slice

    broken_policy = {"default": "10Gi", "validRange": {"min": "10Gi", "step": "0"}}
    devices = [shared_gpu("gpu-0"), shared_gpu("gpu-1"), shared_gpu("gpu-2"), shared_gpu("gpu-3")]
    for device in devices[2:]:
        device["capacity"]["memory"]["requestPolicy"] = broken_policy
    raw = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n1-gpu"},
        "spec": {"driver": "gpu.example.com", "pool": {"name": "n1"}, "nodeName": "n1", "devices": devices},
    }
    parsed = parse_resource_slice(orjson.loads(orjson.dumps(raw)))
    first, second, third, fourth = parsed.devices
    assert first.consumable is second.consumable and first.capacity is second.capacity
    assert first.unusable_reason == second.unusable_reason == ""
    assert "device gpu-2: malformed requestPolicy, field spec.devices[2]" in third.unusable_reason
    assert "device gpu-3: malformed requestPolicy, field spec.devices[3]" in fourth.unusable_reason
