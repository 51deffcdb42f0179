"""What a bind must show before the extender binds: that its own filter passed the pod on that node.

kube-scheduler binds through an extender only pods that extender is interested in (pkg/scheduler/schedule_one.go
``extendersBinding``: ``IsBinder`` and ``IsInterested``), the same pods whose scheduling cycle called its filter
(``findNodesThatPassExtenders``), and only on a node that filter passed. A bind the extender never filtered for (a
forged call, or a pod of another scheduler) is refused, so that whoever reaches the verbs cannot bind any pod to
any node.

Kept per pod (its UID, or namespace/name without one): the filter's decision (the per-node verdicts it already
holds; nothing is copied), the pod's scheduler name as filter received it, and when. Bounded like the decision
history: at most `max_pods` pods and `max_verdicts` node verdicts in all, the oldest pods going first, and a
proof older than `max_age_seconds` proves nothing (a gang's members wait at Permit before they bind, so the age
allows minutes). Kept only while the bind verb is enabled.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from extender.decisions.pod_decision import PodDecision


@dataclass(frozen=True, slots=True)
class FilterProof:
    at: float
    pod_key: str
    scheduler_name: str
    decision: PodDecision


class BindProofs:
    def __init__(
        self,
        max_pods: int = 4096,
        max_verdicts: int = 1_000_000,
        max_age_seconds: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_pods = max_pods
        self._max_verdicts = max_verdicts
        self._max_age = max_age_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._proofs: OrderedDict[str, FilterProof] = OrderedDict()
        self._verdicts = 0

    def remember(self, identity: str, pod_key: str, scheduler_name: str, decision: PodDecision) -> None:
        """The filter's decision for a pod (the newest replaces an older one)."""
        proof = FilterProof(self._clock(), pod_key, scheduler_name, decision)
        with self._lock:
            old = self._proofs.pop(identity, None)
            if old is not None:
                self._verdicts -= len(old.decision.verdicts)
            self._proofs[identity] = proof
            self._verdicts += len(decision.verdicts)
            while self._proofs and (len(self._proofs) > self._max_pods or self._verdicts > self._max_verdicts):
                _, evicted = self._proofs.popitem(last=False)
                self._verdicts -= len(evicted.decision.verdicts)

    def refusal(self, identity: str, pod_key: str, node: str, scheduler_names: tuple[str, ...]) -> str:
        """Why binding the pod to `node` is refused ("" when the extender's own filter passed it there)."""
        with self._lock:
            proof = self._proofs.get(identity)
        if proof is None or self._clock() - proof.at > self._max_age:
            return f"the extender has not filtered pod {pod_key} (bind follows the extender's own filter)"
        if proof.pod_key != pod_key:
            return f"the pod filtered under this UID is {proof.pod_key}, not {pod_key}"
        if proof.scheduler_name not in scheduler_names:
            return (
                f"pod {pod_key} names scheduler {proof.scheduler_name!r}, not one this extender binds for "
                f"(bind.schedulerNames: {', '.join(scheduler_names)})"
            )
        verdict = proof.decision.verdicts.get(node)
        if verdict is None or not verdict.passed:
            return f"the extender's filter did not pass pod {pod_key} on node {node}"
        return ""

    def forget(self, identity: str) -> None:
        with self._lock:
            old = self._proofs.pop(identity, None)
            if old is not None:
                self._verdicts -= len(old.decision.verdicts)

    def __len__(self) -> int:
        return len(self._proofs)
