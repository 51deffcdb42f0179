"""Every allocated claim counts against one ClusterQueue, in one flavor, for as long as it is allocated.

decisions/quota/attribution.py claim_charge decides who carries an allocated claim's charge: a placed pod of the
claim's queue using it, or the claim's own usage entry when no such pod is left (kube-scheduler's Unreserve after
a failed binding takes the pod out of reservedFor and leaves the allocation; a shared claim's consumers
finished; a PodGroup keeps its claim with no member running). The queue and flavors come from the bookings
(state/bookings.py). Each test also checks that the usage index, event by event, agrees with a recount.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.service import SchedulingService
from extender.state.bookings import CLAIM, POD, Booking, BookingMemory
from extender.state.indexes.usage import PodUsage, UsageIndex
from extender.state.reservation_journal import ReservationJournal
from extender.state.snapshot import ClusterSnapshot
from extender.state.store import ClusterStore
from extender.transport.app import create_app
from testkit import builders as b
from testkit.scenarios import FLAVOR_LABEL, RESOURCE, cluster_queue, gpu_pod, local_queue
from tests.support.quota import base_objects, filter_pod, recount_usage
from tests.support.scenarios import engine_for

KEY = ("team-a", "on-demand", RESOURCE)
UID_P = "uid-team-a-p"


def usage(engine: SchedulingService) -> dict[Any, Any]:
    view = engine.quota_view()
    assert dict(view.usage) == recount_usage(engine)  # the index, event by event, agrees with a recount
    return dict(view.usage)


def generated_claim(reserved: bool, pod: str = "p", uid: str = UID_P, gpus: int = 2) -> dict[str, Any]:
    """The claim made from pod `pod`'s template entry "gpu", allocated on on-demand-0 (reserved for it or not)."""
    return b.claim(
        f"{pod}-gpu",
        "team-a",
        [b.exact_request("gpu", gpus)],
        allocated=[("gpu", "on-demand-0", f"gpu-{i}") for i in range(gpus)],
        allocated_node="on-demand-0",
        reserved_for=[(pod, uid)] if reserved else None,
        owner_uid=uid,
        owner_name=pod,
        pod_claim_name="gpu",
    )


def pending(name: str = "p", **extra: Any) -> dict[str, Any]:
    return gpu_pod(name, claim_statuses={"gpu": f"{name}-gpu"}, **extra)


# --- a pod retried after its binding failed --------------------------------------------------------------------


def test_a_pod_whose_binding_failed_keeps_its_claim_charged_and_takes_it_back_at_no_extra_charge() -> None:
    """Queue of 2 GPUs. p passed filter (booked), PreBind allocated its 2 GPUs reserved for it, the binding failed
    and Unreserve took it out of reservedFor: the claim still counts, so q is refused; p, retried, passes (its
    claim takes nothing new) and binding it changes nothing in usage."""
    engine = engine_for(base_objects({"on-demand": {"nominal": 2}}))
    engine.store.apply("Pod", "ADDED", gpu_pod("p"))
    assert filter_pod(engine, gpu_pod("p")).passed
    engine.store.apply("ResourceClaim", "ADDED", generated_claim(reserved=True))
    engine.store.apply("Pod", "MODIFIED", pending(nominated_node="on-demand-0"))
    assert usage(engine) == {KEY: 2}  # in PreBind: counted as in flight
    engine.store.apply("ResourceClaim", "MODIFIED", generated_claim(reserved=False))  # Unreserve
    engine.store.apply("Pod", "MODIFIED", pending())  # nominatedNodeName cleared
    assert usage(engine) == {KEY: 2}
    entries = engine.quota_view().claim_entries
    assert entries is not None
    [(claim_key, entry)] = entries()
    assert (claim_key, entry.cluster_queue, entry.pod, entry.carried) == ("team-a/p-gpu", "team-a", "team-a/p", False)

    refused = filter_pod(engine, gpu_pod("q"))
    assert refused.passed == [] and "quota exhausted" in refused.verdicts["on-demand-1"].reason

    retried = filter_pod(engine, pending())
    assert "on-demand-0" in retried.passed and not retried.reservation  # its devices are already counted
    engine.store.apply("ResourceClaim", "MODIFIED", generated_claim(reserved=True))
    engine.store.apply("Pod", "MODIFIED", pending(node_name="on-demand-0"))
    assert usage(engine) == {KEY: 2}
    assert not engine.quota_view().claim_entries()  # type: ignore[misc]  # p carries it now
    engine.store.apply("Pod", "DELETED", pending(node_name="on-demand-0"))
    assert usage(engine) == {KEY: 2}  # deleted, its claim not deallocated yet
    engine.store.apply("ResourceClaim", "DELETED", generated_claim(reserved=False))
    assert usage(engine) == {}


def test_the_claim_shows_in_the_drift_report() -> None:
    engine = engine_for([*base_objects({"on-demand": {"nominal": 2}}), pending(), generated_claim(reserved=False)])
    report = create_app(engine).test_client().get("/diagnostics/queues").get_json()
    [claim] = report["allocatedClaimsWithoutPod"]
    assert claim["claim"] == "team-a/p-gpu" and claim["clusterQueue"] == "team-a" and claim["follows"] == "team-a/p"
    assert claim["charges"] == [{"clusterQueue": "team-a", "flavor": "on-demand", "resource": RESOURCE, "amount": 2}]
    assert claim["carriedBy"] == "" and claim["problem"] == ""


# --- shared claims -----------------------------------------------------------------------------------------


def shared(reserved: list[tuple[str, str]]) -> dict[str, Any]:
    return b.claim(
        "shared",
        "team-a",
        [b.exact_request("gpu", 2)],
        allocated=[("gpu", "on-demand-0", "gpu-0"), ("gpu", "on-demand-0", "gpu-1")],
        allocated_node="on-demand-0",
        reserved_for=reserved,
    )


def consumer(name: str, queue: str = "q", **extra: Any) -> dict[str, Any]:
    return b.pod(name, "team-a", claims={"gpu": "shared"}, queue=queue, **extra)


def test_a_shared_claim_whose_consumers_are_gone_stays_charged_where_it_was_booked() -> None:
    """Charged through its first consumer while it runs; its consumer finished, then gone, then out of
    reservedFor (a failed binding of a new consumer leaves it so too): the claim's own entry keeps the charge in
    the queue it was first charged in, and a new consumer of that queue carries it again at no extra charge."""
    engine = engine_for(base_objects({"on-demand": {"nominal": 2}}))
    engine.store.apply("ResourceClaim", "ADDED", shared([("a", "uid-team-a-a")]))
    engine.store.apply("Pod", "ADDED", consumer("a", node_name="on-demand-0"))
    assert usage(engine) == {KEY: 2}
    assert engine.bookings.get(CLAIM, "uid-claim-team-a-shared") == Booking(
        "team-a", ((RESOURCE, "on-demand"),), "team-a/shared"
    )
    engine.store.apply("Pod", "MODIFIED", consumer("a", node_name="on-demand-0", phase="Succeeded"))
    assert usage(engine) == {KEY: 2}
    engine.store.apply("Pod", "DELETED", consumer("a", node_name="on-demand-0"))
    engine.store.apply("ResourceClaim", "MODIFIED", shared([]))
    assert usage(engine) == {KEY: 2}
    assert not filter_pod(engine, gpu_pod("q", template="one")).passed  # nothing left in the queue
    assert filter_pod(engine, consumer("b")).passed  # the claim is counted already
    engine.store.apply("ResourceClaim", "MODIFIED", shared([("b", "uid-team-a-b")]))
    engine.store.apply("Pod", "ADDED", consumer("b", node_name="on-demand-0"))
    assert usage(engine) == {KEY: 2}


def test_a_pod_of_another_queue_may_not_use_a_claim_charged_to_this_one() -> None:
    """A claim counts against one queue: team-b's pod using team-a's claim would hold devices team-b never pays
    for (and team-a pays for after team-a's pod ends). It is refused with the reason instead."""
    objects = [
        *base_objects({"on-demand": {"nominal": 2}}, {"on-demand": {"nominal": 2}}),
        local_queue("team-a", "team-b", name="qb"),
        shared([("a", "uid-team-a-a")]),
        consumer("a", node_name="on-demand-0"),
    ]
    engine = engine_for(objects)
    assert usage(engine) == {KEY: 2}
    refused = filter_pod(engine, consumer("b", queue="qb"))
    assert refused.passed == []
    reason = refused.verdicts["on-demand-0"].reason
    assert "counts against ClusterQueue team-a" in reason and "ClusterQueue team-b" in reason
    assert filter_pod(engine, consumer("c")).passed  # a pod of team-a may


# --- PodGroup claims ---------------------------------------------------------------------------------------


def group_claim() -> dict[str, Any]:
    claim = b.claim(
        "train-gpu-abc",
        "team-a",
        [b.exact_request("gpu", 4)],
        allocated=[("gpu", "on-demand-0", f"gpu-{i}") for i in range(4)],
        allocated_node="on-demand-0",
    )
    return b.reserved_for_group(claim, "train", "uid-pg-team-a-train")


def member(name: str, queue: str = "q", **extra: Any) -> dict[str, Any]:
    return b.pod(
        name,
        "team-a",
        templates={"gpu": "four"},
        claim_statuses={"gpu": "train-gpu-abc"},
        queue=queue,
        pod_group="train",
        **extra,
    )


def test_a_podgroup_claim_with_no_member_left_stays_charged_to_the_groups_queue() -> None:
    """Queue of 6: the group's 4-GPU claim bound through its members, then both deleted with the PodGroup kept
    (the controller keeps the claim reserved for podgroups/train): still 4 in use, so of two 2-GPU pods only one
    passes; members re-created take nothing new."""
    group = b.pod_group("train", "team-a", min_count=2, claim_templates={"gpu": "four"})
    group["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "train-gpu-abc"}]}
    engine = engine_for([*base_objects({"on-demand": {"nominal": 6}}), group, group_claim()])
    for name in ("m0", "m1"):
        engine.store.apply("Pod", "ADDED", member(name, node_name="on-demand-0"))
    assert usage(engine) == {KEY: 4}
    for name in ("m0", "m1"):
        engine.store.apply("Pod", "DELETED", member(name, node_name="on-demand-0"))
    assert usage(engine) == {KEY: 4}
    assert filter_pod(engine, gpu_pod("s1")).passed
    assert not filter_pod(engine, gpu_pod("s2")).passed
    client = create_app(engine).test_client()
    [charged] = client.get("/diagnostics/podgroups/team-a/train").get_json()["claimCharges"]
    assert charged["claim"] == "team-a/train-gpu-abc" and charged["clusterQueue"] == "team-a"
    assert charged["carriedBy"] == "" and charged["podGroup"] == "team-a/train"
    page = client.get("/ui/podgroups/team-a/train").get_data(as_text=True)
    assert "counts against team-a" in page and "no member bound" in page
    engine.store.apply("Pod", "ADDED", member("m2", nominated_node="on-demand-0"))
    assert usage(engine) == {KEY: 4}  # nominated: the claim's own entry still counts it
    engine.store.apply("Pod", "MODIFIED", member("m2", node_name="on-demand-0"))
    assert usage(engine) == {KEY: 4}
    [charged] = client.get("/diagnostics/podgroups/team-a/train").get_json()["claimCharges"]
    assert charged["carriedBy"] == "team-a/m2"


def test_members_naming_different_queues_are_reported_and_the_charge_stays_in_one() -> None:
    group = b.pod_group("train", "team-a", min_count=2, claim_templates={"gpu": "four"})
    objects = [
        *base_objects({"on-demand": {"nominal": 6}}, {"on-demand": {"nominal": 6}}),
        local_queue("team-a", "team-b", name="qb"),
        group,
        group_claim(),
        member("m0", node_name="on-demand-0"),
        member("m1", queue="qb", node_name="on-demand-0"),
    ]
    engine = engine_for(objects)
    assert usage(engine) == {KEY: 4}  # once, in the first member's queue
    [(_, entry)] = engine.quota_view().claim_entries()  # type: ignore[misc]
    assert entry.carried and "name different ClusterQueues (team-a, team-b)" in entry.problem
    report = create_app(engine).test_client().get("/diagnostics/queues").get_json()
    assert "different ClusterQueues" in report["allocatedClaimsWithoutPod"][0]["problem"]


# --- bookings: the flavor and queue a pod was given quota in ------------------------------------------------


def shared_node_objects() -> list[dict[str, Any]]:
    """Flavors fa (nodes labelled tier=a) and fb (no labels: every node) in one ClusterQueue, 2 GPUs each; one
    node of 8 GPUs, in both."""
    return [
        b.namespace("team-a"),
        b.device_class(),
        *[obj for obj in base_objects({"on-demand": {"nominal": 1}}) if obj["kind"] in ("ConfigMap",)],
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "fa"},
         "spec": {"nodeLabels": {"tier": "a"}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "fb"}, "spec": {}},
        b.node("shared-0", {"tier": "a", FLAVOR_LABEL: "x"}),
        b.gpu_slice("shared-0", 8),
        cluster_queue("team-a", {"fa": {"nominal": 2}, "fb": {"nominal": 2}}, cohort=None),
        local_queue("team-a", "team-a"),
        b.claim_template("two", "team-a", [b.exact_request("gpu", 2)]),
    ]  # fmt: skip


def bind(engine: SchedulingService, name: str, first_device: int, **labels: str) -> None:
    uid = f"uid-team-a-{name}"
    engine.store.apply(
        "ResourceClaim",
        "ADDED",
        b.claim(
            f"{name}-gpu",
            "team-a",
            [b.exact_request("gpu", 2)],
            allocated=[("gpu", "shared-0", f"gpu-{first_device + i}") for i in range(2)],
            allocated_node="shared-0",
            reserved_for=[(name, uid)],
            owner_uid=uid,
            owner_name=name,
        ),
    )
    pod = gpu_pod(name, claim_statuses={"gpu": f"{name}-gpu"}, node_name="shared-0")
    pod["metadata"]["labels"].update(labels)
    engine.store.apply("Pod", "MODIFIED", pod)


def test_a_pod_booked_in_the_label_less_flavor_is_charged_there_on_a_node_both_flavors_hold() -> None:
    """fa fills first; the next pod goes to fb on the same tier=a node. Bound, it stays charged in fb (the node's
    first flavor is fa): fa never shows more than its quota and the third pod is refused."""
    engine = engine_for(shared_node_objects())
    for index, name in enumerate(("p1", "p2")):
        engine.store.apply("Pod", "ADDED", gpu_pod(name))
        decision = filter_pod(engine, gpu_pod(name))
        assert decision.passed == ["shared-0"] and decision.quota.chosen_flavor == ("fa", "fb")[index]
        bind(engine, name, 2 * index)
    assert usage(engine) == {("team-a", "fa", RESOURCE): 2, ("team-a", "fb", RESOURCE): 2}
    assert engine.quota_view().reserved == {}
    assert not filter_pod(engine, gpu_pod("p3")).passed


def test_a_bound_pods_charge_stays_in_its_queue_and_flavor_whatever_happens_to_its_labels() -> None:
    objects = [*base_objects({"on-demand": {"nominal": 2}}, {"on-demand": {"nominal": 2}})]
    objects.append(local_queue("team-a", "team-b", name="qb"))
    engine = engine_for(objects)
    engine.store.apply("Pod", "ADDED", gpu_pod("p"))
    assert filter_pod(engine, gpu_pod("p")).passed
    engine.store.apply(
        "ResourceClaim",
        "ADDED",
        b.claim(
            "p-gpu",
            "team-a",
            [b.exact_request("gpu", 2)],
            allocated=[("gpu", "on-demand-0", "gpu-0"), ("gpu", "on-demand-0", "gpu-1")],
            allocated_node="on-demand-0",
            reserved_for=[("p", UID_P)],
            owner_uid=UID_P,
            owner_name="p",
        ),
    )
    engine.store.apply("Pod", "MODIFIED", pending(node_name="on-demand-0"))
    assert usage(engine) == {KEY: 2}
    for labels in ({"kueue.x-k8s.io/queue-name": "qb"}, {}):  # moved to team-b's queue, then to none
        relabelled = pending(node_name="on-demand-0")
        relabelled["metadata"]["labels"] = labels
        engine.store.apply("Pod", "MODIFIED", relabelled)
        assert usage(engine) == {KEY: 2}


def test_bookings_survive_a_restart_through_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    journal = ReservationJournal(path)
    memory = BookingMemory(sink=journal)
    booking = Booking("team-a", ((RESOURCE, "fb"),), "team-a/p")
    memory.book(POD, "uid-p", booking)
    memory.book(CLAIM, "uid-c", Booking("team-a", ((RESOURCE, "fb"),), "team-a/c"))
    memory.book(POD, "uid-gone", Booking("team-a", ((RESOURCE, "fa"),), "team-a/gone"))
    memory.gone(POD, ["uid-gone"])
    journal.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert [line["op"] for line in lines] == ["book", "book", "book", "unbook"]
    again = ReservationJournal(path)
    assert again.load() == []
    restored = BookingMemory(sink=again)
    for kind, uid, found in again.loaded_bookings:
        restored.book(kind, uid, found, persist=False)
    assert restored.get(POD, "uid-p") == booking and restored.get(POD, "uid-gone") is None
    assert restored.get(CLAIM, "uid-c") is not None
    again.compact()  # the bookings loaded are live records: a compaction keeps them
    third = ReservationJournal(path)
    third.load()
    assert {uid for _kind, uid, _b in third.loaded_bookings} == {"uid-p", "uid-c"}


# --- the index: which events re-attribute what ---------------------------------------------------------------


def test_a_slice_change_re_attributes_the_pods_and_claims_on_its_node() -> None:
    """A slice withdrawn and published again rebuilds its pool: the pods charged by the devices on that node
    (counters, capacity) are charged again from the devices as they are now, not left as they were."""
    store = ClusterStore()
    for obj in (b.node("n0", {}), b.node("n1", {}), b.gpu_slice("n0", 2), b.gpu_slice("n1", 2)):
        store.apply(obj["kind"], "ADDED", obj)
    for name, node in (("a", "n0"), ("b", "n1")):
        store.apply("Pod", "ADDED", b.pod(name, "ns", node_name=node, claims={"gpu": f"{name}-gpu"}))
    calls: list[str] = []

    def attribute(snapshot: ClusterSnapshot, pod: Any) -> PodUsage | None:
        calls.append(pod.name)
        pools = [pool for pool in snapshot.pools.values() if pool.node_local == pod.node_name]
        amount = Fraction(sum(len(tuple(pool.devices)) for pool in pools))
        return PodUsage(pod.node_name, (), ((("cq", "f", pod.node_name), amount),))

    index = UsageIndex()
    assert index.totals(store.snapshot(), "basis", attribute) == {("cq", "f", "n0"): 2, ("cq", "f", "n1"): 2}
    calls.clear()
    store.apply("ResourceSlice", "DELETED", b.gpu_slice("n0", 2))
    assert index.totals(store.snapshot(), "basis", attribute) == {("cq", "f", "n1"): 2}
    assert calls == ["a"]
    store.apply("ResourceSlice", "ADDED", b.gpu_slice("n0", 2))
    assert index.totals(store.snapshot(), "basis", attribute) == {("cq", "f", "n0"): 2, ("cq", "f", "n1"): 2}
    assert calls == ["a", "a"]


# --- property: any sequence of events, every allocated claim counted once --------------------------------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["bind", "nominate", "unreserve", "finish", "delete_pod", "deallocate", "allocate", "reserve", "recreate"]
        ),
        st.sampled_from(["p", "q", "r"]),
    ),
    max_size=25,
)


@pytest.mark.slow  # about 9 s: 60 sequences of up to 25 events through the service
@settings(max_examples=60, deadline=None)
@given(OPS)
def test_any_interleaving_counts_each_allocated_claim_once(ops: list[tuple[str, str]]) -> None:
    interleaving_counts_each_allocated_claim_once(ops)


@pytest.mark.parametrize(
    "ops",
    [
        # a pod no longer in PreBind once one of its claims is deallocated: its shared claim passes to another
        [("bind", "q"), ("recreate", "q"), ("bind", "r"), ("deallocate", "q")],
        # a nominated pod whose claim is allocated again becomes in flight: it takes its shared claim back
        [("bind", "r"), ("deallocate", "r"), ("nominate", "r"), ("allocate", "r")],
        [("bind", "p"), ("unreserve", "p"), ("bind", "q"), ("delete_pod", "p"), ("finish", "q"), ("reserve", "p")],
    ],
)
def test_interleavings_the_property_test_found(ops: list[tuple[str, str]]) -> None:
    interleaving_counts_each_allocated_claim_once(ops)


def interleaving_counts_each_allocated_claim_once(ops: list[tuple[str, str]]) -> None:
    """Pods p, q, r with a generated 1-GPU claim each and a shared 1-GPU claim: whatever happens to pods and
    claims (bindings failing, pods finishing or deleted before the controller catches up), usage is exactly one
    GPU per allocated claim whose queue is known, and the incremental index agrees with a recount."""
    engine = engine_for(base_objects({"on-demand": {"nominal": 8}}))
    pods: dict[str, dict[str, Any]] = {}
    claims: dict[str, dict[str, Any]] = {}
    device = {"p": 0, "q": 1, "r": 2}

    def pod_obj(name: str, **extra: Any) -> dict[str, Any]:
        obj = b.pod(
            name,
            "team-a",
            templates={"gpu": "one"},
            claims={"shared": "shared"},
            queue="q",
            claim_statuses={"gpu": f"{name}-gpu"},
            **extra,
        )
        return obj

    def claim_obj(name: str, reserved: bool) -> dict[str, Any]:
        uid = f"uid-team-a-{name}"
        return b.claim(
            f"{name}-gpu",
            "team-a",
            [b.exact_request("gpu", 1)],
            allocated=[("gpu", "on-demand-0", f"gpu-{device[name]}")],
            allocated_node="on-demand-0",
            reserved_for=[(name, uid)] if reserved else None,
            owner_uid=uid,
            owner_name=name,
        )

    shared_reserved: list[str] = []

    def put_shared() -> None:
        engine.store.apply(
            "ResourceClaim",
            "MODIFIED",
            b.claim(
                "shared",
                "team-a",
                [b.exact_request("gpu", 1)],
                allocated=[("gpu", "on-demand-0", "gpu-7")],
                allocated_node="on-demand-0",
                reserved_for=[(n, f"uid-team-a-{n}") for n in shared_reserved] or None,
            ),
        )

    put_shared()
    for op, name in ops:
        if op == "recreate" or (name not in pods and op in ("bind", "nominate")):
            pods[name] = pod_obj(name)
            engine.store.apply("Pod", "ADDED", pods[name])
        if op == "bind":
            claims[name] = claim_obj(name, reserved=True)
            engine.store.apply("ResourceClaim", "ADDED", claims[name])
            if name not in shared_reserved:
                shared_reserved.append(name)
                put_shared()
            pods[name] = pod_obj(name, node_name="on-demand-0")
            engine.store.apply("Pod", "MODIFIED", pods[name])
        elif op == "nominate":
            pods[name] = pod_obj(name, nominated_node="on-demand-0")
            engine.store.apply("Pod", "MODIFIED", pods[name])
        elif op == "unreserve" and name in claims:  # a failed binding: Unreserve, nominatedNodeName cleared
            claims[name] = claim_obj(name, reserved=False)
            engine.store.apply("ResourceClaim", "MODIFIED", claims[name])
            if name in shared_reserved:
                shared_reserved.remove(name)
                put_shared()
            if name in pods:
                pods[name] = pod_obj(name)
                engine.store.apply("Pod", "MODIFIED", pods[name])
        elif op == "finish" and name in pods:
            pods[name] = dict(pods[name], status=dict(pods[name].get("status", {}), phase="Succeeded"))
            engine.store.apply("Pod", "MODIFIED", pods[name])
        elif op == "delete_pod" and name in pods:
            engine.store.apply("Pod", "DELETED", pods.pop(name))
        elif op == "deallocate" and name in claims:
            engine.store.apply("ResourceClaim", "DELETED", claims.pop(name))
        elif op == "allocate" and name not in claims and name in pods:
            claims[name] = claim_obj(name, reserved=False)
            engine.store.apply("ResourceClaim", "ADDED", claims[name])
        elif op == "reserve" and name in claims:
            claims[name] = claim_obj(name, reserved=True)
            engine.store.apply("ResourceClaim", "MODIFIED", claims[name])
        counted = usage(engine).get(KEY, Fraction(0))  # the view keeper sees every step
        # the shared claim is booked once it was charged; before, while a consumer in the view names a queue
        shared_known = engine.bookings.get(CLAIM, "uid-claim-team-a-shared") is not None or any(
            n in pods for n in shared_reserved
        )
        assert counted == len(claims) + (1 if shared_known else 0), (ops, counted, sorted(claims))
