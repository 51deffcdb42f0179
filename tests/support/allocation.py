"""Allocator test helpers: a store from objects, one pod's device verdicts, a pod with a claim template."""

from __future__ import annotations

from extender.decisions.devices.feasibility import device_outcomes
from extender.decisions.devices.features import DEFAULT_FEATURES
from extender.decisions.devices.pod_claims import resolve_pod_claims
from extender.decisions.devices.selection import DeviceMatcher
from extender.state.core import parse_pod
from extender.state.store import ClusterStore
from testkit import builders as b


def cluster(*objects):
    store = ClusterStore()
    for obj in objects:
        store.apply(obj["kind"], "ADDED", obj)
    return store


def decide(store, pod_obj, nodes=("n1",), matcher=None, budget=20_000, features=DEFAULT_FEATURES):
    snapshot = store.snapshot()
    pod = parse_pod(pod_obj)
    claims = resolve_pod_claims(snapshot, pod)
    found = device_outcomes(snapshot, claims, nodes, matcher or DeviceMatcher(), budget=budget, features=features)
    return found.by_node(nodes)


def template_pod(requests, constraints=None, *, name="p"):
    return [
        b.claim_template("t-" + name, "ns", requests, constraints),
        b.pod(name, "ns", templates={"gpu": "t-" + name}),
    ]
