"""The reservation lifecycle: when a pod's held charge turns into usage, or is let go.

The ledger itself (state/reservations.py) only holds and sums charges. The rules of when to release one need
the cluster view and the usage attribution (a pod counts as usage once it is bound, or being bound, with every
claim allocated), so they live here, in the service, next to the one place that reconciles: before building a
quota view.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.decisions.quota.attribution import in_flight_node
from extender.state.core import Pod
from extender.state.reservations import Reservation
from extender.state.snapshot import NODE_DEVICES, Change, ClusterSnapshot

KEEP = "pending"  # not seen in the view yet
# The identity prefix of a gang attempt's hold (service/gang_attempts.py hold_id), which reconciling leaves alone
GROUP_HOLD_PREFIX = "podgroup:"
SEEN = "seen"  # in the view, not bound: keep, and remember it was seen (its disappearance means deletion)


class GonePods:
    """The UIDs of the pods the view has shown deleted (or re-created under another UID), the newest `limit`.

    kube-scheduler's informer can be behind ours: it may still schedule, and ask filter about, a pod our view
    has already seen deleted. Absent from the view, such a pod looks like one our watch has not shown yet, and a
    reservation for it would be kept (not seen, so its absence means nothing) until its TTL, refusing the next
    pods of its ClusterQueue for a minute (tests/e2e/test_restart_window.py caught it: a round's second pod,
    retried on its first pod's deletion, asked about once its own deletion was in our view). Its UID here says
    it is gone."""

    def __init__(self, limit: int = 8192) -> None:
        self.limit = limit
        self._uids: dict[str, None] = {}

    def record(self, before: ClusterSnapshot | None, after: ClusterSnapshot, changes: Sequence[Change] | None) -> None:
        """The pods `changes` (from `before` to `after`) deleted or replaced."""
        if before is None or changes is None:
            return
        for change in changes:
            if change.kind != "Pod":
                continue
            old = before.pods.get(change.key)
            if old is None or not old.uid:
                continue
            new = after.pods.get(change.key)
            if new is None or new.uid != old.uid:
                self._uids[old.uid] = None
        while len(self._uids) > self.limit:
            del self._uids[next(iter(self._uids))]

    def __contains__(self, uid: object) -> bool:
        return uid in self._uids


NO_GONE_PODS = GonePods(0)


def reservation_state(snapshot: ClusterSnapshot, reservation: Reservation, gone: GonePods = NO_GONE_PODS) -> str:
    """KEEP, SEEN, or the reason to release it: "bound", "bound elsewhere", "finished", "deleted".

    A reservation taken over from the previous process's journal was made for a pod that existed then (kube-
    scheduler filters pods from its informer): once the view is complete (the first full lists after the
    restart; never before, whatever the previous process had seen), a pod absent from it or re-created under
    another UID is gone, and one bound to another node than the one bind confirmed is placed by someone else,
    whose charge usage (or the placed pods' provisional charge, decisions/quota/attribution.py
    provisional_usage) shows. Held until its TTL instead, it would park every pod of its ClusterQueue behind
    quota nobody will use."""
    if reservation.pod_uid.startswith(GROUP_HOLD_PREFIX):
        # A gang's hold has no pod: its attempt (service/gang_attempts.py) lets it go when the group is placed,
        # given up or gone; a restored one is adopted into an attempt before this first runs on a synced view.
        return KEEP
    pod = snapshot.pods.get(reservation.pod_key)
    if pod is None or (reservation.pod_uid and pod.uid and pod.uid != reservation.pod_uid):
        if reservation.restored:
            # Seen or not by the previous process, this one's view says nothing until its lists are complete: a
            # /metrics scrape or a diagnostics call builds a quota view before that, and a promise let go then
            # is quota given twice.
            return "deleted" if snapshot.synced else KEEP
        return "deleted" if reservation.seen or reservation.pod_uid in gone else KEEP
    if reservation.restored and reservation.node and pod.node_name and pod.node_name != reservation.node:
        return "bound elsewhere"
    if (
        (pod.node_name or in_flight_node(snapshot, pod))
        and all(
            (claim := snapshot.claim_for_pod(pod, ref)) is not None and claim.allocation is not None
            for ref in pod.claims
        )
        and _extended_claim_seen(snapshot, pod)
    ):
        # Pods and claims arrive on separate watches: until the allocation is seen too, usage does not show the
        # charge yet, so releasing the reservation on the binding alone would count nothing. An allocation
        # reserved for the pod before its binding shows is already counted (in flight).
        return "bound"
    if pod.is_terminal:
        return "finished"
    if pod.deleting:
        return "deleted"
    return SEEN


def _extended_claim_seen(snapshot: ClusterSnapshot, pod: Pod) -> bool:
    """The claim kube-scheduler made for the pod's DRA-backed extended resources, when it named one, is
    allocated in the view (its usage then shows it)."""
    if not pod.extended_claim_name:
        return True
    claim = snapshot.claims.get(f"{pod.namespace}/{pod.extended_claim_name}")
    return claim is not None and claim.allocation is not None


def pods_to_reconcile(snapshot: ClusterSnapshot, changes: Sequence[Change] | None) -> tuple[set[str], set[str]] | None:
    """(pod keys, pod uids) whose reservations `changes` may let go; None when every reservation must be looked at.

    `reservation_state` reads a reservation's pod, that pod's claims and the pools' nodes. A Pod change names its
    pod. A claim can let a reservation go only once it is allocated, and then it names its pods: the in-tree
    plugin writes the allocation and reservedFor in one update in PreBind (pkg/scheduler/framework/plugins/
    dynamicresources/dynamicresources.go bindClaim), and a generated claim (or the scheduler's extended-resource
    claim) is owned by its pod. A claim reserved for a consumer that is not a pod names none, and a changed
    ResourceSlice (pools and their nodes) or a history that no longer reaches back (None) can concern any: all
    of them then."""
    if changes is None:
        return None
    keys: set[str] = set()
    uids: set[str] = set()
    for change in changes:
        kind = change.kind
        if kind == "Pod":
            keys.add(change.key)
        elif kind == "ResourceClaim":
            claim = snapshot.claims.get(change.key)
            if claim is None or claim.allocation is None:
                continue  # a claim gone or not allocated lets nobody's reservation go
            uids.update(claim.owner_uids)
            for consumer in claim.reserved_for:
                if consumer.resource != "pods":
                    return None
                uids.add(consumer.uid)
                keys.add(f"{claim.namespace}/{consumer.name}")
        elif kind in ("ResourceSlice", NODE_DEVICES):
            return None
    return keys, uids
