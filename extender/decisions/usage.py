"""Quota in use: what bound pods of each ClusterQueue hold, by flavor and resource.

Usage comes from what is actually allocated (claim status), attributed to the flavor of the node the pod runs
on; this is the API server's truth, so a restart or a lost watch rebuilds it exactly. It is maintained
incrementally from the snapshot's change list: a claim or pod event re-attributes only the pods it touches.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from extender.decisions.quota_context import QUOTA_KINDS, QuotaContext
from extender.state.core import Pod
from extender.state.dra import ClaimSpec, ResourceClaim
from extender.state.kueue import QUEUE_NAME_LABEL
from extender.state.reservations import QuotaKey
from extender.state.store import ClusterSnapshot

# Kinds whose change can re-attribute every pod (mappings, flavors, queues); everything else is incremental.
_GLOBAL_KINDS = QUOTA_KINDS | {"DeviceClass"}


def device_class_of(spec: ClaimSpec, request: str) -> str | None:
    """The DeviceClass behind an allocation result's request name ("req" or "req/sub")."""
    name, _, sub_name = request.partition("/")
    for candidate in spec.requests:
        if candidate.name != name:
            continue
        if candidate.exactly is not None and not sub_name:
            return candidate.exactly.device_class_name
        for sub in candidate.first_available:
            if sub.name == sub_name:
                return sub.device_class_name
    return None


def cluster_queue_of(pod: Pod, context: QuotaContext) -> str | None:
    queue = pod.labels.get(QUEUE_NAME_LABEL)
    if not queue:
        return None
    local_queue = context.local_queues.get(f"{pod.namespace}/{queue}")
    return local_queue.cluster_queue if local_queue is not None else None


def charges_claim(claim: ResourceClaim, pod: Pod, generated: bool) -> bool:
    """A claim shared by several pods is charged once: to the first pod it is reserved for."""
    if generated or not claim.reserved_for:
        return True
    return claim.reserved_for[0].uid == pod.uid or (
        not claim.reserved_for[0].uid and claim.reserved_for[0].name == pod.name
    )


@dataclass(frozen=True, slots=True)
class PodUsage:
    node: str
    claims: tuple[str, ...]
    amounts: tuple[tuple[QuotaKey, Fraction], ...]


def in_flight_node(snapshot: ClusterSnapshot, pod: Pod) -> str:
    """The node of a pod kube-scheduler is binding right now: its claims are allocated and reserved for it
    (the DynamicResources plugin writes that in PreBind) but the binding is not visible yet. "" otherwise.

    Counting such pods as usage closes the gap an extender restart would open: reservations live in memory,
    but an allocation reserved for a pod is in the API server and survives us."""
    node = ""
    for ref in pod.claims:
        claim = snapshot.claim_for_pod(pod, ref)
        if claim is None or claim.allocation is None:
            return ""
        if not any(consumer.uid == pod.uid for consumer in claim.reserved_for):
            continue
        for result in claim.allocation.results:
            pool = snapshot.pools.get((result.driver, result.pool))
            if pool is not None and pool.node_local:
                node = node or pool.node_local
    return node


def pod_usage(snapshot: ClusterSnapshot, pod: Pod, context: QuotaContext) -> PodUsage | None:
    if pod.is_terminal or not pod.claims:
        return None
    node_name = pod.node_name or in_flight_node(snapshot, pod)
    if not node_name:
        return None
    claim_keys: list[str] = []
    amounts: dict[QuotaKey, Fraction] = {}
    cq_name = cluster_queue_of(pod, context)
    cluster_queue = context.cluster_queues.get(cq_name) if cq_name else None
    node = snapshot.nodes.get(node_name)
    for ref in pod.claims:
        claim = snapshot.claim_for_pod(pod, ref)
        if claim is None:
            # Remember where the claim will appear, so its arrival re-attributes this pod.
            expected = ref.claim_name or pod.claim_statuses.get(ref.name)
            if expected:
                claim_keys.append(f"{pod.namespace}/{expected}")
            continue
        claim_keys.append(claim.key)
        if cluster_queue is None or node is None or claim.allocation is None:
            continue
        if not charges_claim(claim, pod, generated=not ref.claim_name):
            continue
        for result in claim.allocation.results:
            if result.admin_access:
                continue
            class_name = device_class_of(claim.spec, result.request)
            resource = context.resource_for_class(class_name) if class_name else None
            if resource is None:
                continue
            flavor = context.node_flavor(cluster_queue, resource, node)
            if flavor is None:
                continue
            key = (cluster_queue.name, flavor, resource)
            amounts[key] = amounts.get(key, Fraction(0)) + 1
    return PodUsage(node_name, tuple(claim_keys), tuple(amounts.items()))


class UsageTracker:
    """Usage per (ClusterQueue, flavor, resource), kept in step with snapshots and the quota context."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = -1
        self._context: QuotaContext | None = None
        self._by_pod: dict[str, PodUsage] = {}
        self._pods_by_claim: dict[str, set[str]] = defaultdict(set)
        self._pods_by_node: dict[str, set[str]] = defaultdict(set)
        self._totals: dict[QuotaKey, Fraction] = {}
        self.full_recomputes = 0

    def usage(self, snapshot: ClusterSnapshot, context: QuotaContext) -> Mapping[QuotaKey, Fraction]:
        with self._lock:
            if self._context is not context:
                self._recompute(snapshot, context)
            elif snapshot.version != self._version:
                changes = snapshot.changes_since(self._version) if snapshot.version > self._version else None
                if changes is None or any(change.kind in _GLOBAL_KINDS for change in changes):
                    self._recompute(snapshot, context)
                else:
                    self._apply(snapshot, context, changes)
            return dict(self._totals)

    def _recompute(self, snapshot: ClusterSnapshot, context: QuotaContext) -> None:
        self.full_recomputes += 1
        self._by_pod.clear()
        self._pods_by_claim.clear()
        self._pods_by_node.clear()
        self._totals = {}
        for key, pod in snapshot.pods.items():
            self._set_pod(key, pod_usage(snapshot, pod, context))
        self._context = context
        self._version = snapshot.version

    def _apply(self, snapshot: ClusterSnapshot, context: QuotaContext, changes: list) -> None:
        touched: set[str] = set()
        for change in changes:
            if change.kind == "Pod":
                touched.add(change.key)
            elif change.kind == "ResourceClaim":
                touched.update(self._pods_by_claim.get(change.key, ()))
                claim = snapshot.claims.get(change.key)
                if claim is not None:
                    touched.update(f"{claim.namespace}/{ref.name}" for ref in claim.reserved_for)
            elif change.kind == "Node":
                touched.update(self._pods_by_node.get(change.key, ()))
        for key in touched:
            pod = snapshot.pods.get(key)
            self._set_pod(key, pod_usage(snapshot, pod, context) if pod is not None else None)
        self._version = snapshot.version

    def _set_pod(self, key: str, usage: PodUsage | None) -> None:
        old = self._by_pod.pop(key, None)
        if old is not None:
            for claim_key in old.claims:
                self._pods_by_claim[claim_key].discard(key)
            self._pods_by_node[old.node].discard(key)
            for quota_key, amount in old.amounts:
                remaining = self._totals.get(quota_key, Fraction(0)) - amount
                if remaining:
                    self._totals[quota_key] = remaining
                else:
                    self._totals.pop(quota_key, None)
        if usage is None:
            return
        self._by_pod[key] = usage
        for claim_key in usage.claims:
            self._pods_by_claim[claim_key].add(key)
        self._pods_by_node[usage.node].add(key)
        for quota_key, amount in usage.amounts:
            self._totals[quota_key] = self._totals.get(quota_key, Fraction(0)) + amount

    def pod_amounts(self, pod_key: str) -> tuple[tuple[QuotaKey, Fraction], ...]:
        usage = self._by_pod.get(pod_key)
        return usage.amounts if usage is not None else ()
