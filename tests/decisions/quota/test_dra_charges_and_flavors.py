"""Kueue v0.19.2 quota semantics the extender follows per node.

Cases are our own, derived from upstream behaviour and tests:
- kube-scheduler 1.37 pkg/scheduler/framework/plugins/dynamicresources (extendeddynamicresources.go and its
  tests): which extended resource requests go to DRA, node allocatable, init containers;
- Kueue pkg/dra (extended_resources.go resolveQuotaKey, counters.go, capacity.go, mapper.go and their tests):
  what a DRA-backed extended resource, a counter source and a capacity source are charged;
- Kueue pkg/scheduler/flavorassigner (checkFlavorForPodSets, findFlavorForPodSets, shouldTryNextFlavor):
  flavors skipped for untolerated nodeTaints, resource groups walked independently, whenCanPreempt.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
import yaml

from extender.state.core import parse_node, parse_pod
from testkit import builders as b
from testkit.scenarios import RESOURCE, local_queue
from tests.support.scenarios import engine_for

CLASS = b.GPU_CLASS
DRIVER = b.DRIVER
GI = 1024**3


# --- builders local to these scenarios --------------------------------------------------------------------------


def extended_class(name: str = CLASS, extended_name: str | None = RESOURCE, created: str = "") -> dict[str, Any]:
    obj = b.device_class(name)
    if extended_name:
        obj["spec"]["extendedResourceName"] = extended_name
    if created:
        obj["metadata"]["creationTimestamp"] = created
    return obj


def cq(
    name: str,
    groups: list[tuple[list[str], list[tuple[str, dict[str, Any]]]]],
    *,
    fungibility: dict[str, str] | None = None,
    cohort: str | None = None,
) -> dict[str, Any]:
    """groups: [(covered resources, [(flavor, {resource: nominal})])]."""
    resource_groups = []
    for covered, flavors in groups:
        resource_groups.append(
            {
                "coveredResources": covered,
                "flavors": [
                    {"name": flavor, "resources": [{"name": r, "nominalQuota": quotas[r]} for r in covered]}
                    for flavor, quotas in flavors
                ],
            }
        )
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": resource_groups}
    if fungibility:
        spec["flavorFungibility"] = fungibility
    if cohort:
        spec["cohortName"] = cohort
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def rflavor(name: str, labels: dict[str, str] | None = None, taints=None, tolerations=None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if labels:
        spec["nodeLabels"] = labels
    if taints:
        spec["nodeTaints"] = taints
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def kueue_mappings(mappings: list[dict[str, Any]]) -> dict[str, Any]:
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "resources": {"deviceClassMappings": mappings},
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
        "data": {"controller_manager_config.yaml": yaml.safe_dump(config)},
    }


def gpu_node(name: str, gpus: int = 2, labels=None, taints=None, allocatable=None) -> list[dict[str, Any]]:
    node = b.node(name, labels)
    if taints:
        node["spec"] = {"taints": taints}
    if allocatable:
        node["status"]["allocatable"] = allocatable
    return [node, b.gpu_slice(name, gpus)]


def extended_pod(name: str, resources: dict[str, int], *, init=None, queue: str | None = "q", **extra) -> dict:
    obj = b.pod(name, "team-a", queue=queue, **extra)
    obj["spec"]["resourceClaims"] = []
    obj["spec"]["containers"][0]["resources"] = {"limits": {k: str(v) for k, v in resources.items()}}
    if init:
        obj["spec"]["initContainers"] = init
    return obj


def base(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [b.namespace("team-a"), local_queue("team-a", "team-a"), *extra]


def run(engine, pod_obj, nodes=None):
    pod = parse_pod(pod_obj)
    return engine.filter(pod, nodes or sorted(engine.snapshot().nodes))


# --- 1. extended resources backed by DRA ------------------------------------------------------------------------


def test_extended_resource_pods_stop_at_the_quota_explicit_name():
    """Three pods asking for 1 example.com/gpu each against a quota of 2: the third is refused, although without a
    claim it goes by the fast path."""
    engine = engine_for(
        base(
            extended_class(),
            rflavor("default"),
            *gpu_node("n1", 4),
            cq("team-a", [([RESOURCE], [("default", {RESOURCE: 2})])]),
        )
    )
    first = run(engine, extended_pod("p1", {RESOURCE: 1}))
    assert not first.fast_path
    assert first.passed == ["n1"]
    assert first.reservation == {("team-a", "default", RESOURCE): Fraction(1)}
    assert run(engine, extended_pod("p2", {RESOURCE: 1})).passed == ["n1"]
    third = run(engine, extended_pod("p3", {RESOURCE: 1}))
    assert third.passed == []
    verdict = third.verdicts["n1"]
    assert verdict.category == "quota-exhausted" and not verdict.unresolvable
    assert f"quota exhausted for {RESOURCE}" in verdict.reason


def test_implicit_extended_resource_name_is_charged_under_that_name():
    implicit = f"deviceclass.resource.kubernetes.io/{CLASS}"
    engine = engine_for(
        base(
            extended_class(extended_name=None),
            rflavor("default"),
            *gpu_node("n1", 4),
            cq("team-a", [([implicit], [("default", {implicit: 1})])]),
        )
    )
    first = run(engine, extended_pod("p1", {implicit: 1}))
    assert first.passed == ["n1"]
    assert first.reservation == {("team-a", "default", implicit): Fraction(1)}
    allocation = first.verdicts["n1"].allocation
    assert allocation is not None and allocation.claims[0].claim.label == f"extended resources (1 {implicit})"
    assert run(engine, extended_pod("p2", {implicit: 1})).passed == []


def test_extended_resource_is_charged_through_the_class_mapping():
    """resolveQuotaKey: a mapped class charges the mapping's name, not the extended resource name."""
    engine = engine_for(
        base(
            extended_class(),
            kueue_mappings([{"name": "gpus", "deviceClassNames": [CLASS]}]),
            rflavor("default"),
            *gpu_node("n1", 4),
            cq("team-a", [(["gpus"], [("default", {"gpus": 4})])]),
        )
    )
    decision = run(engine, extended_pod("p1", {RESOURCE: 3}))
    assert decision.reservation == {("team-a", "default", "gpus"): Fraction(3)}


def test_extended_resource_with_counter_mapping_is_refused_naming_the_mapping():
    engine = engine_for(
        base(
            extended_class(),
            kueue_mappings(
                [
                    {
                        "name": "gpu-memory",
                        "deviceClassNames": [CLASS],
                        "sources": [{"counter": {"name": "memory", "driver": DRIVER, "deviceSelector": {}}}],
                    }
                ]
            ),
            rflavor("default"),
            *gpu_node("n1", 4),
            cq("team-a", [(["gpu-memory"], [("default", {"gpu-memory": "80Gi"})])]),
        )
    )
    verdict = run(engine, extended_pod("p1", {RESOURCE: 1})).verdicts["n1"]
    assert not verdict.passed and verdict.unresolvable
    assert "deviceClassMapping gpu-memory has counter sources" in verdict.reason


def test_node_advertising_the_resource_serves_it_without_dra_but_quota_still_charges():
    """filterExtendedResources: allocatable on the node means a device plugin; no claim there."""
    engine = engine_for(
        base(
            extended_class(),
            rflavor("default"),
            *gpu_node("plugin", 0, allocatable={RESOURCE: "4"}),
            *gpu_node("dra", 1),
            cq("team-a", [([RESOURCE], [("default", {RESOURCE: 8})])]),
        )
    )
    decision = run(engine, extended_pod("p1", {RESOURCE: 2}))
    plugin = decision.verdicts["plugin"]
    assert plugin.passed and plugin.allocation is not None and plugin.allocation.claims == ()
    assert plugin.quota is not None and plugin.quota.charges == {("team-a", "default", RESOURCE): Fraction(2)}
    dra = decision.verdicts["dra"]
    assert not dra.passed and dra.unresolvable and dra.category == "no-matching-devices"


def test_extended_requests_sum_init_containers_as_the_scheduler_does():
    """PodRequests: max(sum of regular + sidecars, each plain init container + sidecars started before it)."""
    spec = {
        "initContainers": [
            {"name": "side", "restartPolicy": "Always", "resources": {"limits": {RESOURCE: "1"}}},
            {"name": "init", "resources": {"requests": {RESOURCE: "2"}, "limits": {RESOURCE: "2"}}},
        ],
        "containers": [{"name": "main", "resources": {"limits": {RESOURCE: "1", "cpu": "1"}}}],
    }
    pod = parse_pod({"metadata": {"name": "p", "namespace": "a"}, "spec": spec})
    assert pod.extended_requests == {RESOURCE: Fraction(3)}
    plain = {
        "initContainers": [{"name": "i", "resources": {"limits": {RESOURCE: "4"}}}],
        "containers": spec["containers"],
    }
    assert parse_pod({"metadata": {"name": "p"}, "spec": plain}).extended_requests == {RESOURCE: Fraction(4)}


def test_native_and_requests_prefixed_names_are_not_extended():
    spec = {
        "containers": [
            {"name": "c", "resources": {"limits": {"cpu": "1", "hugepages-2Mi": "1", "x.kubernetes.io/y": "1"}}}
        ]
    }
    assert parse_pod({"metadata": {"name": "p"}, "spec": spec}).extended_requests == {}


def test_extended_resource_named_by_two_classes_is_a_clear_reason():
    engine = engine_for(
        base(
            extended_class("a.example.com", created="2026-01-01T00:00:00Z"),
            extended_class("b.example.com", created="2026-02-01T00:00:00Z"),
            rflavor("default"),
            *gpu_node("n1", 4),
            cq("team-a", [([RESOURCE], [("default", {RESOURCE: 2})])]),
        )
    )
    verdict = run(engine, extended_pod("p1", {RESOURCE: 1})).verdicts["n1"]
    assert not verdict.passed and verdict.unresolvable
    assert "a.example.com, b.example.com" in verdict.reason and "b.example.com, the newest" in verdict.reason


def test_extended_resource_pod_without_queue_is_still_device_checked():
    engine = engine_for(base(extended_class(), *gpu_node("small", 1), *gpu_node("big", 4)))
    decision = run(engine, extended_pod("p", {RESOURCE: 2}, queue=None))
    assert not decision.fast_path
    assert decision.passed == ["big"]
    assert decision.verdicts["small"].unresolvable


def test_usage_comes_from_the_claim_the_scheduler_created():
    """A bound pod's extendedResourceClaimStatus names the claim (annotated, owned by the pod): its devices are
    usage, so a new pod meets the quota without any reservation."""
    bound = extended_pod("bound", {RESOURCE: 2}, node_name="n1")
    bound["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "bound-extended-resources-x",
        "requestMappings": [{"containerName": "ctr", "resourceName": RESOURCE, "requestName": "container-0-request-0"}],
    }
    claim = b.claim(
        "bound-extended-resources-x",
        "team-a",
        [b.exact_request("container-0-request-0", 2)],
        allocated=[("container-0-request-0", "n1", "gpu-0"), ("container-0-request-0", "n1", "gpu-1")],
        reserved_for=[("bound", "uid-team-a-bound")],
        owner_uid="uid-team-a-bound",
    )
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    engine = engine_for(
        base(
            extended_class(),
            rflavor("default"),
            *gpu_node("n1", 4),
            cq("team-a", [([RESOURCE], [("default", {RESOURCE: 3})])]),
            bound,
            claim,
        )
    )
    view = engine.quota_view()
    assert view.usage == {("team-a", "default", RESOURCE): Fraction(2)}
    decision = run(engine, extended_pod("p2", {RESOURCE: 2}))
    assert decision.passed == [] and "available 1" in decision.verdicts["n1"].reason
    assert run(engine, extended_pod("p3", {RESOURCE: 1})).passed == ["n1"]


# --- 2. counter and capacity sources ----------------------------------------------------------------------------


def mig_slice(node: str) -> dict[str, Any]:
    """A MIG-shaped GPU: 40Gi of memory shared by partitions of 10Gi (1g) and 20Gi (2g)."""

    def mig(name: str, profile: str, memory: str) -> dict[str, Any]:
        return {
            "name": name,
            "attributes": {"profile": {"string": profile}},
            "capacity": {"memory": {"value": memory}},
            "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": memory}}}],
        }

    return b.gpu_slice(
        node,
        devices=[mig("gpu-0-1g-0", "1g", "10Gi"), mig("gpu-0-1g-1", "1g", "10Gi"), mig("gpu-0-2g-0", "2g", "20Gi")],
        shared_counters=[{"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}],
    )


def counter_mapping(counter: str = "memory", selector: str = "") -> dict[str, Any]:
    source: dict[str, Any] = {"name": counter, "driver": DRIVER, "deviceSelector": {}}
    if selector:
        source["deviceSelector"] = {"cel": {"expression": selector}}
    return kueue_mappings([{"name": "gpu-memory", "deviceClassNames": [CLASS], "sources": [{"counter": source}]}])


def mig_objects(quota: str, mapping: dict[str, Any]) -> list[dict[str, Any]]:
    return base(
        b.device_class(),
        mapping,
        rflavor("default"),
        b.node("n1"),
        mig_slice("n1"),
        cq("team-a", [(["gpu-memory"], [("default", {"gpu-memory": quota})])]),
        b.claim_template(
            "small",
            "team-a",
            [b.exact_request("gpu", 1, selectors=["device.attributes['gpu.example.com'].profile == '1g'"])],
        ),
        b.claim_template(
            "big",
            "team-a",
            [b.exact_request("gpu", 1, selectors=["device.attributes['gpu.example.com'].profile == '2g'"])],
        ),
    )


def test_counter_mapping_charges_the_counters_the_chosen_device_consumes():
    engine = engine_for(mig_objects("30Gi", counter_mapping()))
    small = run(engine, b.pod("s", "team-a", templates={"gpu": "small"}, queue="q"))
    assert small.reservation == {("team-a", "default", "gpu-memory"): Fraction(10 * GI)}
    big = run(engine, b.pod("b", "team-a", templates={"gpu": "big"}, queue="q"))
    assert big.reservation == {("team-a", "default", "gpu-memory"): Fraction(20 * GI)}
    # 30Gi reserved of 30Gi: a further 1g partition exists on the node but the counter quota is spent.
    third = run(engine, b.pod("s2", "team-a", templates={"gpu": "small"}, queue="q"))
    assert third.passed == [] and "quota exhausted for gpu-memory" in third.verdicts["n1"].reason


def test_counter_nobody_publishes_is_a_reason_naming_the_mapping():
    engine = engine_for(mig_objects("30Gi", counter_mapping(counter="sm")))
    verdict = run(engine, b.pod("s", "team-a", templates={"gpu": "small"}, queue="q")).verdicts["n1"]
    assert not verdict.passed and verdict.unresolvable
    assert "deviceClassMapping gpu-memory" in verdict.reason and "publishes no counter sm" in verdict.reason


def test_counter_source_selector_that_selects_no_chosen_device_is_a_reason():
    engine = engine_for(
        mig_objects("30Gi", counter_mapping(selector="device.attributes['gpu.example.com'].profile == '7g'"))
    )
    verdict = run(engine, b.pod("s", "team-a", templates={"gpu": "small"}, queue="q")).verdicts["n1"]
    assert not verdict.passed and "no counter source accounts for device" in verdict.reason


def test_counter_usage_is_what_allocated_claims_consume():
    claim = b.claim(
        "held",
        "team-a",
        [b.exact_request("gpu", 1)],
        allocated=[("gpu", "n1", "gpu-0-2g-0")],
        reserved_for=[("holder", "uid-team-a-holder")],
    )
    holder = b.pod("holder", "team-a", claims={"gpu": "held"}, queue="q", node_name="n1")
    engine = engine_for([*mig_objects("30Gi", counter_mapping()), claim, holder])
    assert engine.quota_view().usage == {("team-a", "default", "gpu-memory"): Fraction(20 * GI)}
    assert run(engine, b.pod("s", "team-a", templates={"gpu": "small"}, queue="q")).passed == ["n1"]
    assert run(engine, b.pod("b2", "team-a", templates={"gpu": "small"}, queue="q")).passed == []


def test_capacity_mapping_charges_the_device_capacity_taken_whole():
    mapping = kueue_mappings(
        [
            {
                "name": "gpu-memory",
                "deviceClassNames": [CLASS],
                "sources": [{"capacity": {"name": f"{DRIVER}/memory", "driver": DRIVER, "deviceSelector": {}}}],
            }
        ]
    )
    engine = engine_for(
        base(
            b.device_class(),
            mapping,
            rflavor("default"),
            *gpu_node("n1", 4),
            cq("team-a", [(["gpu-memory"], [("default", {"gpu-memory": "160Gi"})])]),
            b.claim_template("two", "team-a", [b.exact_request("gpu", 2)]),
        )
    )
    first = run(engine, b.pod("p", "team-a", templates={"gpu": "two"}, queue="q"))
    assert first.reservation == {("team-a", "default", "gpu-memory"): Fraction(160 * GI)}
    assert run(engine, b.pod("p2", "team-a", templates={"gpu": "two"}, queue="q")).passed == []


def test_capacity_name_nobody_publishes_is_a_reason_naming_the_mapping():
    mapping = kueue_mappings(
        [
            {
                "name": "gpu-bw",
                "deviceClassNames": [CLASS],
                "sources": [{"capacity": {"name": f"{DRIVER}/bandwidth", "driver": DRIVER, "deviceSelector": {}}}],
            }
        ]
    )
    engine = engine_for(
        base(
            b.device_class(),
            mapping,
            rflavor("default"),
            *gpu_node("n1", 4),
            cq("team-a", [(["gpu-bw"], [("default", {"gpu-bw": "10"})])]),
            b.claim_template("one", "team-a", [b.exact_request("gpu", 1)]),
        )
    )
    verdict = run(engine, b.pod("p", "team-a", templates={"gpu": "one"}, queue="q")).verdicts["n1"]
    assert not verdict.passed and "deviceClassMapping gpu-bw" in verdict.reason
    assert f"publishes no capacity {DRIVER}/bandwidth" in verdict.reason


# --- 3. flavor assignment ---------------------------------------------------------------------------------------

SPOT_TAINT = {"key": "spot", "value": "true", "effect": "NoSchedule"}
SPOT_TOLERATION = {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def tainted_objects(*, flavor_tolerations=None) -> list[dict[str, Any]]:
    return base(
        b.device_class(),
        kueue_mappings([{"name": RESOURCE, "deviceClassNames": [CLASS]}]),
        # The tainted flavor has no labels: it holds exactly the nodes carrying its taint.
        rflavor("spot", taints=[SPOT_TAINT], tolerations=flavor_tolerations),
        rflavor("on-demand", {"tier": "od"}),
        *gpu_node("spot-1", 4, taints=[SPOT_TAINT]),
        *gpu_node("od-1", 4, labels={"tier": "od"}),
        cq("team-a", [([RESOURCE], [("spot", {RESOURCE: 8}), ("on-demand", {RESOURCE: 8})])]),
        b.claim_template("one", "team-a", [b.exact_request("gpu", 1)]),
    )


def tolerating_pod(name: str, tolerations=None) -> dict[str, Any]:
    obj = b.pod(name, "team-a", templates={"gpu": "one"}, queue="q")
    if tolerations:
        obj["spec"]["tolerations"] = tolerations
    return obj


def test_tainted_flavor_is_skipped_by_a_pod_without_the_toleration():
    engine = engine_for(tainted_objects())
    decision = run(engine, tolerating_pod("p"))
    assert decision.passed == ["od-1"]
    assert decision.quota.chosen_flavor == "on-demand"
    spot = decision.verdicts["spot-1"]
    assert spot.unresolvable and "untolerated taint spot=true:NoSchedule in flavor spot" in spot.reason


def test_tainted_flavor_is_used_by_a_pod_with_the_toleration():
    engine = engine_for(tainted_objects())
    decision = run(engine, tolerating_pod("p", [SPOT_TOLERATION]))
    assert decision.passed == ["spot-1"]
    assert decision.quota.chosen_flavor == "spot"
    assert decision.verdicts["od-1"].category == "other-flavor" and not decision.verdicts["od-1"].unresolvable


def test_flavor_tolerations_count_as_the_pods():
    """checkFlavorForPodSets appends flavor.spec.tolerations to the pod's (Kueue adds them at admission)."""
    engine = engine_for(tainted_objects(flavor_tolerations=[SPOT_TOLERATION]))
    assert run(engine, tolerating_pod("p")).passed == ["spot-1"]


def test_node_taints_and_flavor_membership_parse():
    node = parse_node(
        {"metadata": {"name": "n"}, "spec": {"taints": [SPOT_TAINT]}, "status": {"allocatable": {RESOURCE: "2"}}}
    )
    assert node.taints[0].key == "spot" and node.allocatable == {RESOURCE: Fraction(2)}


def test_node_in_two_flavors_is_eligible_in_the_later_one():
    """Overlapping flavors: the first flavor's quota is spent, the second (label-less) also holds the node."""
    engine = engine_for(
        base(
            b.device_class(),
            kueue_mappings([{"name": RESOURCE, "deviceClassNames": [CLASS]}]),
            rflavor("reserved", {"tier": "od"}),
            rflavor("anywhere"),
            *gpu_node("od-1", 4, labels={"tier": "od"}),
            cq("team-a", [([RESOURCE], [("reserved", {RESOURCE: 0}), ("anywhere", {RESOURCE: 4})])]),
            b.claim_template("one", "team-a", [b.exact_request("gpu", 1)]),
        )
    )
    decision = run(engine, tolerating_pod("p"))
    assert decision.passed == ["od-1"]
    assert decision.reservation == {("team-a", "anywhere", RESOURCE): Fraction(1)}


def test_each_resource_group_walks_its_flavors_independently():
    """A device resource in a second group: its flavor is chosen by its own walk, and a node must be in the
    chosen flavor of every group it is charged in."""
    nic_class = b.device_class("nic.example.com", ["device.attributes['gpu.example.com'].model == 'NIC'"])
    objects = base(
        b.device_class(selectors=["device.attributes['gpu.example.com'].model != 'NIC'"]),
        nic_class,
        kueue_mappings(
            [
                {"name": RESOURCE, "deviceClassNames": [CLASS]},
                {"name": "example.com/nic", "deviceClassNames": ["nic.example.com"]},
            ]
        ),
        rflavor("zone-a", {"zone": "a"}),
        rflavor("zone-b", {"zone": "b"}),
        rflavor("nic-a", {"zone": "a"}),
        rflavor("nic-b", {"zone": "b"}),
        cq(
            "team-a",
            [
                ([RESOURCE], [("zone-a", {RESOURCE: 8}), ("zone-b", {RESOURCE: 8})]),
                (["example.com/nic"], [("nic-b", {"example.com/nic": 8}), ("nic-a", {"example.com/nic": 0})]),
            ],
        ),
        b.claim_template(
            "both",
            "team-a",
            [b.exact_request("gpu", 1), b.exact_request("nic", 1, device_class_name="nic.example.com")],
        ),
    )
    for name, zone in (("a-1", "a"), ("b-1", "b")):
        objects.append(b.node(name, {"zone": zone}))
        devices = [b.gpu_device(0, node_name=name), b.gpu_device(1, node_name=name, model="NIC", name="nic-0")]
        objects.append(b.gpu_slice(name, devices=devices))
    engine = engine_for(objects)
    decision = run(engine, b.pod("p", "team-a", templates={"g": "both"}, queue="q"))
    # GPUs walk to zone-a first, NICs to nic-b (zone b): no node is in both, so none passes; the old code
    # judged only the first group's order and passed nodes of two flavors.
    assert decision.passed == []
    assert decision.quota.chosen_flavor == "zone-a,nic-b"
    assert "assigned flavor nic-b" in decision.verdicts["a-1"].reason
    assert "assigned flavor zone-a" in decision.verdicts["b-1"].reason


def preempt_objects(policy: str, within_queue: str = "LowerPriority") -> list[dict[str, Any]]:
    """Flavor first full (a priority-0 holder in the same queue), second empty; the queue may preempt within
    itself by `within_queue`."""
    holder = b.pod("holder", "team-a", claims={"gpu": "held"}, queue="q", node_name="a-1")
    held = b.claim(
        "held",
        "team-a",
        [b.exact_request("gpu", 2)],
        allocated=[("gpu", "a-1", "gpu-0"), ("gpu", "a-1", "gpu-1")],
        reserved_for=[("holder", "uid-team-a-holder")],
    )
    return base(
        b.device_class(),
        kueue_mappings([{"name": RESOURCE, "deviceClassNames": [CLASS]}]),
        rflavor("first", {"zone": "a"}),
        rflavor("second", {"zone": "b"}),
        *gpu_node("a-1", 4, labels={"zone": "a"}),
        *gpu_node("b-1", 4, labels={"zone": "b"}),
        with_preemption(
            cq(
                "team-a",
                [([RESOURCE], [("first", {RESOURCE: 2}), ("second", {RESOURCE: 2})])],
                fungibility={"whenCanPreempt": policy},
            ),
            {"withinClusterQueue": within_queue},
        ),
        b.claim_template("one", "team-a", [b.exact_request("gpu", 1)]),
        holder,
        held,
    )


def with_preemption(queue: dict[str, Any], preemption: dict[str, Any]) -> dict[str, Any]:
    queue["spec"]["preemption"] = preemption
    return queue


def prioritised(pod_obj: dict[str, Any], priority: int) -> dict[str, Any]:
    pod_obj["spec"]["priority"] = priority
    return pod_obj


def test_when_can_preempt_try_next_flavor_moves_on():
    engine = engine_for(preempt_objects("TryNextFlavor"))
    decision = run(engine, tolerating_pod("p"))
    assert decision.passed == ["b-1"] and decision.quota.chosen_flavor == "second"


def test_when_can_preempt_may_stop_search_stops_at_the_preemptible_flavor():
    """Kueue stops at the first flavor where preemption would make room; the extender cannot preempt, so the
    pod waits (resolvable) instead of going to the second flavor."""
    engine = engine_for(preempt_objects("MayStopSearch"))
    decision = run(engine, prioritised(tolerating_pod("p"), 100))
    assert decision.passed == []
    assert decision.quota.chosen_flavor == "first"
    assert not decision.verdicts["a-1"].unresolvable and decision.verdicts["a-1"].category == "quota-exhausted"
    # every node says the same: the flavor, whom Kueue would preempt, and that the extender evicts nothing
    reason = decision.verdicts["b-1"].reason
    assert reason == decision.verdicts["a-1"].reason
    assert "in flavor first" in reason and "Pod team-a/holder (ClusterQueue team-a, priority 0)" in reason
    assert "the extender never evicts" in reason


def test_when_can_preempt_may_stop_search_moves_on_when_nobody_may_be_preempted():
    """The same queue, but the holder has the pod's own priority (LowerPriority finds no candidate): Kueue's
    oracle answers NoCandidates, which tries the next flavor whatever whenCanPreempt says."""
    engine = engine_for(preempt_objects("MayStopSearch"))
    decision = run(engine, tolerating_pod("p"))
    assert decision.passed == ["b-1"] and decision.quota.chosen_flavor == "second"


@pytest.mark.parametrize("borrow_policy, expected", [("MayStopSearch", "first"), ("TryNextFlavor", "second")])
def test_when_can_borrow(borrow_policy: str, expected: str):
    objects = [
        *base(
            b.device_class(),
            kueue_mappings([{"name": RESOURCE, "deviceClassNames": [CLASS]}]),
            rflavor("first", {"zone": "a"}),
            rflavor("second", {"zone": "b"}),
            *gpu_node("a-1", 4, labels={"zone": "a"}),
            *gpu_node("b-1", 4, labels={"zone": "b"}),
            cq(
                "team-a",
                [([RESOURCE], [("first", {RESOURCE: 0}), ("second", {RESOURCE: 2})])],
                fungibility={"whenCanBorrow": borrow_policy},
                cohort="pool",
            ),
            cq("lender", [([RESOURCE], [("first", {RESOURCE: 4}), ("second", {RESOURCE: 0})])], cohort="pool"),
            b.claim_template("one", "team-a", [b.exact_request("gpu", 1)]),
        )
    ]
    decision = run(engine_for(objects), tolerating_pod("p"))
    assert decision.quota.chosen_flavor == expected


def test_a_node_taint_or_allocatable_change_reaches_the_snapshot():
    """The store skips Node heartbeats; a taint or an allocatable change is not one (flavor membership and the
    extended-resource split read them)."""
    from extender.state.store import ClusterStore

    store = ClusterStore()
    raw = b.node("n1")
    store.apply("Node", "ADDED", raw)
    first = store.snapshot().nodes["n1"]
    store.apply("Node", "MODIFIED", {**raw, "spec": {"taints": [SPOT_TAINT]}})
    tainted = store.snapshot().nodes["n1"]
    assert tainted is not first and tainted.taints[0].key == "spot"
    store.apply(
        "Node", "MODIFIED", {**raw, "spec": {"taints": [SPOT_TAINT]}, "status": {"allocatable": {RESOURCE: "1"}}}
    )
    assert store.snapshot().nodes["n1"].allocatable == {RESOURCE: Fraction(1)}


@pytest.mark.parametrize("templates", [{"a": "one", "b": "one"}, {"a": "pair"}])
def test_requests_that_never_fit_the_node_together_are_unresolvable(templates: dict[str, str]):
    """Two devices asked (two claims, or two requests of one claim), the node has one: no preemption can help,
    so kube-scheduler must not be told to retry (it was a resolvable 'devices in use')."""
    engine = engine_for(
        [
            b.namespace("team-a"),
            b.device_class(),
            *gpu_node("n1", 1),
            *gpu_node("n2", 2),
            b.claim_template("one", "team-a", [b.exact_request("gpu", 1)]),
            b.claim_template("pair", "team-a", [b.exact_request("g1", 1), b.exact_request("g2", 1)]),
        ]
    )
    decision = run(engine, b.pod("p", "team-a", templates=templates))
    assert decision.passed == ["n2"]
    verdict = decision.verdicts["n1"]
    assert verdict.unresolvable and verdict.category == "no-matching-devices"
    assert "need 2 distinct devices together; 1 on this node" in verdict.detail


def test_device_plugin_served_extended_resource_of_a_bound_pod_is_usage():
    """On a node advertising example.com/gpu (a device plugin), no claim holds the devices; Kueue charges them
    all the same, so they are usage."""
    bound = extended_pod("bound", {RESOURCE: 2}, node_name="plugin")
    engine = engine_for(
        base(
            extended_class(),
            rflavor("default"),
            *gpu_node("plugin", 0, allocatable={RESOURCE: "4"}),
            cq("team-a", [([RESOURCE], [("default", {RESOURCE: 3})])]),
            bound,
        )
    )
    assert engine.quota_view().usage == {("team-a", "default", RESOURCE): Fraction(2)}
    assert run(engine, extended_pod("p2", {RESOURCE: 2})).passed == []


def capacity_objects(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    mapping = kueue_mappings(
        [
            {
                "name": "gpu-memory",
                "deviceClassNames": [CLASS],
                "sources": [{"capacity": {"name": f"{DRIVER}/memory", "driver": DRIVER, "deviceSelector": {}}}],
            }
        ]
    )
    return base(
        b.device_class(),
        mapping,
        rflavor("default"),
        *gpu_node("n1", 4),
        cq("team-a", [(["gpu-memory"], [("default", {"gpu-memory": "400Gi"})])]),
        *extra,
    )


def test_capacity_usage_reads_consumed_capacity_of_the_allocation_result():
    """A shared (consumable-capacity) device: the allocation result says what this claim consumed; that, not
    the device's whole capacity, is the usage."""
    claim = b.claim(
        "shared",
        "team-a",
        [b.exact_request("gpu", 1)],
        allocated=[("gpu", "n1", "gpu-0")],
        reserved_for=[("holder", "uid-team-a-holder")],
    )
    claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {"memory": "10Gi"}
    holder = b.pod("holder", "team-a", claims={"gpu": "shared"}, queue="q", node_name="n1")
    engine = engine_for(capacity_objects(claim, holder))
    assert engine.quota_view().usage == {("team-a", "default", "gpu-memory"): Fraction(10 * GI)}


def test_a_class_feeding_two_counter_mappings_is_charged_in_both():
    """mapper.go: one DeviceClass may feed several mappings when each tracks a different counter."""

    def source(counter: str) -> dict[str, Any]:
        return {"counter": {"name": counter, "driver": DRIVER, "deviceSelector": {}}}

    mappings = kueue_mappings(
        [
            {"name": "gpu-memory", "deviceClassNames": [CLASS], "sources": [source("memory")]},
            {"name": "gpu-sm", "deviceClassNames": [CLASS], "sources": [source("sm")]},
        ]
    )
    device = {
        "name": "mig-0",
        "attributes": {},
        "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "10Gi"}, "sm": {"value": "14"}}}],
    }
    slice_obj = b.gpu_slice(
        "n1",
        devices=[device],
        shared_counters=[{"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}, "sm": {"value": "98"}}}],
    )
    engine = engine_for(
        base(
            b.device_class(),
            mappings,
            rflavor("default"),
            b.node("n1"),
            slice_obj,
            cq("team-a", [(["gpu-memory", "gpu-sm"], [("default", {"gpu-memory": "40Gi", "gpu-sm": 98})])]),
            b.claim_template("one", "team-a", [b.exact_request("gpu", 1)]),
        )
    )
    decision = run(engine, b.pod("p", "team-a", templates={"gpu": "one"}, queue="q"))
    assert decision.reservation == {
        ("team-a", "default", "gpu-memory"): Fraction(10 * GI),
        ("team-a", "default", "gpu-sm"): Fraction(14),
    }


# --- a share of a multi-allocatable device, count source --------------------------------------------------------


def test_a_share_of_a_multi_allocatable_device_is_charged_its_request_count_as_kueue_does():
    """Kueue v0.19.2 with no counter or capacity source (or KueueDRAIntegrationConsumableCapacity, alpha, off)
    charges a claim by count (pkg/dra/claims.go countDevicesPerClass: the sum of each ExactCount request's
    count), blind to capacity requests and to sharing. So a pod whose two requests of 10Gi share one GPU is
    charged 2, and another claim's share on the same device counts 1 in usage: ours, one per allocation result,
    is the same number."""
    shared_gpu = b.gpu_device(0)
    del shared_gpu["capacity"]["compute"]
    shared_gpu["allowMultipleAllocations"] = True

    def share(name: str) -> dict[str, Any]:
        request = b.exact_request(name)
        request["exactly"]["capacity"] = {"requests": {"memory": "10Gi"}}
        return request

    held = b.claim(
        "held",
        "team-a",
        [share("gpu")],
        allocated=[("gpu", "n1", "gpu-0")],
        reserved_for=[("holder", "uid-team-a-holder")],
    )
    result = held["status"]["allocation"]["devices"]["results"][0]
    result["shareID"] = "6bd28448-0000-4000-8000-998124f761d4"
    result["consumedCapacity"] = {"memory": "10Gi"}
    holder = b.pod("holder", "team-a", claims={"gpu": "held"}, queue="q", node_name="n1")
    engine = engine_for(
        base(
            b.device_class(),
            rflavor("default"),
            b.node("n1"),
            b.gpu_slice("n1", devices=[shared_gpu]),
            cq("team-a", [([CLASS], [("default", {CLASS: 3})])]),
            b.claim_template("two-shares", "team-a", [share("a"), share("b")]),
            held,
            holder,
        )
    )
    assert engine.quota_view().usage == {("team-a", "default", CLASS): Fraction(1)}
    outcome = run(engine, b.pod("p", "team-a", templates={"gpu": "two-shares"}, queue="q"))
    assert outcome.passed == ["n1"], outcome.verdicts
    assert outcome.reservation == {("team-a", "default", CLASS): Fraction(2)}
    # a third share would pass the device (80Gi) but not the quota: 1 held + 2 reserved + 1 > 3
    third = run(engine, b.pod("p2", "team-a", templates={"gpu": "two-shares"}, queue="q"))
    assert third.passed == [] and third.verdicts["n1"].category == "quota-exhausted", third.verdicts
