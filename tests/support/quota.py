"""Quota scenario helpers: two teams, two flavors, and filtering a pod through the service."""

from __future__ import annotations

from extender.state.core import parse_pod
from testkit import builders as b
from tests.support.scenarios import (
    cluster_queue,
    flavor,
    kueue_config,
    local_queue,
    nodes_in_flavor,
    templates,
)


def base_objects(team_a_quota, team_b_quota=None, *, try_next=False, od_nodes=2, spot_nodes=2, gpus=8):
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


# One ClusterQueue team-a with one flavor of two 4-GPU nodes (the service tests' setup), for the issue 15 tests.
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
