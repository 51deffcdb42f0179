"""The allocator's rules, one by one, on example-driver-shaped slices."""

from __future__ import annotations

import pytest

from extender.decisions.devices.results import (
    CATEGORY_CLAIM_NODE,
    CATEGORY_CLAIM_SPEC,
    CATEGORY_CLASS,
    CATEGORY_CONSTRAINT,
    CATEGORY_NO_DEVICES,
    CATEGORY_POOL,
    CATEGORY_SELECTOR,
    CATEGORY_TAKEN,
    CATEGORY_TOO_MANY,
    Allocation,
    NotAllocatable,
)
from testkit import builders as b
from tests.support.allocation import cluster, decide, template_pod


def basic(count=4, *extra):
    return cluster(b.node("n1"), b.gpu_slice("n1", count), b.device_class(), *extra)


def run(store_objects, requests, constraints=None, nodes=("n1",)):
    template, pod = template_pod(requests, constraints)
    store = cluster(*store_objects, template)
    return decide(store, pod, nodes)


BASE = [b.node("n1"), b.gpu_slice("n1", 4), b.device_class()]


def devices(outcome):
    assert isinstance(outcome, Allocation), outcome
    return [chosen.device.name for claim in outcome.claims for chosen in claim.devices]


def test_exact_count_takes_first_devices_in_order():
    outcome = run(BASE, [b.exact_request("gpu", 2)])["n1"]
    assert devices(outcome) == ["gpu-0", "gpu-1"]
    assert outcome.devices_by_class() == {"gpu.example.com": 2}


def test_not_enough_devices_is_unresolvable():
    outcome = run(BASE, [b.exact_request("gpu", 5)])["n1"]
    assert isinstance(outcome, NotAllocatable)
    assert outcome.category == CATEGORY_NO_DEVICES and outcome.unresolvable
    assert outcome.matching == 4 and outcome.needed == 5
    assert "only 4 devices" in outcome.detail


def test_taken_devices_are_resolvable_with_numbers():
    used = b.claim(
        "used",
        "ns",
        [b.exact_request("gpu", 3)],
        allocated=[("gpu", "n1", "gpu-0"), ("gpu", "n1", "gpu-1"), ("gpu", "n1", "gpu-2")],
    )
    outcome = run([*BASE, used], [b.exact_request("gpu", 2)])["n1"]
    assert isinstance(outcome, NotAllocatable)
    assert outcome.category == CATEGORY_TAKEN and not outcome.unresolvable
    assert (outcome.matching, outcome.free) == (4, 1)
    ok = run([*BASE, used], [b.exact_request("gpu", 1)])["n1"]
    assert devices(ok) == ["gpu-3"]


def test_all_mode_takes_every_matching_device_and_fails_when_one_is_used():
    outcome = run(BASE, [b.exact_request("gpu", mode="All")])["n1"]
    assert devices(outcome) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    used = b.claim("used", "ns", [b.exact_request()], allocated=[("gpu", "n1", "gpu-2")])
    failed = run([*BASE, used], [b.exact_request("gpu", mode="All")])["n1"]
    assert isinstance(failed, NotAllocatable) and failed.category == CATEGORY_TAKEN


def test_all_mode_with_no_device_fails():
    store_objects = [b.node("n1"), b.device_class()]
    outcome = run(store_objects, [b.exact_request("gpu", mode="All")])["n1"]
    assert isinstance(outcome, NotAllocatable) and outcome.unresolvable


def test_incomplete_pool_is_never_allocated_from():
    objects = [b.node("n1"), b.gpu_slice("n1", 2, slice_count=2), b.device_class()]
    outcome = run(objects, [b.exact_request("gpu", mode="All")])["n1"]
    assert isinstance(outcome, NotAllocatable) and outcome.category == CATEGORY_POOL
    assert outcome.fatal  # upstream: an error for the whole pod on this node
    # Upstream skips an incomplete pool for ExactCount too (the differential test found our old behaviour wrong)
    exact = run(objects, [b.exact_request("gpu", 1)])["n1"]
    assert isinstance(exact, NotAllocatable) and not exact.fatal


def test_request_selectors_filter_devices():
    objects = [
        b.node("n1"),
        b.gpu_slice("n1", 0, devices=[b.gpu_device(0, memory="40Gi"), b.gpu_device(1, memory="80Gi")]),
        b.device_class(),
    ]
    selector = "device.capacity['gpu.example.com'].memory.compareTo(quantity('64Gi')) >= 0"
    assert devices(run(objects, [b.exact_request("gpu", 1, selectors=[selector])])["n1"]) == ["gpu-1"]
    failed = run(objects, [b.exact_request("gpu", 2, selectors=[selector])])["n1"]
    assert isinstance(failed, NotAllocatable) and failed.matching == 1 and failed.unresolvable


def test_class_selectors_apply():
    objects = [b.node("n1"), b.gpu_slice("n1", 2), b.device_class("other", ["device.driver == 'nic.example.com'"])]
    outcome = run(objects, [b.exact_request("gpu", 1, device_class_name="other")])["n1"]
    assert isinstance(outcome, NotAllocatable) and outcome.matching == 0 and outcome.unresolvable


def test_missing_class_is_a_reason():
    outcome = run([b.node("n1"), b.gpu_slice("n1", 2)], [b.exact_request("gpu")])["n1"]
    assert isinstance(outcome, NotAllocatable) and outcome.category == CATEGORY_CLASS


def test_first_available_prefers_earlier_subrequest_and_falls_back():
    objects = BASE
    request = b.first_available_request(
        "gpu",
        [
            b.subrequest("bleeding", 1, selectors=["device.attributes['gpu.example.com'].model == 'BLEEDING-EDGE'"]),
            b.subrequest(
                "huge", 1, selectors=["device.capacity['gpu.example.com'].memory.compareTo(quantity('1Ti')) >= 0"]
            ),
            b.subrequest("older", 1),
        ],
    )
    outcome = run(objects, [request])["n1"]
    assert isinstance(outcome, Allocation)
    chosen = outcome.claims[0].devices[0]
    assert chosen.request == "gpu/older"
    assert outcome.claims[0].chosen_alternatives == {"gpu": 2}
    preferred = b.first_available_request(
        "gpu",
        [
            b.subrequest("latest", 1, selectors=["device.attributes['gpu.example.com'].model == 'LATEST-GPU-MODEL'"]),
            b.subrequest("older", 1),
        ],
    )
    outcome = run(objects, [preferred])["n1"]
    assert outcome.claims[0].devices[0].request == "gpu/latest"
    assert outcome.alternative_rank == 0


def test_first_available_count_differs_per_alternative():
    request = b.first_available_request("gpu", [b.subrequest("four", 4), b.subrequest("two", 2)])
    used = b.claim("used", "ns", [b.exact_request()], allocated=[("gpu", "n1", "gpu-0")])
    outcome = run([*BASE, used], [request])["n1"]
    assert [c.request for c in outcome.claims[0].devices] == ["gpu/two", "gpu/two"]


def test_match_attribute_constraint():
    devices_list = [
        b.gpu_device(0, extra_attributes={"numa": {"int": 0}}),
        b.gpu_device(1, extra_attributes={"numa": {"int": 1}}),
        b.gpu_device(2, extra_attributes={"numa": {"int": 1}}),
    ]
    objects = [b.node("n1"), b.gpu_slice("n1", 0, devices=devices_list), b.device_class()]
    constraints = [{"requests": [], "matchAttribute": "gpu.example.com/numa"}]
    outcome = run(objects, [b.exact_request("a", 1), b.exact_request("b", 1)], constraints)["n1"]
    assert devices(outcome) == ["gpu-1", "gpu-2"]  # backtracked away from gpu-0
    failing = run(objects, [b.exact_request("a", 3)], constraints)["n1"]
    assert isinstance(failing, NotAllocatable)


def test_match_attribute_missing_attribute_fails_constraint():
    objects = [b.node("n1"), b.gpu_slice("n1", 2), b.device_class()]
    constraints = [{"requests": ["a"], "matchAttribute": "gpu.example.com/numa"}]
    outcome = run(objects, [b.exact_request("a", 1)], constraints)["n1"]
    assert isinstance(outcome, NotAllocatable) and outcome.category == CATEGORY_CONSTRAINT


def test_distinct_attribute_constraint():
    devices_list = [
        b.gpu_device(0, extra_attributes={"rail": {"string": "x"}}),
        b.gpu_device(1, extra_attributes={"rail": {"string": "x"}}),
        b.gpu_device(2, extra_attributes={"rail": {"string": "y"}}),
    ]
    objects = [b.node("n1"), b.gpu_slice("n1", 0, devices=devices_list), b.device_class()]
    constraints = [{"distinctAttribute": "gpu.example.com/rail"}]
    assert devices(run(objects, [b.exact_request("a", 2)], constraints)["n1"]) == ["gpu-0", "gpu-2"]
    assert isinstance(run(objects, [b.exact_request("a", 3)], constraints)["n1"], NotAllocatable)


def test_admin_access_uses_allocated_devices_without_taking_them():
    used = b.claim("used", "ns", [b.exact_request("gpu", 4)], allocated=[("gpu", "n1", f"gpu-{i}") for i in range(4)])
    outcome = run([*BASE, used], [b.exact_request("gpu", mode="All", admin=True)])["n1"]
    assert len(devices(outcome)) == 4
    assert outcome.devices_by_class() == {}


def test_device_taints_block_unless_tolerated():
    tainted = [
        b.gpu_device(0, taints=[{"key": "gpu.example.com/unhealthy", "value": "true", "effect": "NoSchedule"}]),
        b.gpu_device(1),
    ]
    objects = [b.node("n1"), b.gpu_slice("n1", 0, devices=tainted), b.device_class()]
    assert devices(run(objects, [b.exact_request("gpu", 1)])["n1"]) == ["gpu-1"]
    assert isinstance(run(objects, [b.exact_request("gpu", 2)])["n1"], NotAllocatable)
    toleration = [{"key": "gpu.example.com/unhealthy", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    assert len(devices(run(objects, [b.exact_request("gpu", 2, tolerations=toleration)])["n1"])) == 2
    none_effect = [b.gpu_device(0, taints=[{"key": "k", "value": "v", "effect": "None"}])]
    objects = [b.node("n1"), b.gpu_slice("n1", 0, devices=none_effect), b.device_class()]
    assert devices(run(objects, [b.exact_request("gpu", 1)])["n1"]) == ["gpu-0"]


def test_partitionable_devices_respect_shared_counters():
    counters = [{"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}]

    def partition(name, memory):
        device = b.gpu_device(0, name=name)
        device["consumesCounters"] = [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": memory}}}]
        return device

    slice_obj = b.gpu_slice(
        "n1",
        0,
        devices=[partition("whole", "80Gi"), partition("half-a", "40Gi"), partition("half-b", "40Gi")],
        shared_counters=counters,
    )
    objects = [b.node("n1"), slice_obj, b.device_class()]
    # two devices: "whole" uses all memory, so the halves must be picked together
    assert devices(run(objects, [b.exact_request("gpu", 2)])["n1"]) == ["half-a", "half-b"]
    assert isinstance(run(objects, [b.exact_request("gpu", 3)])["n1"], NotAllocatable)
    used = b.claim("used", "ns", [b.exact_request()], allocated=[("gpu", "n1", "half-a")])
    outcome = run([*objects, used], [b.exact_request("gpu", 1)])["n1"]
    assert devices(outcome) == ["half-b"]  # whole no longer fits beside half-a


def test_already_allocated_claim_pins_node():
    claim = b.claim("shared", "ns", [b.exact_request()], allocated=[("gpu", "n1", "gpu-0")], allocated_node="n1")
    store = cluster(b.node("n1"), b.node("n2"), b.gpu_slice("n1", 2), b.gpu_slice("n2", 2), b.device_class(), claim)
    outcomes = decide(store, b.pod("p", "ns", claims={"gpu": "shared"}), ("n1", "n2"))
    assert isinstance(outcomes["n1"], Allocation) and outcomes["n1"].device_count == 0
    assert isinstance(outcomes["n2"], NotAllocatable) and outcomes["n2"].category == CATEGORY_CLAIM_NODE


def test_several_claims_are_allocated_together():
    store = cluster(
        *BASE,
        b.claim_template("two", "ns", [b.exact_request("gpu", 2)]),
        b.claim_template("three", "ns", [b.exact_request("gpu", 3)]),
    )
    outcome = decide(store, b.pod("p", "ns", templates={"a": "two", "b": "two"}))["n1"]
    assert len(devices(outcome)) == 4 and len(set(devices(outcome))) == 4
    failing = decide(store, b.pod("q", "ns", templates={"a": "two", "b": "three"}))["n1"]
    assert isinstance(failing, NotAllocatable)


def test_missing_claim_and_template_fail_every_node():
    store = cluster(*BASE)
    outcomes = decide(store, b.pod("p", "ns", claims={"gpu": "nope"}), ("n1",))
    assert "does not exist" in outcomes["n1"].summary and outcomes["n1"].unresolvable


def test_cel_runtime_error_is_a_reason_not_a_crash():
    selector = "device.attributes['gpu.example.com'].doesNotExist == 'x'"
    outcome = run(BASE, [b.exact_request("gpu", 1, selectors=[selector])])["n1"]
    assert isinstance(outcome, NotAllocatable) and outcome.category == CATEGORY_SELECTOR
    assert "doesNotExist" in outcome.summary


def test_cel_compile_error_is_a_reason():
    outcome = run(BASE, [b.exact_request("gpu", 1, selectors=["device.driver =="])])["n1"]
    assert isinstance(outcome, NotAllocatable) and outcome.category == CATEGORY_SELECTOR


def test_search_budget_exhaustion_is_a_reason():
    devices_list = [b.gpu_device(i, extra_attributes={"g": {"int": i}}) for i in range(16)]
    objects = [b.node("n1"), b.gpu_slice("n1", 0, devices=devices_list), b.device_class()]
    constraints = [{"matchAttribute": "gpu.example.com/g"}]
    template, pod = template_pod(
        [b.exact_request("a", 1), b.exact_request("b", 1), b.exact_request("c", 1)], constraints
    )
    store = cluster(*objects, template)
    outcome = decide(store, pod, budget=50)["n1"]
    assert isinstance(outcome, NotAllocatable) and outcome.category == "search-budget"


def test_at_most_32_devices_per_claim():
    objects = [b.node("n1"), b.gpu_slice("n1", 40), b.device_class()]
    outcome = run(objects, [b.exact_request("gpu", mode="All")])["n1"]
    assert isinstance(outcome, NotAllocatable)


@pytest.mark.parametrize("count", [33, 500, 2**62])
def test_count_above_the_claim_limit_is_the_allocators_reason_not_a_malformed_claim(count):
    """Upstream keeps such a claim (API validation has no upper bound) and Allocate reports the limit."""
    template, pod = template_pod([b.exact_request("gpu", count)])
    store = cluster(*BASE, template)  # parses: ObjectError would raise here
    outcome = decide(store, pod)["n1"]
    assert isinstance(outcome, NotAllocatable)
    assert outcome.category == CATEGORY_TOO_MANY and outcome.fatal and outcome.unresolvable
    assert f"adding {count} devices exceeds the claim limit of 32, with 0 already accounted for" in outcome.summary


def test_claim_limit_counts_every_request_at_its_smallest_alternative():
    requests = [
        b.exact_request("a", 20),
        b.first_available_request("b", [b.subrequest("twenty", 20), b.subrequest("thirteen", 13)]),
    ]
    objects = [b.node("n1"), b.gpu_slice("n1", 40), b.device_class()]
    outcome = run(objects, requests)["n1"]
    assert isinstance(outcome, NotAllocatable) and outcome.category == CATEGORY_TOO_MANY
    assert "request b: adding 13 devices exceeds the claim limit of 32, with 20 already accounted for" in (
        outcome.summary
    )
    requests[1] = b.first_available_request("b", [b.subrequest("twenty", 20), b.subrequest("twelve", 12)])
    outcome = run(objects, requests)["n1"]
    assert [c.request for c in outcome.claims[0].devices] == ["a"] * 20 + ["b/twelve"] * 12


@pytest.mark.parametrize("count", [33, 2**63 - 1])
def test_first_available_subrequest_over_the_limit_is_skipped(count):
    requests = [
        b.exact_request("first", 1),
        b.first_available_request("gpu", [b.subrequest("too-many", count), b.subrequest("one", 1)]),
    ]
    outcome = run(BASE, requests)["n1"]
    assert devices(outcome) == ["gpu-0", "gpu-1"]
    assert [c.request for c in outcome.claims[0].devices] == ["first", "gpu/one"]
    assert outcome.claims[0].chosen_alternatives == {"first": 0, "gpu": 1}


def test_max_allocation_backtracks_to_the_smaller_subrequests_within_a_small_budget():
    """Two requests that could each take 32 of 64 devices: after the first takes 32, no choice of its devices
    lets the second fit, so the search goes straight back to the first's smaller subrequest (upstream's
    errAllocationResultMaxSizeExceeded; its table pins 75 allocateOne calls). 64 device tries suffice."""
    objects = [b.node("n1"), b.gpu_slice("n1", 64), b.device_class()]
    requests = [
        b.first_available_request(name, [b.subrequest("all-32", 32), b.subrequest("half", 16)]) for name in ("a", "b")
    ]
    template, pod = template_pod(requests)
    store = cluster(*objects, template)
    outcome = decide(store, pod, budget=64)["n1"]
    assert isinstance(outcome, Allocation), outcome
    assert [c.request for c in outcome.claims[0].devices] == ["a/half"] * 16 + ["b/half"] * 16
    assert devices(outcome) == [f"gpu-{i}" for i in range(32)]
    assert outcome.claims[0].chosen_alternatives == {"a": 1, "b": 1}
    assert isinstance(decide(store, pod, budget=63)["n1"], NotAllocatable)  # the figure is exact


NO_CEL = [{"name": "gpu", "exactly": {"deviceClassName": b.GPU_CLASS, "selectors": [{}]}}]


@pytest.mark.parametrize(
    ("requests", "constraints", "category", "words"),
    [
        ([b.exact_request("gpu", mode="Future")], None, CATEGORY_CLAIM_SPEC, "unsupported allocationMode Future"),
        ([b.exact_request("gpu", device_class_name="")], None, CATEGORY_CLASS, "no deviceClassName"),
        ([b.exact_request("gpu")], [{"requests": ["gpu"]}], CATEGORY_CLAIM_SPEC, "constraint #0: neither"),
        (NO_CEL, None, CATEGORY_SELECTOR, "CEL selector '' failed to compile"),
    ],
    ids=["unknown-mode", "empty-class", "empty-constraint", "selector-without-cel"],
)
def test_fields_this_client_does_not_know_fail_the_pod_with_a_reason(requests, constraints, category, words):
    """Upstream's Allocate returns an error for these (a newer API's values, or validation bypassed); the claim
    still exists, so the reason names the field instead of saying the claim does not exist."""
    outcome = run(BASE, requests, constraints)["n1"]
    assert isinstance(outcome, NotAllocatable), outcome
    assert outcome.category == category and outcome.fatal, outcome
    assert words in outcome.summary


@pytest.mark.parametrize("node_name", ["n1", "n2"])
def test_devices_of_other_nodes_are_not_used(node_name):
    store = cluster(
        b.node("n1"),
        b.node("n2"),
        b.gpu_slice("n1", 2),
        b.device_class(),
        b.claim_template("t", "ns", [b.exact_request("gpu", 1)]),
    )
    outcome = decide(store, b.pod("p", "ns", templates={"gpu": "t"}), (node_name,))[node_name]
    assert isinstance(outcome, Allocation) == (node_name == "n1")


def test_an_attribute_of_a_type_this_client_does_not_know_keeps_the_device_and_fails_selectors_on_it():
    """Upstream keeps such a device; every CEL selector evaluated on it fails (getAttributeValue: "unsupported
    attribute value"), while a class without selectors still takes it."""
    device = b.gpu_device(0, extra_attributes={"future": {"someNewType": {"x": 1}}})
    selected = cluster(b.node("n1"), b.gpu_slice("n1", 0, devices=[device]), b.device_class())
    template, pod = template_pod([b.exact_request("gpu", 1)])
    selected.apply("ResourceClaimTemplate", "ADDED", template)
    outcome = decide(selected, pod)["n1"]
    assert isinstance(outcome, NotAllocatable) and outcome.fatal and outcome.category == CATEGORY_SELECTOR
    assert "unsupported attribute value" in outcome.summary
    plain = cluster(b.node("n1"), b.gpu_slice("n1", 0, devices=[device]), b.device_class(selectors=[]), template)
    assert devices(decide(plain, pod)["n1"]) == ["gpu-0"]


@pytest.mark.parametrize(
    ("selectable", "words"),
    [
        (0, "no device on this node matches"),
        (1, "only 1 device on this node matches"),
        (2, "only 2 devices on this node match"),
    ],
)
def test_a_count_shortfall_reads_as_english(selectable: int, words: str) -> None:
    """The per-node reason of a request for more devices than the node has: the verb agrees with the count."""
    from extender.decisions.devices.explain import count_shortfall
    from extender.state.dra.claims import DeviceSubRequest

    sub = DeviceSubRequest("gpu", "gpu.example.com", (), "ExactCount", 4, False, ())
    refusal = count_shortfall("node-a", "claim gpu", "gpu", sub, selectable, selectable)
    assert refusal.detail.endswith(f"needs 4 devices of class gpu.example.com; {words}"), refusal.detail


def test_a_pod_without_claims_fits_every_known_node_as_the_allocator_answers_each() -> None:
    """A pod of a LocalQueue with no claim has nothing to allocate: device_outcomes answers every known node as
    allocator.allocate answers it (an empty allocation) without asking the allocator per node, and an unknown node
    is refused as before. Full nodes, tainted devices and pools do not matter to such a pod."""
    from extender.decisions.devices.allocator import allocate
    from extender.decisions.devices.feasibility import device_outcomes, unknown_node
    from extender.decisions.devices.pod_claims import resolve_pod_claims
    from extender.decisions.devices.results import Allocation, NodeQuestion
    from extender.decisions.devices.selection import DeviceMatcher
    from extender.state.core import parse_pod

    store = cluster(b.device_class("gpu"), b.node("n1"), b.gpu_slice("n1", 2), b.node("n2"), b.node("n3"))
    snapshot = store.snapshot()
    pod = parse_pod(b.pod("p", "ns", queue="team-a"))
    matcher = DeviceMatcher()
    asked = ["n1", "n2", "gone", "n3"]
    found = device_outcomes(snapshot, resolve_pod_claims(snapshot, pod), asked, matcher).by_node(asked)
    for name in ("n1", "n2", "n3"):
        question = NodeQuestion(
            snapshot.nodes[name], snapshot.node_devices(name), snapshot.allocated, snapshot.device_classes, {}
        )
        expected = allocate(question, [], [], matcher)
        got = found[name]
        assert isinstance(got, Allocation) and isinstance(expected, Allocation)
        # the same allocation; device_outcomes also says its class counts (none), which quota reads without a count
        assert (got.node, got.claims, got.class_counts()) == (expected.node, expected.claims, expected.class_counts())
        assert got.known_class_counts == ()
    assert found["gone"] == unknown_node("gone")
    known = ["n3", "n1", "n2"]  # every node known: the answers made at once, in the order asked
    every = device_outcomes(snapshot, resolve_pod_claims(snapshot, pod), known, matcher)
    assert list(every.allocations) == known and not every.refusals
    assert every.allocations == {name: found[name] for name in known}


def test_a_claim_less_pods_allocations_are_interned_per_node_and_each_call_gets_its_own_map() -> None:
    """The empty allocations are kept per node name in the caller's caches (DecisionCaches.empty_allocations):
    a later call over some of the same nodes hands out the same objects, in the order asked, in a map of its own
    (the caller adds to it), and a memo cleared when full still answers every node."""
    from extender.decisions.caches import DecisionCaches
    from extender.decisions.devices.feasibility import device_outcomes
    from extender.decisions.devices.pod_claims import resolve_pod_claims
    from extender.decisions.devices.results import Allocation
    from extender.decisions.devices.selection import DeviceMatcher
    from extender.memo import BoundedMemo
    from extender.state.core import parse_pod

    store = cluster(*(b.node(f"n{index}") for index in range(6)))
    snapshot = store.snapshot()
    claims = resolve_pod_claims(snapshot, parse_pod(b.pod("p", "ns", queue="team-a")))
    caches = DecisionCaches()
    matcher = DeviceMatcher(caches)
    first = device_outcomes(snapshot, claims, ["n0", "n1", "n2"], matcher).allocations
    first["extra"] = Allocation("extra", ())  # the caller's own map
    later = device_outcomes(snapshot, claims, ["n2", "n0", "n3"], matcher).allocations
    assert list(later) == ["n2", "n0", "n3"]
    assert later["n2"] is first["n2"] and later["n0"] is first["n0"] and "extra" not in later
    assert all(allocation == Allocation(name, (), ()) for name, allocation in later.items())

    small = DeviceMatcher(DecisionCaches(empty_allocations=BoundedMemo("empty_allocations", 2)))
    for asked in (["n0", "n1", "n2", "n3"], ["n4", "n0"], ["n5", "n1", "n4", "n0"], ["n0", "n1"]):
        got = device_outcomes(snapshot, claims, asked, small).allocations
        assert got == {name: Allocation(name, (), ()) for name in asked} and list(got) == asked
    assert small.caches.empty_allocations.clears > 0
