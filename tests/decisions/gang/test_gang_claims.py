"""A PodGroup's ResourceClaim is one claim for the whole group: charged once to the group's queue.

Upstream: resourceclaim.BindTo / IsReservedForPod (k8s.io/dynamic-resource-allocation@v0.37.2) reserve a group
claim for ``podgroups/<name>``; the resourceclaim controller records it in the PodGroup's status and in each
member's pod status (pkg/controller/resourceclaim handleClaim, findPodGroupResourceClaim).
"""

from __future__ import annotations

from typing import Any

from testkit import builders as b
from testkit.scenarios import RESOURCE
from tests.support.quota import base_objects, recount_usage
from tests.support.scenarios import engine_for

GPU = ("team-a", "on-demand", RESOURCE)


def group_claim(reserved: bool = True) -> dict[str, Any]:
    """The claim the controller made from the PodGroup's template: 2 GPUs of on-demand-0, reserved for it."""
    claim = b.claim(
        "train-gpu-abc",
        "team-a",
        [b.exact_request("gpu", 2)],
        allocated=[("gpu", "on-demand-0", "gpu-0"), ("gpu", "on-demand-0", "gpu-1")],
        allocated_node="on-demand-0",
    )
    return b.reserved_for_group(claim, "train", "uid-pg-team-a-train") if reserved else claim


def member(name: str, **extra: Any) -> dict[str, Any]:
    return b.pod(
        name,
        "team-a",
        templates={"gpu": "two"},
        claim_statuses={"gpu": "train-gpu-abc"},
        queue="q",
        pod_group="train",
        **extra,
    )


def usage_of(engine: Any) -> dict[Any, Any]:
    view = engine.quota_view()
    assert dict(view.usage) == recount_usage(engine)  # the index, event by event, agrees with a recount
    return dict(view.usage)


def test_a_group_claim_shared_by_three_pods_is_charged_once() -> None:
    group = b.pod_group("train", "team-a", min_count=3, claim_templates={"gpu": "two"})
    group["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "train-gpu-abc"}]}
    engine = engine_for([*base_objects({"on-demand": {"nominal": 6}}), group, group_claim()])
    for name in ("p3", "p1", "p2"):
        engine.store.apply("Pod", "ADDED", member(name, node_name="on-demand-0"))
        assert usage_of(engine) == {GPU: 2}


def test_the_charge_passes_on_as_members_come_and_go() -> None:
    engine = engine_for([*base_objects({"on-demand": {"nominal": 6}}), group_claim()])
    engine.store.apply("Pod", "ADDED", member("p2", nominated_node="on-demand-0"))
    # allocated and reserved for the group: it counts, on its own entry while no member is bound
    assert usage_of(engine) == {GPU: 2}
    engine.store.apply("Pod", "ADDED", member("p3", node_name="on-demand-0"))
    engine.store.apply("Pod", "ADDED", member("p1", node_name="on-demand-0"))
    assert usage_of(engine) == {GPU: 2}
    engine.store.apply("Pod", "MODIFIED", member("p1", node_name="on-demand-0", phase="Succeeded"))
    assert usage_of(engine) == {GPU: 2}  # p3 takes it over at once
    engine.store.apply("Pod", "DELETED", member("p3", node_name="on-demand-0"))
    assert usage_of(engine) == {GPU: 2}  # nobody bound holds it (p2 is only nominated): the claim itself does
    engine.store.apply("Pod", "MODIFIED", member("p2", node_name="on-demand-0"))
    assert usage_of(engine) == {GPU: 2}
    engine.store.apply("ResourceClaim", "DELETED", group_claim())  # the PodGroup deleted: the controller's turn
    assert usage_of(engine) == {}


def test_a_claim_the_podgroup_names_is_the_groups_before_it_is_reserved() -> None:
    group = b.pod_group("train", "team-a", min_count=2, claims={"gpu": "train-gpu-abc"})
    engine = engine_for([*base_objects({"on-demand": {"nominal": 6}}), group, group_claim(reserved=False)])
    for name in ("p1", "p2"):
        pod = b.pod(name, "team-a", claims={"gpu": "train-gpu-abc"}, queue="q", pod_group="train")
        pod["spec"]["nodeName"] = "on-demand-0"
        engine.store.apply("Pod", "ADDED", pod)
    assert usage_of(engine) == {GPU: 2}


def test_a_pod_claim_of_a_pod_outside_the_group_is_still_its_own() -> None:
    claim = group_claim()
    engine = engine_for([*base_objects({"on-demand": {"nominal": 6}}), claim])
    outsider = b.pod("solo", "team-a", claims={"gpu": "train-gpu-abc"}, queue="q", node_name="on-demand-0")
    engine.store.apply("Pod", "ADDED", outsider)
    # reserved for a PodGroup the pod is not in: the pod is no consumer, as the in-tree plugin decides
    assert usage_of(engine) == {}
