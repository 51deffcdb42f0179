"""What the service reads off a pod before deciding for it: whether it needs a decision at all, the id its
reservation is kept under, the admitted Workload whose hold its charge replaces, whether the view holds the
claims it names yet."""

from __future__ import annotations

import time

from extender.decisions.devices.extended_resources import is_dra_backed
from extender.decisions.devices.pod_claims import named_claims_not_in_view
from extender.decisions.quota.attribution import cluster_queue_of
from extender.decisions.quota.workload_holds import own_workload
from extender.service.quota_view import QuotaView
from extender.state.core import Pod
from extender.state.kueue.local_queue import pod_queue_name
from extender.state.snapshot import ClusterSnapshot
from extender.state.store import ClusterStore

# How long filter waits for a claim the pod names to reach the view (await_named_claims).
CLAIM_CATCH_UP_SECONDS = 0.5


def needs_our_decision(pod: Pod, snapshot: ClusterSnapshot) -> bool:
    """Pods without claims, without a queue and without a DRA-backed extended resource pass every known node:
    nothing to reserve or record. An extended resource a DeviceClass backs is a claim in all but name."""
    return bool(pod.claims) or bool(pod_queue_name(pod.labels)) or is_dra_backed(snapshot.device_classes, pod)


def pod_id(pod: Pod) -> str:
    return pod.uid or pod.key


def own_workload_key(view: QuotaView, pod: Pod) -> str:
    """The admitted Workload whose hold the pod's charge replaces, "" when none."""
    workload = own_workload(view.snapshot, pod, cluster_queue_of(pod, view.context))
    return workload.key if workload is not None else ""


def await_named_claims(store: ClusterStore, snapshot: ClusterSnapshot, pod: Pod) -> None:
    """Give a watch that is behind kube-scheduler's informer a moment to deliver the claims the pod names
    (pod_claims.named_claims_not_in_view: kube-scheduler has them, or it would not have asked), at most
    CLAIM_CATCH_UP_SECONDS, instead of refusing every node for a claim that exists: a pod refused so waits in
    kube-scheduler's unschedulable pool, and the claim's creation, which would move it back, has already
    happened. For a source that follows the cluster only; a claim still missing after that is refused."""
    deadline = time.monotonic() + CLAIM_CATCH_UP_SECONDS
    while named_claims_not_in_view(snapshot, pod) and (left := deadline - time.monotonic()) > 0:
        store.wait_for_change(snapshot.version, left)
        snapshot = store.snapshot()
