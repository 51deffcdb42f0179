"""No sequence of calls may let usage exceed quota: the invariant checked under concurrency.

A cluster of four ClusterQueues in a two-level cohort tree (borrowing and lending limits, a Cohort with quota
of its own, TryNextFlavor), two flavors of GPU nodes, template and shared claims. Worker threads play
kube-scheduler (filter, prioritize, sometimes the bind verb, sometimes an abandoned cycle or an explain) on
pods they own; one thread plays the API server's watch streams: it applies the bindings the workers chose
(the claim's devices from the filter decision's allocation for the chosen node, then the pod's nodeName; or,
like two watches racing, the other way round), fails bindings whose devices were taken meanwhile, finishes
and deletes pods, releases claims, creates new pods, and touches nodes.

After every watch step, under the reservation lock (as filter holds it), it checks for every
(ClusterQueue, flavor, resource) that usage of bound pods plus in-flight reservations stays within what
Kueue's arithmetic allows (usage <= potentialAvailable, <= nominal + borrowingLimit when set, every cohort's
available >= 0, and each tree's raw total <= the quota in it), and that the incrementally maintained usage
equals a recomputation from scratch.

The model must not over-commit by itself: the watch thread picks the pods it deletes from a list of pods by
state taken before it acts, and a worker may have queued the binding of a pod on that list meanwhile; that
binding is refused, as the API server refuses to bind a deleted pod. Applied, it brought the pod back bound after
the extender had rightly given its quota to the next pod, and the checkpoint reported an over-commit the
extender never made (replayed step by step in test_a_binding_queued_for_a_pod_deleted_meanwhile_is_refused_not_
applied; tests/e2e/README.md, Reliability, has the figures).

Fixed seeds; STRESS_OPERATIONS (scheduler operations, default 6000), STRESS_THREADS (8) and STRESS_SEED make it
longer or different. Thread interleavings still vary between runs. Run with -s for the tallies.
"""

from __future__ import annotations

import itertools
import os
import queue
import random
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import pytest

from extender.decisions.quota.attribution import claim_usage, pod_usage
from extender.decisions.quota.ledger import QuotaLedger
from extender.service.history import DecisionHistory
from extender.service.quota_view import add_amounts
from extender.state.core import parse_pod
from extender.state.indexes.usage import UsageIndex
from testkit import builders as b
from testkit.scenarios import RESOURCE, cluster_queue, cohort, flavor, kueue_config, local_queue, nodes_in_flavor
from tests.support.quota import cluster_queue_names, cohort_available, cohort_names, cohort_quota
from tests.support.scenarios import engine_for

pytestmark = pytest.mark.slow  # thousands of concurrent scheduler operations

OPERATIONS = int(os.environ.get("STRESS_OPERATIONS", "6000"))
THREADS = int(os.environ.get("STRESS_THREADS", "8"))
SEED = int(os.environ.get("STRESS_SEED", "20260512"))
POD_FIRST = float(os.environ.get("STRESS_POD_FIRST", "0.25"))
FLAVORS = ("on-demand", "spot")
TEAMS = ("team-a", "team-b", "team-c", "team-d")

TEMPLATE_REQUESTS = {
    "one": [b.exact_request("gpu", 1)],
    "two": [b.exact_request("gpu", 2)],
    "three": [b.exact_request("gpu", 3)],
    "all": [b.exact_request("gpu", mode="All")],
    "four-or-two": [b.first_available_request("gpu", [b.subrequest("four", 4), b.subrequest("two", 2)])],
}
TEMPLATE_WEIGHTS = {"one": 4, "two": 4, "three": 1, "all": 1, "four-or-two": 2}
SHARED_CLAIMS = {"team-a": ["shared-0", "shared-1"], "team-c": ["shared-2"]}


def cluster_objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        b.device_class(),
        kueue_config(),
        *(flavor(name) for name in FLAVORS),
        *nodes_in_flavor("on-demand", 3, 4),
        *nodes_in_flavor("spot", 3, 4),
        cohort("pool", parent="org", nominal={"on-demand": 2}),
        cluster_queue("team-a", {"on-demand": {"nominal": 4}, "spot": {"nominal": 2, "borrowingLimit": 2}}),
        cluster_queue(
            "team-b", {"on-demand": {"nominal": 4, "lendingLimit": 2}, "spot": {"nominal": 4}}, try_next=True
        ),
        cluster_queue("team-c", {"on-demand": {"nominal": 2, "borrowingLimit": 0}, "spot": {"nominal": 2}}),
        cluster_queue("team-d", {"on-demand": {"nominal": 2}, "spot": {"nominal": 2, "lendingLimit": 1}}, cohort="org"),
    ]
    for team in TEAMS:
        objects += [b.namespace(team), local_queue(team, team)]
        objects += [b.claim_template(name, team, requests) for name, requests in TEMPLATE_REQUESTS.items()]
    for team, names in SHARED_CLAIMS.items():
        objects += [b.claim(name, team, [b.exact_request("gpu", 1)]) for name in names]
    return objects


# --- the model of the cluster outside the extender ------------------------------------------------------------


@dataclass
class PodRecord:
    namespace: str
    name: str
    uid: str
    owner: int  # worker thread index
    template: str | None  # None: uses a shared claim
    shared_claim: str | None
    state: str = "pending"  # pending | binding | bound | finished | deleted
    node: str = ""
    claim_created: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def generated_claim(self) -> str:
        return f"{self.name}-gpu"

    def raw(self) -> dict[str, Any]:
        if self.template is not None:
            statuses = {"gpu": self.generated_claim} if self.claim_created else None
            obj = b.pod(
                self.name,
                self.namespace,
                templates={"gpu": self.template},
                queue="q",
                uid=self.uid,
                claim_statuses=statuses,
                node_name=self.node,
            )
        else:
            obj = b.pod(
                self.name,
                self.namespace,
                claims={"gpu": self.shared_claim},
                queue="q",
                uid=self.uid,
                node_name=self.node,
            )
        if self.state == "finished":
            obj["status"]["phase"] = "Succeeded"
        return obj


@dataclass
class Binding:
    pod: PodRecord
    node: str
    allocation: Any  # the filter verdict's Allocation for that node
    via_bind_verb: bool


@dataclass
class Tally:
    counts: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # tracebacks from the threads
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] += n


class Cluster:
    """What the API server holds besides the extender's view, and the watch events that keep the view in step."""

    def __init__(self, engine: Any, rng: random.Random, tally: Tally) -> None:
        self.engine = engine
        self.store = engine.store
        self.rng = rng
        self.tally = tally
        self.lock = threading.Lock()  # guards pod states between workers and the watch thread
        self.pods: dict[str, PodRecord] = {}
        self.bindings: queue.Queue[Binding] = queue.Queue()
        self.shared_reserved_for: dict[str, list[PodRecord]] = {}
        self.shared_node: dict[str, str] = {}
        self.serial = itertools.count()

    # -- objects --

    def claim_key(self, pod: PodRecord) -> str:
        return f"{pod.namespace}/{pod.shared_claim or pod.generated_claim}"

    def generated_claim_obj(self, pod: PodRecord, allocation: list[tuple[str, str, str]] | None = None) -> dict:
        return b.claim(
            pod.generated_claim,
            pod.namespace,
            TEMPLATE_REQUESTS[pod.template],
            allocated=allocation,
            allocated_node=pod.node if allocation is not None else None,
            reserved_for=[(pod.name, pod.uid)] if allocation is not None else None,
            owner_uid=pod.uid,
            pod_claim_name="gpu",
        )

    def shared_claim_obj(self, namespace: str, name: str, allocation: list | None) -> dict:
        users = self.shared_reserved_for.get(f"{namespace}/{name}", [])
        return b.claim(
            name,
            namespace,
            [b.exact_request("gpu", 1)],
            allocated=allocation,
            allocated_node=self.shared_node.get(f"{namespace}/{name}") if allocation is not None else None,
            reserved_for=[(p.name, p.uid) for p in users] or None,
        )

    def new_pod(self, owner: int, namespace: str | None = None) -> PodRecord:
        rng = self.rng
        namespace = namespace or rng.choice(TEAMS)
        number = next(self.serial)
        shared = SHARED_CLAIMS.get(namespace, [])
        if shared and rng.random() < 0.2:
            pod = PodRecord(namespace, f"p{number}", f"uid-{number}", owner, None, rng.choice(shared))
        else:
            names = list(TEMPLATE_WEIGHTS)
            template = rng.choices(names, weights=[TEMPLATE_WEIGHTS[n] for n in names])[0]
            pod = PodRecord(namespace, f"p{number}", f"uid-{number}", owner, template, None)
        with self.lock:
            self.pods[pod.key] = pod
        self.store.apply("Pod", "ADDED", pod.raw())
        if pod.template is not None and rng.random() < 0.5:  # the resourceclaim controller was quick
            self.store.apply("ResourceClaim", "ADDED", self.generated_claim_obj(pod))
            pod.claim_created = True
            self.store.apply("Pod", "MODIFIED", pod.raw())
        self.tally.add("pods created")
        return pod

    # -- watch events --

    def apply_binding(self, binding: Binding) -> None:
        """PreBind writes the claim's allocation (the devices the filter decision chose on that node), then the
        binding sets the pod's nodeName. Fails, leaving the pod pending, when the devices or the shared claim
        changed hands since the filter ran (the in-tree plugin would fail PreBind), and for a pod deleted since
        its worker queued the binding: the API server has no pod to bind (and PreBind no claim to update); the
        watch thread picks pods to delete from a list taken before the worker marked it "binding"."""
        pod, node = binding.pod, binding.node
        with self.lock:
            deleted = pod.state == "deleted"
        if deleted:
            self.tally.add("bindings failed (pod deleted meanwhile)")
            return
        snapshot = self.store.snapshot()
        pending = {claim.claim.pod_claim_name: claim for claim in binding.allocation.claims}
        key = self.claim_key(pod)
        claim = snapshot.claims.get(key)
        if "gpu" in pending:  # devices to allocate now
            devices = pending["gpu"].devices
            results = [(chosen.request, chosen.device.pool, chosen.device.name) for chosen in devices]
            ok = not any(snapshot.allocated.get(chosen.device.key, 0) for chosen in devices)
            if pod.shared_claim is not None:
                ok = ok and claim is not None and claim.allocation is None
        else:  # a shared claim already allocated when the filter ran: it pins the node
            ok = claim is not None and claim.allocation is not None and self.shared_node.get(key) == node
            results = [(r.request, r.pool, r.device) for r in claim.allocation.results] if ok else []
        if not ok:
            with self.lock:
                pod.state = "pending"
            self.tally.add("bindings failed (devices or claim taken meanwhile)")
            return
        pod.node = node
        if pod.template is not None:
            claim_event = ("MODIFIED" if pod.claim_created else "ADDED", self.generated_claim_obj(pod, results))
        else:
            self.shared_node[key] = node
            self.shared_reserved_for.setdefault(key, []).append(pod)
            self.tally.add("bindings sharing a claim" if "gpu" not in pending else "bindings allocating a shared claim")
            claim_event = ("MODIFIED", self.shared_claim_obj(pod.namespace, pod.shared_claim, results))
        claim_events = [claim_event]
        pod_event = ("Pod", "MODIFIED", pod.raw())
        events = [("ResourceClaim", event, obj) for event, obj in claim_events]
        if self.rng.random() < POD_FIRST:  # separate watches: the binding may arrive before the allocation
            events = [pod_event, *events]
            self.tally.add("bindings seen pod first")
        else:
            events = [*events, pod_event]
        for index, (kind, event, obj) in enumerate(events):
            self.store.apply(kind, event, obj)
            if pod.template is not None and kind == "ResourceClaim":
                pod.claim_created = True
            if index < len(events) - 1:
                self.checkpoint("between the claim and the pod events of a binding")
        with self.lock:
            pod.state = "bound"
        self.tally.add("bindings applied" + (" (bind verb)" if binding.via_bind_verb else ""))

    def release_claims(self, pod: PodRecord, deleting: bool) -> list[tuple[str, str, dict]]:
        """Claim events when a pod finishes or goes: generated claims are deallocated or deleted, shared claims
        drop the pod from reservedFor and are deallocated when nobody is left."""
        events = []
        if pod.template is not None:
            if pod.claim_created:
                if deleting:
                    events.append(("ResourceClaim", "DELETED", self.generated_claim_obj(pod)))
                else:
                    events.append(("ResourceClaim", "MODIFIED", self.generated_claim_obj(pod)))
            return events
        key = self.claim_key(pod)
        users = self.shared_reserved_for.get(key)
        if users and pod in users:
            users.remove(pod)
            claim = self.store.snapshot().claims.get(key)
            results = [(r.request, r.pool, r.device) for r in claim.allocation.results] if claim.allocation else []
            if users:
                events.append(
                    ("ResourceClaim", "MODIFIED", self.shared_claim_obj(pod.namespace, pod.shared_claim, results))
                )
            else:
                self.shared_reserved_for.pop(key)
                self.shared_node.pop(key, None)
                events.append(
                    ("ResourceClaim", "MODIFIED", self.shared_claim_obj(pod.namespace, pod.shared_claim, None))
                )
        return events

    def finish(self, pod: PodRecord) -> None:
        with self.lock:
            pod.state = "finished"
        self.store.apply("Pod", "MODIFIED", pod.raw())
        for kind, event, obj in self.release_claims(pod, deleting=False):
            self.store.apply(kind, event, obj)
        self.tally.add("pods finished")

    def delete(self, pod: PodRecord) -> None:
        was = pod.state
        with self.lock:
            pod.state = "deleted"
            self.pods.pop(pod.key, None)
        events = [("Pod", "DELETED", pod.raw())]
        claim_events = self.release_claims(pod, deleting=True)
        events = [*claim_events, *events] if self.rng.random() < 0.5 else [*events, *claim_events]
        for kind, event, obj in events:
            self.store.apply(kind, event, obj)
        self.tally.add(f"pods deleted ({was})")
        self.new_pod(pod.owner)

    def create_missing_claim(self, pod: PodRecord) -> None:
        self.store.apply("ResourceClaim", "ADDED", self.generated_claim_obj(pod))
        pod.claim_created = True
        self.store.apply("Pod", "MODIFIED", pod.raw())
        self.tally.add("generated claims created late")

    # -- the invariant --

    def checkpoint(self, where: str) -> None:
        engine = self.engine
        view = engine.quota_view()  # reconciled and summed under the reservation lock
        snapshot, context = view.snapshot, view.context
        incremental = dict(view.usage)
        bookings = engine.bookings.view()
        fresh = dict(
            UsageIndex().totals(
                snapshot,
                context,
                lambda at, pod: pod_usage(at, pod, context, bookings=bookings),
                lambda at, claim: claim_usage(at, claim, context, bookings=bookings),
            )
        )
        total = add_amounts(view.usage, view.reserved)
        self.tally.add("checkpoints")
        problems = []
        if incremental != fresh:
            problems.append(f"incremental usage {incremental} != recomputed {fresh}")
        tree = context.tree
        ledger = QuotaLedger.from_usage(tree, total)
        for cq in sorted(cluster_queue_names(tree)):
            for flavor_name in FLAVORS:
                used = ledger.usage(cq, flavor_name, RESOURCE)
                quota = tree.quota(cq, flavor_name, RESOURCE)
                potential = tree.potential_available(cq, flavor_name, RESOURCE)
                if used > potential:
                    problems.append(f"{cq}/{flavor_name}: usage {used} > potentialAvailable {potential}")
                if quota is not None and quota.borrowing_limit is not None:
                    limit = quota.nominal_quota + quota.borrowing_limit
                    if used > limit:
                        problems.append(f"{cq}/{flavor_name}: usage {used} > nominal+borrowingLimit {limit}")
        roots: dict[str, list[str]] = {}
        for cq in cluster_queue_names(tree):
            path = tree.cohort_path(cq)
            if path:
                roots.setdefault(path[-1], []).append(cq)
        for flavor_name in FLAVORS:
            for name in sorted(cohort_names(tree)):
                available = cohort_available(tree, ledger, name, flavor_name, RESOURCE)
                if available < 0:
                    problems.append(f"cohort {name}/{flavor_name}: available {available} < 0")
            for root, queues in roots.items():
                raw = sum((total.get((cq, flavor_name, RESOURCE), Fraction(0)) for cq in queues), Fraction(0))
                quota_in_tree = sum((tree.nominal(cq, flavor_name, RESOURCE) for cq in queues), Fraction(0))
                quota_in_tree += sum(
                    (
                        q.nominal_quota
                        for c in cohort_names(tree)
                        if (q := cohort_quota(tree, c, flavor_name, RESOURCE))
                    ),
                    Fraction(0),
                )
                if raw > quota_in_tree:
                    problems.append(f"tree {root}/{flavor_name}: total usage {raw} > quota in the tree {quota_in_tree}")
        if problems:
            with self.tally.lock:
                self.tally.violations.append(f"{where} (snapshot {snapshot.version}): " + "; ".join(problems))


# --- the threads -------------------------------------------------------------------------------------------------


def worker(index: int, cluster: Cluster, operations: int, done: threading.Event, tally: Tally) -> None:
    rng = random.Random(SEED * 1000 + index)
    engine = cluster.engine
    nodes = sorted(engine.snapshot().nodes)
    performed = 0
    idle = 0
    try:
        while performed < operations and idle < 20_000:
            with cluster.lock:
                mine = [p for p in cluster.pods.values() if p.owner == index and p.state == "pending"]
            if not mine:
                idle += 1
                time.sleep(0.0005)
                continue
            performed += 1
            pod_record = rng.choice(mine)
            pod = parse_pod(pod_record.raw())
            names = nodes if rng.random() < 0.8 else rng.sample(nodes, rng.randint(1, len(nodes)))
            action = rng.choices(["schedule", "filter-only", "prioritize-only", "explain"], weights=[12, 2, 1, 1])[0]
            tally.add(f"scheduler: {action}")
            if action == "explain":
                engine.explain(pod)
                continue
            if action == "prioritize-only":
                engine.prioritize(pod, names)
                continue
            decision = engine.filter(pod, names)
            tally.add("filters passed" if decision.passed else "filters failed")
            if not decision.passed:
                categories = sorted({v.category for v in decision.verdicts.values()})
                tally.add(f"filters failed: {', '.join(categories)}")
                time.sleep(0.002)  # the unschedulable pod backs off; the cluster moves on meanwhile
            if action == "filter-only" or not decision.passed:
                continue
            candidates = decision.passed
            if len(candidates) > 1:  # kube-scheduler skips prioritize with one feasible node
                ranked = engine.prioritize(pod, candidates)
                scores = {h: ranked.score(h).total if ranked.score(h) else 0 for h in candidates}
                best = max(scores.values())
                node = rng.choice([h for h, s in scores.items() if s == best])
            else:
                node = candidates[0]
            allocation = decision.verdicts[node].allocation
            with cluster.lock:
                if pod_record.state != "pending":
                    continue
                pod_record.state = "binding"
            via_bind = rng.random() < 0.3
            binding = Binding(pod_record, node, allocation, via_bind)
            if via_bind:
                bind_with(engine, pod_record, node, binding, cluster)
            else:
                cluster.bindings.put(binding)
    except BaseException:  # surfaced by the test
        with tally.lock:
            tally.errors.append(traceback.format_exc())
    finally:
        tally.add("scheduler operations", performed)
        done.set()


_BIND_LOCK = threading.Lock()


def bind_with(engine: Any, pod: PodRecord, node: str, binding: Binding, cluster: Cluster) -> None:
    """engine.bind with a binder that posts this binding to the API server (the watch thread). The engine has
    one binder, so binds through it are serialised here; filters and prioritizes still run concurrently."""
    with _BIND_LOCK:
        engine.binder = lambda *_args: cluster.bindings.put(binding)
        engine.bind(pod.namespace, pod.name, pod.uid, node)


def watcher(cluster: Cluster, workers_done: list[threading.Event], tally: Tally) -> None:
    rng = cluster.rng
    try:
        while True:
            finished = all(event.is_set() for event in workers_done)
            try:
                binding = cluster.bindings.get(timeout=0.0005 if not finished else 0)
            except queue.Empty:
                binding = None
            if binding is not None:
                cluster.apply_binding(binding)
                cluster.checkpoint("after a binding")
                continue
            if finished:
                break
            with cluster.lock:
                pods = list(cluster.pods.values())
            by_state: dict[str, list[PodRecord]] = {}
            for pod in pods:
                by_state.setdefault(pod.state, []).append(pod)
            roll = rng.random()
            if roll < 0.15 and by_state.get("bound"):
                cluster.finish(rng.choice(by_state["bound"]))
            elif roll < 0.35 and (by_state.get("bound") or by_state.get("finished")):
                cluster.delete(rng.choice(by_state.get("bound", []) + by_state.get("finished", [])))
            elif roll < 0.40 and by_state.get("pending"):
                cluster.delete(rng.choice(by_state["pending"]))
            elif roll < 0.45:
                late = [p for p in by_state.get("pending", []) if p.template is not None and not p.claim_created]
                if late:
                    cluster.create_missing_claim(rng.choice(late))
            elif roll < 0.48:
                name = rng.choice(sorted(cluster.store.snapshot().nodes))
                labels = {"example.com/capacity-type": name.rsplit("-", 1)[0]}
                cluster.store.apply("Node", "MODIFIED", b.node(name, labels))  # a status heartbeat
                tally.add("node updates")
            else:
                time.sleep(0.0002)
                continue
            cluster.checkpoint("after a watch event")
    except BaseException:
        with tally.lock:
            tally.errors.append(traceback.format_exc())


class FrozenClock:
    """Reservations never expire during the run: bindings land well within the TTL, as they do in practice."""

    def __call__(self) -> float:
        return 1000.0


def test_no_overcommit_under_concurrent_scheduling_and_watch_events():
    started = time.perf_counter()
    # The view keeper catches up on watch events in its own thread, as in `serve` against a live cluster.
    engine = engine_for(cluster_objects(), clock=FrozenClock(), keep_view_current=True)
    # Small per-pod caches, so evictions (which a long-running extender sees after a few thousand pods) race too.
    engine.history = DecisionHistory(max_pods=8, max_verdicts=250_000, last_filter_kept=8)
    tally = Tally()
    cluster = Cluster(engine, random.Random(SEED), tally)
    for index in range(THREADS * 8):
        cluster.new_pod(index % THREADS, TEAMS[index % len(TEAMS)])
    cluster.checkpoint("start")
    previous_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: more interleavings per second
    try:
        done = [threading.Event() for _ in range(THREADS)]
        per_thread = max(1, OPERATIONS // THREADS)
        threads = [
            threading.Thread(target=worker, args=(i, cluster, per_thread, done[i], tally), daemon=True)
            for i in range(THREADS)
        ]
        watch = threading.Thread(target=watcher, args=(cluster, done, tally), daemon=True)
        for thread in [*threads, watch]:
            thread.start()
        for thread in [*threads, watch]:
            thread.join(timeout=600)
            assert not thread.is_alive(), "a stress thread hung"
    finally:
        sys.setswitchinterval(previous_interval)
    cluster.checkpoint("end")
    elapsed = time.perf_counter() - started
    counts = dict(sorted(tally.counts.items()))
    print(f"\noverload stress: seed {SEED}, {THREADS} threads, {elapsed:.1f}s")
    for what, count in counts.items():
        print(f"  {what}: {count}")
    print(f"  violations: {len(tally.violations)}")
    for violation in tally.violations[:20]:
        print("   ", violation)
    assert not tally.errors, "\n".join(tally.errors)
    assert tally.counts["scheduler operations"] >= OPERATIONS * 0.9
    assert tally.counts["bindings applied"] + tally.counts["bindings applied (bind verb)"] > 0
    assert not tally.violations, tally.violations[:5]


def test_a_binding_queued_for_a_pod_deleted_meanwhile_is_refused_not_applied():
    """The model's own race, replayed step by step: the watch thread picks a pending pod to delete from its list
    of pods by state while a worker turns that pod into "binding" and queues its binding. The API server then
    refuses the binding (the pod is gone; PreBind's claim update finds no claim), so the model must not apply it:
    applied, it brought the deleted pod back bound, with its claim allocated, after the extender had let its
    reservation go and given the quota to the next pod (team-c: on-demand 4 in use against nominal 2,
    borrowingLimit 0)."""
    engine = engine_for(cluster_objects(), clock=FrozenClock())
    tally = Tally()
    cluster = Cluster(engine, random.Random(SEED), tally)
    on_demand = sorted(name for name in engine.snapshot().nodes if name.startswith("on-demand"))

    def pending_pod(name: str) -> PodRecord:
        pod = PodRecord("team-c", name, f"uid-{name}", 0, "two", None)
        with cluster.lock:
            cluster.pods[pod.key] = pod
        cluster.store.apply("Pod", "ADDED", pod.raw())
        return pod

    doomed = pending_pod("doomed")
    decision = engine.filter(parse_pod(doomed.raw()), on_demand)
    node = decision.passed[0]
    doomed.state = "binding"  # the worker, after the watch thread listed the pod as pending
    cluster.delete(doomed)  # the watch thread's choice, made from that list
    cluster.checkpoint("after the deletion")
    successor = pending_pod("successor")
    assert engine.filter(parse_pod(successor.raw()), on_demand).passed, "the deleted pod's quota is free again"
    cluster.apply_binding(Binding(doomed, node, decision.verdicts[node].allocation, via_bind_verb=False))
    cluster.checkpoint("after the deleted pod's binding")
    assert not tally.violations, tally.violations
    assert "team-c/doomed" not in engine.snapshot().pods
    assert tally.counts["bindings failed (pod deleted meanwhile)"] == 1
