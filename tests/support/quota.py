"""Quota scenario helpers: two teams, two flavors, and filtering a pod through the service."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from extender.decisions.quota.ledger import QuotaLedger
from extender.decisions.quota.tree import FlavorResource, QuotaTree
from extender.state.core import parse_pod
from extender.state.kueue.quotas import ResourceQuota
from extender.state.reservations import QuotaKey
from extender.state.store import ClusterStore
from testkit import builders as b
from testkit.scenarios import cluster_queue, flavor, gpu_pod, kueue_config, local_queue, nodes_in_flavor, templates


def base_objects(
    team_a_quota: dict[str, dict[str, Any]],
    team_b_quota: dict[str, dict[str, Any]] | None = None,
    *,
    try_next: bool = False,
    od_nodes: int = 2,
    spot_nodes: int = 2,
    gpus: int = 8,
) -> list[dict[str, Any]]:
    objects = [
        b.namespace("team-a"),
        b.namespace("team-b"),
        b.device_class(),
        kueue_config(),
        flavor("on-demand"),
        flavor("spot"),
        *nodes_in_flavor("on-demand", od_nodes, gpus),
        *nodes_in_flavor("spot", spot_nodes, gpus),
        cluster_queue("team-a", team_a_quota, try_next=try_next),
        local_queue("team-a", "team-a"),
        local_queue("team-b", "team-b"),
        *templates("team-a"),
        *templates("team-b"),
    ]
    if team_b_quota is not None:
        objects.append(cluster_queue("team-b", team_b_quota))
    return objects


def all_nodes(engine):
    return sorted(engine.snapshot().nodes)


def filter_pod(engine, pod_obj, nodes=None):
    pod = parse_pod(pod_obj)
    return engine.filter(pod, nodes or all_nodes(engine))


def allocated_claim(pod_name: str, gpus: int, node: str = "on-demand-0", namespace: str = "team-a", **extra) -> dict:
    """The claim `<pod>-gpu` with `gpus` GPUs of `node` allocated and reserved for the pod (as PreBind writes it)."""
    return b.claim(
        f"{pod_name}-gpu",
        namespace,
        [b.exact_request("gpu", gpus)],
        allocated=[("gpu", node, f"gpu-{i}") for i in range(gpus)],
        reserved_for=[(pod_name, extra.pop("uid", f"uid-{namespace}-{pod_name}"))],
        **extra,
    )


def bind_two_gpus(store: ClusterStore, pod_obj: dict, node: str) -> None:
    """Deliver what PreBind and the binding show of a pod of template "two": its claim `<pod>-gpu` allocated on
    `node` (gpu-0, gpu-1) and reserved for it, then the pod bound there."""
    name, uid = pod_obj["metadata"]["name"], pod_obj["metadata"]["uid"]
    store.apply("ResourceClaim", "ADDED", allocated_claim(name, 2, node, uid=uid, owner_uid=uid, allocated_node=node))
    bound = gpu_pod(name, template="two", claim_statuses={"gpu": f"{name}-gpu"}, node_name=node)
    bound["metadata"]["uid"] = uid
    store.apply("Pod", "MODIFIED", bound)


# One ClusterQueue team-a with one flavor of two 4-GPU nodes (the service tests' setup), shared by the quota tests.
ONE_QUEUE_KEY = ("team-a", "on-demand", "example.com/gpu")


def one_queue_objects(nominal: int = 4) -> list[dict]:
    return [
        b.namespace("team-a"),
        b.device_class(),
        kueue_config(),
        flavor("on-demand"),
        *nodes_in_flavor("on-demand", 2, 4),
        cluster_queue("team-a", {"on-demand": {"nominal": nominal}}, cohort=None),
        local_queue("team-a", "team-a"),
        b.claim_template("two", "team-a", [b.exact_request("gpu", 2)]),
    ]


# --- Readers of a QuotaTree / QuotaLedger that only tests need (the cohorts' own numbers, bulk views) ---------


def cluster_queue_names(tree: QuotaTree) -> frozenset[str]:
    return frozenset(node.name for node in tree.nodes if node.is_queue)


def cohort_names(tree: QuotaTree) -> frozenset[str]:
    return frozenset(node.name for node in tree.nodes if not node.is_queue)


def implicit_cohorts(tree: QuotaTree) -> frozenset[str]:
    """Cohorts referenced by name only; Kueue creates them with no quota of their own."""
    return frozenset(node.name for node in tree.nodes if not node.is_queue and not node.explicit)


def cyclic_cohorts(tree: QuotaTree) -> frozenset[str]:
    return frozenset(node.name for node in tree.nodes if node.cyclic)


def cohort_subtree_quota(tree: QuotaTree, cohort: str, flavor: str, resource: str) -> Fraction:
    return tree.nodes[tree.cohort_index(cohort)].subtree.get(FlavorResource(flavor, resource), Fraction(0))


def cohort_local_quota(tree: QuotaTree, cohort: str, flavor: str, resource: str) -> Fraction:
    return tree.nodes[tree.cohort_index(cohort)].local_quota(FlavorResource(flavor, resource))


def cohort_quota(tree: QuotaTree, cohort: str, flavor: str, resource: str) -> ResourceQuota | None:
    """The Cohort's own resourceGroups entry (None for implicit cohorts and uncovered resources)."""
    return tree.nodes[tree.cohort_index(cohort)].quotas.get(FlavorResource(flavor, resource))


def cohort_usage(tree: QuotaTree, ledger: QuotaLedger, cohort: str, flavor: str, resource: str) -> Fraction:
    """Usage charged to the cohort: its children's usage beyond their localQuota."""
    return ledger.usage_of_node(tree.cohort_index(cohort), FlavorResource(flavor, resource))


def cohort_available(tree: QuotaTree, ledger: QuotaLedger, cohort: str, flavor: str, resource: str) -> Fraction:
    """Kueue's available() for a cohort node; negative when the cohort is over-admitted."""
    return ledger.available_of_node(tree.cohort_index(cohort), FlavorResource(flavor, resource))


def cluster_queue_usage(tree: QuotaTree, ledger: QuotaLedger) -> dict[QuotaKey, Fraction]:
    """Non-zero usage per (ClusterQueue, flavor, resource); QuotaLedger.from_usage of it equals the ledger. Reads
    the ledger's storage: the round trip is checked over every entry it holds."""
    merged = {**ledger._base, **ledger._overlay}
    nodes = tree.nodes
    return {
        (nodes[index].name, fr.flavor, fr.resource): value
        for (index, fr), value in merged.items()
        if nodes[index].is_queue and value
    }


def fits_all(ledger: QuotaLedger, cluster_queue: str, flavor: str, requests: Mapping[str, Fraction | int]) -> tuple:
    """One verdict per resource; flavor-resources are independent in Kueue's arithmetic."""
    return tuple(ledger.fits(cluster_queue, flavor, resource, amount) for resource, amount in requests.items())


def with_usage_delta(ledger: QuotaLedger, cluster_queue: str, flavor: str, resource: str, delta) -> QuotaLedger:
    return ledger.with_usage_deltas(((cluster_queue, flavor, resource, delta),))


def recount_usage(engine) -> dict[QuotaKey, Fraction]:
    """Usage recounted from scratch over the engine's current view, with the bookings it holds: what the
    incremental index must agree with."""
    from extender.decisions.quota.attribution import claim_usage, pod_usage
    from extender.state.indexes.usage import UsageIndex

    view = engine.quota_view()
    context = view.context
    bookings = engine.bookings.view()
    return dict(
        UsageIndex().totals(
            view.snapshot,
            context,
            lambda at, pod: pod_usage(at, pod, context, bookings=bookings),
            lambda at, claim: claim_usage(at, claim, context, bookings=bookings),
        )
    )
