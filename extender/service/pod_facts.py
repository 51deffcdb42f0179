"""What the service reads off a pod before deciding for it: whether it needs a decision at all, the id its
reservation is kept under, the admitted Workload whose hold its charge replaces."""

from __future__ import annotations

from extender.decisions.devices.extended_resources import is_dra_backed
from extender.decisions.quota.attribution import cluster_queue_of
from extender.decisions.quota.workload_holds import own_workload
from extender.service.quota_view import QuotaView
from extender.state.core import Pod
from extender.state.kueue.local_queue import pod_queue_name
from extender.state.snapshot import ClusterSnapshot


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
