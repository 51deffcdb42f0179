"""What the service raises to the transport: a bind that failed, a view not complete enough to decide on."""

from __future__ import annotations


class BindError(RuntimeError):
    """Binding the pod through the API failed; nothing stays reserved for it."""


class NotSyncedError(RuntimeError):
    """The cluster view is not complete (initial lists pending, or watches broken past the stale grace).

    A verdict from an incomplete view can over-commit: with no ClusterQueue listed yet quota looks ungoverned,
    with claims not listed yet devices look free. filter answers kube-scheduler with a non-empty `Error`
    instead, which pkg/scheduler/schedule_one.go findNodesThatPassExtenders returns as the scheduling error
    (ignorable: false). The pod then has no unschedulable plugin, so scheduling_queue.go
    determineSchedulingHintForInFlightPod requeues it with backoff (1 s doubling to 10 s), not into the
    unschedulable pool: it is retried promptly once the view is synced.
    """


class NotLeadingError(NotSyncedError):
    """Another kube-scheduler replica leads (service/leadership.py): this extender holds no quota, and refuses
    pods it would have to reserve for, answered as an unsynced view is (kube-scheduler retries with backoff)."""
