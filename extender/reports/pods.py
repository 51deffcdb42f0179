"""The pods as people see them: the Pods page's rows (the cluster's governed pods joined with the decisions this
process made), a pod's status, the fields of a pod the extender reads (the what-if form starts from them), the
reasons failing nodes gave, and a what-if example naming a LocalQueue the cluster has. Pure arrangements of
values read elsewhere (the snapshot, the decision history); nothing here decides anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import yaml

from extender.decisions.quota.attribution import cluster_queue_of
from extender.decisions.quota.context import QuotaContext
from extender.decisions.scheduling import needs_our_decision
from extender.reports.decisions import decision_summary
from extender.service import DecisionRecord
from extender.state.core import Pod
from extender.state.kueue.local_queue import QUEUE_NAME_LABEL
from extender.state.snapshot import ClusterSnapshot

STATUS_ORDER = {"pending": 0, "unknown": 1, "bound": 2, "finished": 3}
STATUS_LABELS = {"pending": "pending", "unknown": "not in the cluster view", "bound": "bound", "finished": "finished"}


def status_of(pod: Pod | None) -> tuple[str, str]:
    """(status, node): pending, bound to a node, finished, or not in the cluster view (deleted, or only asked
    about: a snapshot source sees no new pods)."""
    if pod is None:
        return "unknown", ""
    if pod.is_terminal:
        return "finished", pod.node_name
    if pod.node_name:
        return "bound", pod.node_name
    return "pending", ""


class PodEntry(NamedTuple):
    """A line of the Pods page before it is drawn: what sorting, counting and paging need."""

    status: str
    node: str
    key: str
    pod: Pod | None
    record: DecisionRecord | None

    def sort_key(self) -> tuple[int, float, str]:
        return (STATUS_ORDER[self.status], -self.record.at if self.record is not None else 0.0, self.key)


def pod_entries(snapshot: ClusterSnapshot, records: Iterable[DecisionRecord]) -> list[PodEntry]:
    """One entry per governed pod of the cluster view (claims, a LocalQueue or a DRA-backed extended resource:
    the pods the extender decides for), with the last decision this process made for it where there is one,
    plus the pods only the history knows (deleted since, or asked about by kube-scheduler but not in the view).
    Pending first; within a status, the newest decision first, then the pods without one by name. Rows are drawn
    for one page only (pod_row): a large cluster has tens of thousands of pods."""
    latest: dict[str, DecisionRecord] = {}
    for seen in records:  # newest first: the first record of a pod is its last decision
        latest.setdefault(seen.decision.pod_key, seen)
    entries = []
    for key, pod in snapshot.pods.items():
        last = latest.pop(key, None)
        if last is None and not needs_our_decision(pod, snapshot):
            continue
        entries.append(PodEntry(*status_of(pod), key, pod, last))
    entries.extend(PodEntry("unknown", "", key, None, last) for key, last in latest.items())
    entries.sort(key=PodEntry.sort_key)
    return entries


def pod_row(entry: PodEntry, context: QuotaContext, now: float) -> dict[str, Any]:
    """The drawn row: the decision's summary, or the pod's ClusterQueue when this process has not decided it."""
    if entry.record is not None:
        row = decision_summary(entry.record)
        row.update({"decided": True, "age": max(0.0, now - entry.record.at)})
    else:
        pod = entry.pod
        cluster_queue = cluster_queue_of(pod, context) if pod is not None and context.enabled else None
        row = {"decided": False, "governed": bool(cluster_queue), "clusterQueue": cluster_queue or ""}
    row.update({"pod": entry.key, "status": entry.status, "node": entry.node})
    return row


GENERIC_NAMESPACE = "default"


def whatif_example(snapshot: ClusterSnapshot) -> str:
    """A Pod to show in the empty what-if form, naming a LocalQueue and (when its namespace has one) a
    ResourceClaimTemplate the cluster really has, so that pasting it as it is gives a real answer."""
    queues = sorted(snapshot.local_queues.values(), key=lambda q: q.key)
    namespace = queues[0].namespace if queues else GENERIC_NAMESPACE
    metadata: dict[str, Any] = {"name": "my-job-0", "namespace": namespace}
    if queues:
        metadata["labels"] = {QUEUE_NAME_LABEL: queues[0].name}
    templates = sorted(t.name for t in snapshot.claim_templates.values() if t.namespace == namespace)
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if templates:
        spec["resourceClaims"] = [{"name": "devices", "resourceClaimTemplateName": templates[0]}]
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}, sort_keys=False)


def pod_manifest(pod: Pod) -> str:
    """The fields of a pod the extender reads, as YAML: the what-if form starts from the pod as it is now."""
    metadata_: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace}
    if pod.uid:
        metadata_["uid"] = pod.uid
    if pod.labels:
        metadata_["labels"] = dict(pod.labels)
    if pod.annotations:
        metadata_["annotations"] = dict(pod.annotations)
    claims = [
        {"name": ref.name, "resourceClaimName": ref.claim_name}
        if ref.claim_name
        else {"name": ref.name, "resourceClaimTemplateName": ref.template_name}
        for ref in pod.claims
    ]
    manifest: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata_, "spec": {}}
    if claims:
        manifest["spec"]["resourceClaims"] = claims
    if pod.claim_statuses:
        manifest["status"] = {
            "resourceClaimStatuses": [
                {"name": name, "resourceClaimName": generated} for name, generated in pod.claim_statuses.items()
            ]
        }
    return yaml.safe_dump(manifest, sort_keys=False)


def failure_reasons(nodes: Iterable[Mapping[str, Any]]) -> list[tuple[str, int]]:
    return Counter(node.get("reason") or node.get("category", "") for node in nodes if not node["passed"]).most_common()


def status_counts(entries: Sequence[PodEntry]) -> tuple[Counter[str], int]:
    """How many pods of each status the Pods page lists, and how many of them this process has decided."""
    return Counter(entry.status for entry in entries), sum(1 for entry in entries if entry.record is not None)
