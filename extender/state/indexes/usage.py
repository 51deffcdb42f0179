"""Quota in use per (ClusterQueue, flavor, resource), kept in step with the cluster view event by event.

Usage comes from what is actually allocated (claim status), so a restart or a lost watch rebuilds it from the
API server. This index only does the bookkeeping: which pods hold what, which allocated claims no pod carries
hold what (their own entries), and which claims, pods and nodes each depends on, so that a Pod, ResourceClaim,
PodGroup, Node or ResourceSlice event re-attributes only the pods and claims it touches. How one pod's or one
claim's allocations translate into quota (who carries a claim, the DeviceClass mapping, the booked flavor) is a
decision (`decisions/quota/attribution.py: pod_usage, claim_usage`), handed in as `attribute` and
`attribute_claim` together with the `basis` they depend on (the quota context): a new basis, or a change of a
kind in `GLOBAL_KINDS`, recomputes everything.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction

from extender.state.bookings import Booking
from extender.state.core import Pod
from extender.state.dra.claims import ResourceClaim
from extender.state.reservations import QuotaKey, add_signed
from extender.state.snapshot import NODE_DEVICES, Change, ClusterSnapshot

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
    # (claim uid, the booking it was charged in) for each claim whose charge these amounts include
    charged: tuple[tuple[str, Booking], ...] = ()
    # why part of what the pod holds could not be charged (a device without the mapping's counter or capacity):
    # shown in the drift report, never silently counted as 0
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimUsage:
    """An allocated claim as usage sees it: its own entry when no placed pod carries it."""

    usage: PodUsage | None  # the claim's own charge (None: a pod carries it, or no queue is known)
    depends: tuple[str, ...]  # pod keys whose change can change who carries it
    node: str  # the node of its devices ("" when they span nodes)
    cluster_queue: str  # the queue charged ("" when none is known)
    pod: str  # the pod carrying it when `carried`, else the pod its charge follows ("" when none)
    group: str = ""  # the PodGroup key when it is a PodGroup's claim
    problem: str = ""  # what is wrong with its users (the drift report shows it)
    carried: bool = False  # a pod's usage counts it


Attribute = Callable[[ClusterSnapshot, Pod], PodUsage | None]
ClaimAttribute = Callable[[ClusterSnapshot, ResourceClaim], ClaimUsage | None]


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
        # Allocated claims, by claim key: their own entries (the ones no pod carries) and what they depend on.
        self._by_claim: dict[str, ClaimUsage] = {}
        self._claims_by_pod: dict[str, set[str]] = defaultdict(set)  # pod key -> claims whose carrier it may be
        self._claims_by_node: dict[str, set[str]] = defaultdict(set)
        self._shared_pool_claims: set[str] = set()  # claims whose devices span nodes (a slice event re-reads them)
        # (claim uid, booking) of claims charged since `take_bookings` was last called
        self._bookings: dict[str, Booking] = {}
        self.full_recomputes = 0

    def totals(
        self,
        snapshot: ClusterSnapshot,
        basis: object,
        attribute: Attribute,
        attribute_claim: ClaimAttribute | None = None,
        *,
        touched_pods: Collection[str] = (),
        touched_claims: Collection[str] = (),
    ) -> Mapping[QuotaKey, Fraction]:
        """Usage as of `snapshot`. `touched_pods`, `touched_claims`: keys to re-attribute though the snapshot's
        changes do not name them (their bookings changed: state/bookings.py)."""
        with self._lock:
            if self._basis is not basis:
                self._recompute(snapshot, basis, attribute, attribute_claim)
            elif snapshot.version != self._version or touched_pods or touched_claims:
                changes = snapshot.changes_since(self._version) if snapshot.version >= self._version else None
                if changes is None or any(change.kind in GLOBAL_KINDS for change in changes):
                    self._recompute(snapshot, basis, attribute, attribute_claim)
                else:
                    self._apply(snapshot, changes, attribute, attribute_claim, touched_pods, touched_claims)
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

    def _recompute(
        self, snapshot: ClusterSnapshot, basis: object, attribute: Attribute, attribute_claim: ClaimAttribute | None
    ) -> None:
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
        self._by_claim.clear()
        self._claims_by_pod.clear()
        self._claims_by_node.clear()
        self._shared_pool_claims.clear()
        self._totals = {}
        for key, pod in snapshot.pods.items():
            self._set_pod(key, attribute(snapshot, pod))
        if attribute_claim is not None:
            for key, claim in snapshot.claims.items():
                if claim.allocation is not None:
                    self._set_claim(key, attribute_claim(snapshot, claim))
        self._basis = basis
        self._version = snapshot.version
        self._changed_workloads = None

    def _apply(
        self,
        snapshot: ClusterSnapshot,
        changes: list[Change],
        attribute: Attribute,
        attribute_claim: ClaimAttribute | None,
        touched_pods: Collection[str] = (),
        touched_claims: Collection[str] = (),
    ) -> None:
        touched: set[str] = set(touched_pods)
        claims: set[str] = set(touched_claims)
        for claim_key in touched_claims:
            touched.update(self._pods_by_claim.get(claim_key, ()))
        for change in changes:
            if change.kind == "Pod":
                touched.add(change.key)
                # A shared claim is carried by one of its pods (decisions/quota/attribution.py claim_charge): one
                # coming, finishing or going passes the charge on to the claim's other pods or its own entry.
                old = self._by_pod.get(change.key)
                for claim_key in old.claims if old is not None else ():
                    touched.update(self._pods_by_claim.get(claim_key, ()))
                    claims.add(claim_key)
                claims.update(self._claims_by_pod.get(change.key, ()))
                changed = snapshot.pods.get(change.key)
                if changed is not None:
                    # a claim named outright or recorded in its status: a PodGroup's claim is recorded in every
                    # member's status, and is carried by one member or by itself (decisions/gang/claims.py)
                    for claim_key in _claim_keys(snapshot, changed):
                        touched.update(self._pods_by_claim.get(claim_key, ()))
                        claims.add(claim_key)
            elif change.kind == "ResourceClaim":
                # the pods using it: whether they are placed (in PreBind) depends on every claim of theirs
                claims.add(change.key)
                touched.update(self._pods_by_claim.get(change.key, ()))
                old_entry = self._by_claim.get(change.key)
                if old_entry is not None:
                    touched.update(old_entry.depends)
                claim = snapshot.claims.get(change.key)
                if claim is not None:
                    touched.update(f"{claim.namespace}/{ref.name}" for ref in claim.reserved_for)
                    if claim.owner_pod:
                        touched.add(f"{claim.namespace}/{claim.owner_pod}")
            elif change.kind == "PodGroup":
                # its claims (spec, status) decide which of its members' claims are the group's
                touched.update(snapshot.group_members.get(change.key, ()))
            elif change.kind in ("Node", NODE_DEVICES):
                # a node's labels (its flavors), or the devices it draws from (a slice withdrawn or back: a
                # counter- or capacity-charged pod is charged by the devices it holds)
                touched.update(self._pods_by_node.get(change.key, ()))
                claims.update(self._claims_by_node.get(change.key, ()))
            elif change.kind == "ResourceSlice":
                # pools spanning nodes name no node: the claims drawing from them, and their pods
                claims.update(self._shared_pool_claims)
                for claim_key in self._shared_pool_claims:
                    touched.update(self._pods_by_claim.get(claim_key, ()))
            elif change.kind == "Workload":
                # its admission names the flavors its pods are charged in, and whose hold they replace
                touched.update(self._pods_by_workload.get(change.key, ()))
                touched.update(self._pods_by_owner.get(change.key, ()))  # the pods naming it
                workload = snapshot.workloads.get(change.key)
                for owner in workload.owners if workload is not None else ():
                    touched.update(self._pods_by_owner.get(owner.uid, ()))
                self._workload_changed(change.key)
        if attribute_claim is not None:
            # Claims first, each once: a claim whose carrier changed re-attributes the pod that carried it and the
            # one that carries it now, and their claims are looked at too (to a fixed point: pure functions of
            # one snapshot, so each answer is final).
            expanded: set[str] = set()
            done: set[str] = set()
            due = set(touched)
            while due:
                for key in due:
                    pod = snapshot.pods.get(key)
                    if pod is not None:
                        claims.update(_claim_keys(snapshot, pod))
                    claims.update(self._claims_by_pod.get(key, ()))
                    old_usage = self._by_pod.get(key)
                    claims.update(old_usage.claims if old_usage is not None else ())
                expanded |= due
                carriers: set[str] = set()
                for key in claims - done:
                    claim = snapshot.claims.get(key)
                    entry = attribute_claim(snapshot, claim) if claim is not None and claim.allocation else None
                    previous = self._by_claim.get(key)
                    old_carrier = previous.pod if previous is not None and previous.carried else ""
                    new_carrier = entry.pod if entry is not None and entry.carried else ""
                    if old_carrier != new_carrier:
                        carriers.update(carrier for carrier in (old_carrier, new_carrier) if carrier)
                    self._set_claim(key, entry)
                done |= claims
                touched |= carriers
                due = carriers - expanded
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
                self._add_to_pod_set(old, -1)
                self._workload_changed(old.workload)
        if usage is None:
            return
        self._bookings.update(usage.charged)
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
            self._add_to_pod_set(usage, 1)
            self._workload_changed(usage.workload)

    def _add_to_pod_set(self, usage: PodUsage, sign: int) -> None:
        """Add (or take away) `usage` to what its Workload's pod set holds (a claim's own entry: pod set "")."""
        pod_sets = self._by_pod_set.setdefault(usage.workload, {})
        add_signed(pod_sets.setdefault(usage.pod_set, {}), usage.amounts, sign)
        if not pod_sets[usage.pod_set]:
            del pod_sets[usage.pod_set]
        if not pod_sets:
            del self._by_pod_set[usage.workload]

    def _set_claim(self, key: str, entry: ClaimUsage | None) -> None:
        old = self._by_claim.pop(key, None)
        if old is not None:
            for pod_key in old.depends:
                self._claims_by_pod[pod_key].discard(key)
                if not self._claims_by_pod[pod_key]:
                    del self._claims_by_pod[pod_key]
            self._claims_by_node[old.node].discard(key)
            self._shared_pool_claims.discard(key)
            if old.usage is not None:
                add_signed(self._totals, old.usage.amounts, -1)
                if old.usage.workload:
                    self._add_to_pod_set(old.usage, -1)
                    self._workload_changed(old.usage.workload)
        if entry is None:
            return
        self._by_claim[key] = entry
        for pod_key in entry.depends:
            self._claims_by_pod[pod_key].add(key)
        if entry.node:
            self._claims_by_node[entry.node].add(key)
        else:
            self._shared_pool_claims.add(key)
        if entry.usage is not None:
            self._bookings.update(entry.usage.charged)
            add_signed(self._totals, entry.usage.amounts, 1)
            if entry.usage.workload:
                self._add_to_pod_set(entry.usage, 1)
                self._workload_changed(entry.usage.workload)

    def take_bookings(self) -> dict[str, Booking]:
        """(claim uid -> booking) of the claims charged since the last call: the service remembers the first one
        of each claim (state/bookings.py), so its charge stays there while it is allocated."""
        with self._lock:
            found, self._bookings = self._bookings, {}
            return found

    def claim_entries(self) -> list[tuple[str, ClaimUsage]]:
        """(claim key, entry) of the allocated claims counted on their own entries (no pod carries them), and of
        those with a problem, as of the last `totals`, by claim key. Claims of no queue (pods Kueue does not
        govern) are left out."""
        with self._lock:
            found = [
                (key, entry)
                for key, entry in self._by_claim.items()
                if (not entry.carried and entry.usage is not None) or entry.problem
            ]
        return sorted(found, key=lambda item: item[0])

    def claim_entry(self, key: str) -> ClaimUsage | None:
        """How the allocated claim `key` is charged (carried by a pod, or its own entry), as of the last `totals`."""
        with self._lock:
            return self._by_claim.get(key)

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


def _claim_keys(snapshot: ClusterSnapshot, pod: Pod) -> list[str]:
    """The keys of the claims a pod names, has recorded in its status, or was generated a claim for."""
    keys = []
    for ref in pod.claims:
        name = ref.claim_name or pod.claim_statuses.get(ref.name)
        if name:
            keys.append(f"{pod.namespace}/{name}")
        else:
            generated = snapshot.generated_claims.get((pod.namespace, pod.uid, ref.name))
            if generated:
                keys.append(generated)
    if pod.extended_claim_name:
        keys.append(f"{pod.namespace}/{pod.extended_claim_name}")
    return keys
