"""What the web view's lists are made of: the Pods page's rows (the cluster's governed pods joined with the
decisions this process made), who borrows whose quota in a cohort, and a what-if example naming a LocalQueue the
cluster has. Pure arrangements of values read elsewhere (the snapshot, the decision history, queue_rows'
numbers); nothing here decides anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple

import yaml

from extender.decisions.quota.attribution import cluster_queue_of
from extender.decisions.quota.context import QuotaContext
from extender.service import DecisionRecord
from extender.service.pod_facts import needs_our_decision
from extender.state.core import Pod
from extender.state.kueue.local_queue import QUEUE_NAME_LABEL
from extender.state.snapshot import ClusterSnapshot
from extender.transport.diagnostics import decision_summary

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


@dataclass(frozen=True, slots=True)
class Borrowing:
    """A ClusterQueue using more than its nominal quota of a flavor's resource: the excess comes out of the
    unused quota its cohort's other ClusterQueues lend (Kueue pools it; no single lender is charged)."""

    borrower: str
    cohort: str
    flavor: str
    resource: str
    amount: Fraction
    lenders: tuple[tuple[str, Fraction], ...]  # (ClusterQueue, unused quota it lends), largest first


def borrowing(
    rows: Sequence[tuple[str, str, str, Mapping[str, Fraction | None]]], root_cohort: Mapping[str, str]
) -> list[Borrowing]:
    """From queue_rows' numbers (Kueue's ledger: `borrowed` is what a queue uses beyond its nominal quota) and
    each ClusterQueue's root cohort (lending reaches across a cohort tree): who borrows, how much, and which
    queues of the same tree have unused quota of that flavor and resource to lend (at most their lendingLimit)."""
    zero = Fraction(0)
    unused: dict[tuple[str, str, str], list[tuple[str, Fraction]]] = {}
    for cq, flavor, resource, numbers in rows:
        cohort = root_cohort.get(cq, "")
        if not cohort:
            continue
        nominal = numbers["nominal"] or zero
        used = (numbers["usage"] or zero) + (numbers["reserved"] or zero) + (numbers.get("admittedPending") or zero)
        spare = max(zero, nominal - used)
        limit = numbers.get("lendingLimit")
        if limit is not None:
            spare = min(spare, limit)
        if spare > 0:
            unused.setdefault((cohort, flavor, resource), []).append((cq, spare))
    out = []
    for cq, flavor, resource, numbers in rows:
        amount = numbers.get("borrowed") or zero
        cohort = root_cohort.get(cq, "")
        if amount > 0 and cohort:
            lenders = sorted(
                (pair for pair in unused.get((cohort, flavor, resource), []) if pair[0] != cq),
                key=lambda pair: (-pair[1], pair[0]),
            )
            out.append(Borrowing(cq, cohort, flavor, resource, amount, tuple(lenders)))
    return out


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
