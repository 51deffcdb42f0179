"""Quota in use per (ClusterQueue, flavor, resource), kept in step with the cluster view event by event.

Usage comes from what is actually allocated (claim status), so a restart or a lost watch rebuilds it exactly
from the API server. This index only does the bookkeeping: which pods hold what, and which claims and nodes
each depends on, so that a Pod, ResourceClaim or Node event re-attributes only the pods it touches. How one
pod's allocations translate into quota (the DeviceClass mapping, the node's flavor) is a decision
(`decisions/quota/attribution.py: pod_usage`), handed in as `attribute` together with the `basis` it depends on
(the quota context): a new basis, or a change of a kind in `GLOBAL_KINDS`, recomputes everything.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from extender.state.core import Pod
from extender.state.reservations import QuotaKey, add_signed
from extender.state.snapshot import Change, ClusterSnapshot

_ZERO = Fraction(0)

# Kinds whose change can re-attribute every pod (mappings, flavors, queues, classes); the rest is incremental.
GLOBAL_KINDS = frozenset(
    {"ClusterQueue", "Cohort", "LocalQueue", "ResourceFlavor", "ConfigMap", "Namespace", "DeviceClass"}
)


@dataclass(frozen=True, slots=True)
class PodUsage:
    node: str
    claims: tuple[str, ...]  # claim keys the attribution read (or expects), so their events re-attribute it
    amounts: tuple[tuple[QuotaKey, Fraction], ...]
    workload: str = ""  # key of the admitted Workload whose quota hold these amounts replace ("" for none)
    pod_set: str = ""  # the Workload's pod set the pod belongs to ("" when its admission names none for it)
    # what a Workload is matched to the pod by (state/kueue/pod_workload.py workload_refs: the Workload keys the
    # pod names, its uid, owner and JobSet uids): a Workload event re-attributes the pods it names or owns
    owners: tuple[str, ...] = ()
    bound: bool = True  # False: counted on its nominated or in-flight node before the binding shows
    # why part of what the pod holds could not be charged (a device without the mapping's counter or capacity):
    # shown in the drift report, never silently counted as 0
    errors: tuple[str, ...] = ()


Attribute = Callable[[ClusterSnapshot, Pod], PodUsage | None]


class UsageIndex:
    """Thread-safe; `totals` brings the index up to the snapshot it is given, then answers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = -1
        self._basis: object = None
        self._by_pod: dict[str, PodUsage] = {}
        self._pods_by_claim: dict[str, set[str]] = defaultdict(set)
        self._pods_by_node: dict[str, set[str]] = defaultdict(set)
        self._totals: dict[QuotaKey, Fraction] = {}
        # What the pods of each admitted Workload hold, by pod set (the hold index subtracts it from what Kueue
        # admitted each pod set), and which Workloads' sums changed since the hold index last asked (None: all).
        self._pods_by_workload: dict[str, set[str]] = defaultdict(set)
        self._by_pod_set: dict[str, dict[str, dict[QuotaKey, Fraction]]] = {}  # Workload -> pod set -> amounts
        self._pods_by_owner: dict[str, set[str]] = defaultdict(set)
        self._changed_workloads: set[str] | None = None
        self._unbound: dict[str, PodUsage] = {}  # pods counted before their binding shows, by pod key
        self._errors: dict[str, PodUsage] = {}  # pods part of whose usage could not be charged, by pod key
        # which pods hold each quota key: the preemption oracle asks who holds what, only when a flavor does not fit
        self._pods_by_quota_key: dict[QuotaKey, set[str]] = defaultdict(set)
        # charged_pods' answers, each dropped when a pod holding its key changes: one tuple object per answer
        # while nothing changes, so a reader can remember what it derived from it by identity
        self._charged: dict[QuotaKey, tuple[tuple[str, Fraction, str], ...]] = {}
        self.full_recomputes = 0

    def totals(self, snapshot: ClusterSnapshot, basis: object, attribute: Attribute) -> Mapping[QuotaKey, Fraction]:
        with self._lock:
            if self._basis is not basis:
                self._recompute(snapshot, basis, attribute)
            elif snapshot.version != self._version:
                changes = snapshot.changes_since(self._version) if snapshot.version > self._version else None
                if changes is None or any(change.kind in GLOBAL_KINDS for change in changes):
                    self._recompute(snapshot, basis, attribute)
                else:
                    self._apply(snapshot, changes, attribute)
            return dict(self._totals)

    def unbound(self) -> dict[str, PodUsage]:
        """Pods counted on a node they are not bound to yet (nominated, or claims reserved in PreBind), as of
        the last `totals`: a reservation of such a pod is already usage, and its own filter must not count it."""
        with self._lock:
            return dict(self._unbound)

    def charge_errors(self) -> dict[str, PodUsage]:
        """Pods part of whose usage could not be charged (PodUsage.errors), by pod key, as of the last `totals`."""
        with self._lock:
            return dict(self._errors)

    def _recompute(self, snapshot: ClusterSnapshot, basis: object, attribute: Attribute) -> None:
        self.full_recomputes += 1
        self._by_pod.clear()
        self._pods_by_claim.clear()
        self._pods_by_node.clear()
        self._by_pod_set.clear()
        self._pods_by_workload.clear()
        self._pods_by_owner.clear()
        self._unbound.clear()
        self._errors.clear()
        self._pods_by_quota_key.clear()
        self._charged.clear()
        self._totals = {}
        for key, pod in snapshot.pods.items():
            self._set_pod(key, attribute(snapshot, pod))
        self._basis = basis
        self._version = snapshot.version
        self._changed_workloads = None

    def _apply(self, snapshot: ClusterSnapshot, changes: list[Change], attribute: Attribute) -> None:
        touched: set[str] = set()
        for change in changes:
            if change.kind == "Pod":
                touched.add(change.key)
                # A shared claim is charged to its first consumer still running (decisions/quota/attribution.py
                # charges_claim): one coming, finishing or going passes the charge on to the claim's other pods.
                old = self._by_pod.get(change.key)
                for claim_key in old.claims if old is not None else ():
                    touched.update(self._pods_by_claim.get(claim_key, ()))
                changed = snapshot.pods.get(change.key)
                if changed is not None:
                    # a claim named outright or recorded in its status: a PodGroup's claim is recorded in every
                    # member's status, and is charged to one member (decisions/gang/claims.py)
                    for ref in changed.claims:
                        name = ref.claim_name or changed.claim_statuses.get(ref.name)
                        if name:
                            touched.update(self._pods_by_claim.get(f"{changed.namespace}/{name}", ()))
            elif change.kind == "ResourceClaim":
                touched.update(self._pods_by_claim.get(change.key, ()))
                claim = snapshot.claims.get(change.key)
                if claim is not None:
                    touched.update(f"{claim.namespace}/{ref.name}" for ref in claim.reserved_for)
            elif change.kind == "PodGroup":
                # its claims (spec, status) decide which of its members' claims are the group's
                touched.update(snapshot.group_members.get(change.key, ()))
            elif change.kind == "Node":
                touched.update(self._pods_by_node.get(change.key, ()))
            elif change.kind == "Workload":
                # its admission names the flavors its pods are charged in, and whose hold they replace
                touched.update(self._pods_by_workload.get(change.key, ()))
                touched.update(self._pods_by_owner.get(change.key, ()))  # the pods naming it
                workload = snapshot.workloads.get(change.key)
                for owner in workload.owners if workload is not None else ():
                    touched.update(self._pods_by_owner.get(owner.uid, ()))
                self._workload_changed(change.key)
        for key in touched:
            pod = snapshot.pods.get(key)
            self._set_pod(key, attribute(snapshot, pod) if pod is not None else None)
        self._version = snapshot.version

    def _set_pod(self, key: str, usage: PodUsage | None) -> None:
        old = self._by_pod.pop(key, None)
        self._unbound.pop(key, None)
        self._errors.pop(key, None)
        if old is not None:
            for claim_key in old.claims:
                self._pods_by_claim[claim_key].discard(key)
            self._pods_by_node[old.node].discard(key)
            for owner in old.owners:
                self._pods_by_owner[owner].discard(key)
            add_signed(self._totals, old.amounts, -1)
            for quota_key, _ in old.amounts:
                self._charged.pop(quota_key, None)
                held = self._pods_by_quota_key.get(quota_key)
                if held is not None:
                    held.discard(key)
                    if not held:
                        del self._pods_by_quota_key[quota_key]
            if old.workload:
                self._pods_by_workload[old.workload].discard(key)
                pod_sets = self._by_pod_set.setdefault(old.workload, {})
                add_signed(pod_sets.setdefault(old.pod_set, {}), old.amounts, -1)
                if not pod_sets[old.pod_set]:
                    del pod_sets[old.pod_set]
                if not pod_sets:
                    del self._by_pod_set[old.workload]
                self._workload_changed(old.workload)
        if usage is None:
            return
        self._by_pod[key] = usage
        if not usage.bound and usage.amounts:
            self._unbound[key] = usage
        if usage.errors:
            self._errors[key] = usage
        for claim_key in usage.claims:
            self._pods_by_claim[claim_key].add(key)
        self._pods_by_node[usage.node].add(key)
        for owner in usage.owners:
            self._pods_by_owner[owner].add(key)
        add_signed(self._totals, usage.amounts, 1)
        for quota_key, _ in usage.amounts:
            self._charged.pop(quota_key, None)
            self._pods_by_quota_key[quota_key].add(key)
        if usage.workload:
            self._pods_by_workload[usage.workload].add(key)
            pod_sets = self._by_pod_set.setdefault(usage.workload, {})
            add_signed(pod_sets.setdefault(usage.pod_set, {}), usage.amounts, 1)
            if not pod_sets[usage.pod_set]:
                del pod_sets[usage.pod_set]
            if not pod_sets:
                del self._by_pod_set[usage.workload]
            self._workload_changed(usage.workload)

    def _workload_changed(self, key: str) -> None:
        if self._changed_workloads is not None:
            self._changed_workloads.add(key)

    # --- what the admission hold index reads (state/indexes/admission_holds.py), right after `totals` ----------

    def take_changed_workloads(self) -> set[str] | None:
        """Workloads whose pods' usage (or whose object) changed since the last call; None means every one
        (after a full recompute). The caller owns the set."""
        with self._lock:
            changed, self._changed_workloads = self._changed_workloads, set()
            return changed

    def charged_pods(self, quota_key: QuotaKey) -> tuple[tuple[str, Fraction, str], ...]:
        """(pod key, amount, admitted Workload key or "") of every pod whose usage counts in `quota_key`, as of the
        last `totals`; the same tuple object until one of those pods changes."""
        with self._lock:
            found = self._charged.get(quota_key)
            if found is None:
                pods = []
                for pod_key in self._pods_by_quota_key.get(quota_key, ()):
                    usage = self._by_pod[pod_key]
                    amount = _ZERO
                    for charged_key, charged in usage.amounts:
                        if charged_key == quota_key:
                            amount = charged if amount is _ZERO else amount + charged
                    pods.append((pod_key, amount, usage.workload))
                found = self._charged[quota_key] = tuple(pods)
            return found

    def pod_set_usage(self, key: str) -> dict[str, dict[QuotaKey, Fraction]]:
        """What the pods of Workload `key` hold, by their pod set (PodUsage.pod_set), as of the last `totals`."""
        with self._lock:
            return {pod_set: dict(amounts) for pod_set, amounts in self._by_pod_set.get(key, {}).items()}

    def workload_usage(self, key: str) -> Mapping[QuotaKey, Fraction]:
        """What the pods of Workload `key` hold together, as of the last `totals`."""
        total: dict[QuotaKey, Fraction] = {}
        for amounts in self.pod_set_usage(key).values():
            add_signed(total, amounts.items(), 1)
        return total
