"""In-flight state rebuilt from the API: a restarted extender counts what is being bound.

Reservations are memory only. Between our filter and the claims showing an allocation, kube-scheduler (1.35+,
NominatedNodeNameForExpectation) writes status.nominatedNodeName on pods entering a binding cycle with PreBind
work; claims allocated and reserved for a pod not yet bound are counted too. A fresh service (the restart, or a
newly elected replica's extender) built from the same API objects must refuse what the old one would have.
"""

from __future__ import annotations

from typing import Any

from extender.state.core import parse_pod
from testkit import builders as b
from testkit.scenarios import gpu_pod
from tests.support.quota import ONE_QUEUE_KEY as KEY
from tests.support.quota import one_queue_objects as quota_objects
from tests.support.scenarios import engine_for

NODES = ["on-demand-0", "on-demand-1"]


def nominated(name: str, node: str, *, claim_name: str = "") -> list[dict[str, Any]]:
    """A pod in its binding cycle: generated claim exists, not allocated yet, the pod nominated for `node`."""
    claim_name = claim_name or f"{name}-gpu"
    pod = gpu_pod(name, template="two", claim_statuses={"gpu": claim_name})
    pod["status"]["nominatedNodeName"] = node
    claim = b.claim(claim_name, "team-a", [b.exact_request("gpu", 2)], owner_uid=pod["metadata"]["uid"])
    return [pod, claim]


def test_restarted_service_counts_a_nominated_pod_on_its_node() -> None:
    service = engine_for([*quota_objects(nominal=2), *nominated("first", NODES[0])])
    view = service.quota_view()
    assert view.provisional == {KEY: 2} and view.usage == {}, "the nominated pod's two GPUs are charged on its node"
    assert service.views.provisional_index.unbound()["team-a/first"].node == NODES[0]
    second = service.filter(parse_pod(gpu_pod("second", template="two")), NODES)
    assert not second.passed, "quota 2 is taken by the pod being bound"
    assert {v.category for v in second.verdicts.values()} == {"quota-exhausted"}


def test_a_nominated_pod_is_not_charged_against_itself() -> None:
    """A pod nominated by preemption is filtered again: its own counted usage must not refuse it."""
    service = engine_for([*quota_objects(nominal=2), *nominated("first", NODES[0])])
    pod = nominated("first", NODES[0])[0]
    assert service.filter(parse_pod(pod), NODES).passed == NODES


def test_pod_without_nomination_is_not_counted() -> None:
    pod, claim = nominated("first", NODES[0])
    del pod["status"]["nominatedNodeName"]
    service = engine_for([*quota_objects(nominal=2), pod, claim])
    view = service.quota_view()
    assert view.usage == {} and view.provisional == {}


def counted(service) -> dict:
    """Everything the quota ledger charges: usage, reservations, and placed pods' charges usage does not show."""
    view = service.quota_view()
    total: dict = {}
    for part in (view.usage, view.reserved, view.provisional):
        for key, amount in part.items():
            total[key] = total.get(key, 0) + amount
    return total


def test_reservation_turns_into_usage_once_nominated_and_is_never_counted_twice() -> None:
    service = engine_for(quota_objects(nominal=4))
    pod, claim = nominated("first", NODES[0])
    plain = gpu_pod("first", template="two", claim_statuses={"gpu": "first-gpu"})
    service.store.apply("ResourceClaim", "ADDED", claim)
    service.store.apply("Pod", "ADDED", plain)
    assert service.filter(parse_pod(plain), NODES).passed == NODES
    view = service.quota_view()
    assert view.reserved == {KEY: 2} and view.usage == {}
    service.store.apply("Pod", "MODIFIED", pod)  # kube-scheduler wrote nominatedNodeName
    view = service.quota_view()
    assert view.reserved == {KEY: 2} and view.provisional == {}, "the reservation covers it: not twice"
    assert counted(service) == {KEY: 2}
    # PreBind allocates and reserves the claim, then the binding shows: still two, never four.
    allocated = b.claim(
        "first-gpu",
        "team-a",
        [b.exact_request("gpu", 2)],
        owner_uid=pod["metadata"]["uid"],
        allocated=[("gpu", NODES[0], "gpu-0"), ("gpu", NODES[0], "gpu-1")],
        allocated_node=NODES[0],
        reserved_for=[("first", pod["metadata"]["uid"])],
    )
    service.store.apply("ResourceClaim", "MODIFIED", allocated)
    assert counted(service) == {KEY: 2}
    bound = gpu_pod("first", template="two", claim_statuses={"gpu": "first-gpu"}, node_name=NODES[0])
    service.store.apply("Pod", "MODIFIED", bound)
    view = service.quota_view()
    assert view.usage == {KEY: 2} and view.reserved == {} and view.provisional == {}
    assert service.released_reservations == {"bound": 1}


def test_claims_reserved_for_an_unbound_pod_are_counted_after_a_restart() -> None:
    """The PreBind half that already worked: allocation reserved for the pod, binding not visible yet."""
    pod = gpu_pod("first", template="two", claim_statuses={"gpu": "first-gpu"})
    claim = b.claim(
        "first-gpu",
        "team-a",
        [b.exact_request("gpu", 2)],
        owner_uid=pod["metadata"]["uid"],
        allocated=[("gpu", NODES[1], "gpu-0"), ("gpu", NODES[1], "gpu-1")],
        allocated_node=NODES[1],
        reserved_for=[("first", pod["metadata"]["uid"])],
    )
    service = engine_for([*quota_objects(nominal=2), pod, claim])
    assert service.quota_view().usage == {KEY: 2}
    assert not service.filter(parse_pod(gpu_pod("second", template="two")), NODES).passed


def test_a_nominated_pod_seen_bound_before_its_allocation_still_counts() -> None:
    """Pods and claims arrive on separate watches (and reconnect separately after a reset): the binding can show
    before the allocation PreBind wrote earlier. The pod must stay charged until the allocation shows: were the
    reservation let go at the nomination, the pod would count as nothing and the chaos test would over-commit
    here (7 devices against 6)."""
    service = engine_for(quota_objects(nominal=2))
    pod, claim = nominated("first", NODES[0])
    plain = gpu_pod("first", template="two", claim_statuses={"gpu": "first-gpu"})
    service.store.apply("ResourceClaim", "ADDED", claim)
    service.store.apply("Pod", "ADDED", plain)
    assert service.filter(parse_pod(plain), NODES).passed == NODES
    service.store.apply("Pod", "MODIFIED", pod)  # nominated
    assert counted(service) == {KEY: 2}
    bound = gpu_pod("first", template="two", claim_statuses={"gpu": "first-gpu"}, node_name=NODES[0])
    service.store.apply("Pod", "MODIFIED", bound)  # the claims watch has not delivered the allocation yet
    assert counted(service) == {KEY: 2}, "bound on its node: still charged while the allocation is not seen"
    second = service.filter(parse_pod(gpu_pod("second", template="two")), NODES)
    assert not second.passed
    allocated = b.claim(
        "first-gpu",
        "team-a",
        [b.exact_request("gpu", 2)],
        owner_uid=pod["metadata"]["uid"],
        allocated=[("gpu", NODES[0], "gpu-0"), ("gpu", NODES[0], "gpu-1")],
        allocated_node=NODES[0],
        reserved_for=[("first", pod["metadata"]["uid"])],
    )
    service.store.apply("ResourceClaim", "MODIFIED", allocated)
    assert counted(service) == {KEY: 2}, "never twice"
    assert service.quota_view().usage == {KEY: 2}


def test_a_restarted_service_counts_a_bound_pod_whose_claim_is_not_listed_allocated_yet() -> None:
    """Lists of pods and claims are taken at different moments: a pod bound in the pod list whose claim the
    claim list still shows unallocated is charged what its claims take on that node."""
    bound = gpu_pod("first", template="two", claim_statuses={"gpu": "first-gpu"}, node_name=NODES[1])
    claim = b.claim("first-gpu", "team-a", [b.exact_request("gpu", 2)], owner_uid=bound["metadata"]["uid"])
    service = engine_for([*quota_objects(nominal=2), bound, claim])
    assert service.quota_view().provisional == {KEY: 2}
    assert not service.filter(parse_pod(gpu_pod("second", template="two")), NODES).passed


def test_pending_charge_when_the_view_shows_the_node_full() -> None:
    """The view may still hold an allocation the API has released (a claim deleted, its event not delivered):
    the nominated pod's devices then look taken on its node. It is charged what its claims would take on the
    node alone, never nothing."""
    full = gpu_pod("old", template="four", node_name=NODES[0], claim_statuses={"gpu": "old-gpu"})
    old_claim = b.claim(
        "old-gpu",
        "team-a",
        [b.exact_request("gpu", 4)],
        owner_uid=full["metadata"]["uid"],
        allocated=[("gpu", NODES[0], f"gpu-{i}") for i in range(4)],
        allocated_node=NODES[0],
        reserved_for=[("old", full["metadata"]["uid"])],
    )
    objects = [*quota_objects(nominal=8), b.claim_template("four", "team-a", [b.exact_request("gpu", 4)])]
    service = engine_for([*objects, full, old_claim, *nominated("first", NODES[0])])
    view = service.quota_view()
    assert view.usage == {KEY: 4} and view.provisional == {KEY: 2}


def test_a_pod_deleted_before_the_next_reconcile_gives_its_quota_back_at_once() -> None:
    """A reservation is released as deleted only for a pod seen in the view; a pod the verdict's own view held is
    seen. Filtered, then deleted with no verb call in between: the next view frees its quota (not the TTL)."""
    service = engine_for(quota_objects(nominal=2))
    pod = gpu_pod("first", template="two")
    service.store.apply("Pod", "ADDED", pod)
    assert service.filter(parse_pod(pod), NODES).passed == NODES
    service.store.apply("Pod", "DELETED", pod)
    view = service.quota_view()
    assert view.reserved == {} and service.released_reservations == {"deleted": 1}
    assert service.filter(parse_pod(gpu_pod("second", template="two")), NODES).passed == NODES
