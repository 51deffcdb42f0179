"""The reservation lifecycle: when a pod's held charge turns into usage, or is let go.

The ledger itself (state/reservations.py) only holds and sums charges. The rules of when to release one need
the cluster view and the usage attribution (a pod counts as usage once it is bound, or being bound, with every
claim allocated), so they live here, in the service, next to the one place that reconciles: before building a
quota view.
"""

from __future__ import annotations

from extender.decisions.usage import in_flight_node
from extender.state.core import Pod
from extender.state.reservations import Reservation
from extender.state.store import ClusterSnapshot

KEEP = "pending"  # not seen in the view yet
SEEN = "seen"  # in the view, not bound: keep, and remember it was seen (its disappearance means deletion)


def reservation_state(snapshot: ClusterSnapshot, reservation: Reservation) -> str:
    """KEEP, SEEN, or the reason to release it: "bound", "finished", "deleted"."""
    pod = snapshot.pods.get(reservation.pod_key)
    if pod is None or (reservation.pod_uid and pod.uid and pod.uid != reservation.pod_uid):
        return "deleted" if reservation.seen else KEEP
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
