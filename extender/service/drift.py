"""Where Kueue's view and the nodes' disagree: the drift report.

Kueue charges a Workload's quota when it admits it, blind to nodes; the extender charges what is allocated on
the node a pod lands on (plus its own in-flight reservations). The two differ while an admitted Workload's pods
are not placed yet (Kueue's long-standing "admitted but unschedulable" case, when the admitted flavor's nodes
have no free devices) and when pods outside Kueue's management use a queue's devices. This module names the
first case with the node-level reason Kueue cannot see; the per-queue numbers are in the QuotaView rows
(reports/queues.py queue_rows).

It also lists the allocated claims no running pod carries (`allocated_claims`): their devices count against the
queue they were booked in (decisions/quota/attribution.py claim_charge) although no pod of that queue shows
them (Kueue's own usage does not count them), and the claims whose users are a mistake (a PodGroup whose
members name different ClusterQueues).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from extender.decisions.quota.verdicts import CATEGORY_FLAVOR
from extender.decisions.ranking import Ranking
from extender.state.core import Pod
from extender.state.indexes.usage import ClaimUsage, PodUsage
from extender.state.kueue.pod_workload import pod_workload
from extender.state.reservations import QuotaKey
from extender.state.snapshot import ClusterSnapshot

MAX_WORKLOADS_EXPLAINED = 10  # each explanation ranks every node for one pod


@dataclass(frozen=True, slots=True)
class UnplacedWorkload:
    workload: str  # namespace/name
    cluster_queue: str
    flavors: Mapping[str, str]  # resource -> flavor Kueue admitted it to
    pending_pods: tuple[str, ...]
    reason: str  # what most nodes say about the first pending pod ("" when not explained: over the limit)
    nodes_passing: int


@dataclass(frozen=True, slots=True)
class UnchargedPod:
    """A placed pod part of whose usage could not be charged: shown, never counted as 0 in silence."""

    pod: str  # namespace/name
    node: str
    errors: tuple[str, ...]


def uncharged_pods(errors: Mapping[str, PodUsage]) -> list[UnchargedPod]:
    """The usage index's charge errors (state/indexes/usage.py charge_errors), by pod key."""
    return [UnchargedPod(key, usage.node, usage.errors) for key, usage in sorted(errors.items())]


def unplaced_workloads(snapshot: ClusterSnapshot, explain: Callable[[Pod], Ranking]) -> list[UnplacedWorkload]:
    """Admitted Workloads (not finished) with pods that are not bound, each with why its first pending pod does
    not fit (the most common per-node reason of the same decision filter would make)."""
    pending_by_workload: dict[str, list[Pod]] = {}
    for pod in snapshot.pods.values():
        if pod.node_name or pod.is_terminal or pod.deleting:
            continue
        found = pod_workload(pod, snapshot.workloads, snapshot.admitted_workloads)
        if found is not None:
            pending_by_workload.setdefault(found.key, []).append(pod)
    report: list[UnplacedWorkload] = []
    for workload in sorted(snapshot.workloads.values(), key=lambda w: w.key):
        admission = workload.admission
        if admission is None or workload.conditions.get("Finished", False):
            continue
        pending = sorted(pending_by_workload.get(workload.key, ()), key=lambda p: p.key)
        if not pending:
            continue
        # resource -> flavor; pod sets admitted to different flavors of one resource list them all
        by_resource: dict[str, list[str]] = {}
        for assignment in admission.pod_set_assignments:
            for resource, flavor in assignment.flavors.items():
                if flavor not in by_resource.setdefault(resource, []):
                    by_resource[resource].append(flavor)
        flavors = {resource: ",".join(names) for resource, names in by_resource.items()}
        reason, passing = "", 0
        if len(report) < MAX_WORKLOADS_EXPLAINED:
            ranking = explain(pending[0])
            verdicts = ranking.decision.verdicts.values()
            passing = sum(1 for verdict in verdicts if verdict.passed)
            # The nodes of the Workload's flavors say why; the rest of the cluster only says it is elsewhere.
            in_flavor = [verdict for verdict in verdicts if verdict.category != CATEGORY_FLAVOR]
            judged = in_flavor or list(verdicts)
            failures = Counter(verdict.reason for verdict in judged if not verdict.passed and verdict.reason)
            if passing:
                reason = f"fits on {passing} node(s) now; waiting for kube-scheduler to try it again"
            elif failures:
                top, count = failures.most_common(1)[0]
                where = "nodes of its flavors" if in_flavor else "nodes"
                reason = f"{top} ({count} of {len(judged)} {where})"
            else:
                reason = "no node is known to the extender"
        report.append(
            UnplacedWorkload(
                workload=workload.key,
                cluster_queue=admission.cluster_queue,
                flavors=flavors,
                pending_pods=tuple(pod.key for pod in pending),
                reason=reason,
                nodes_passing=passing,
            )
        )
    return report


@dataclass(frozen=True, slots=True)
class AllocatedClaim:
    """An allocated claim as usage charges it, for the drift report and the PodGroup page."""

    claim: str  # namespace/name
    cluster_queue: str  # the queue charged ("" when none is known: counted nowhere, see `problem`)
    charges: Mapping[QuotaKey, Fraction]  # what its own entry counts (empty when a pod carries it)
    node: str
    carried_by: str  # the pod whose usage counts it ("" when its own entry does)
    follows: str  # the pod whose queue and flavors its own entry follows ("" when none is left)
    pod_group: str
    problem: str


def allocated_claims(entries: Iterable[tuple[str, ClaimUsage]]) -> list[AllocatedClaim]:
    return [
        AllocatedClaim(
            claim=key,
            cluster_queue=entry.cluster_queue,
            charges=dict(entry.usage.amounts) if entry.usage is not None else {},
            node=entry.node,
            carried_by=entry.pod if entry.carried else "",
            follows="" if entry.carried else entry.pod,
            pod_group=entry.group,
            problem=entry.problem,
        )
        for key, entry in entries
    ]
