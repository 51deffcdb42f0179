"""ClusterQueue spec.preemption: whom a pending workload of the queue may preempt, as Kueue v0.19.2 reads it
(apis/kueue/v1beta2/clusterqueue_types.go ClusterQueuePreemption, BorrowWithinCohort; the CRD's enums and
defaults). The extender never preempts; the decisions' preemption oracle reads these to know whether Kueue
could make room (decisions/quota/preemption_oracle.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from extender.state.errors import ObjectError
from extender.state.fields import child_path, get_int, get_map
from extender.state.kueue.parsing import enum_field

_INT32 = (-(2**31), 2**31 - 1)


class PreemptionPolicy(StrEnum):
    """kueue.PreemptionPolicy; which values a field accepts is its CRD enum (`_WITHIN_QUEUE`, `_RECLAIM`)."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
    ANY = "Any"


class BorrowWithinCohortPolicy(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


_WITHIN_QUEUE = (
    PreemptionPolicy.NEVER,
    PreemptionPolicy.LOWER_PRIORITY,
    PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY,
)
_RECLAIM = (PreemptionPolicy.NEVER, PreemptionPolicy.LOWER_PRIORITY, PreemptionPolicy.ANY)


@dataclass(frozen=True, slots=True)
class ClusterQueuePreemption:
    """The CRD's defaults: no preemption at all."""

    within_cluster_queue: PreemptionPolicy = PreemptionPolicy.NEVER
    reclaim_within_cohort: PreemptionPolicy = PreemptionPolicy.NEVER
    borrow_within_cohort: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    # borrowWithinCohort.maxPriorityThreshold; any int32, negative ones included (priorities may be negative)
    max_priority_threshold: int | None = None

    @property
    def borrowing_within_cohort_forbidden(self) -> bool:
        """classical.IsBorrowingWithinCohortForbidden."""
        return self.borrow_within_cohort is BorrowWithinCohortPolicy.NEVER


NO_PREEMPTION = ClusterQueuePreemption()


def _policy(raw: Mapping[str, Any], key: str, path: str, allowed: tuple[PreemptionPolicy, ...]) -> PreemptionPolicy:
    value = enum_field(raw, key, path, PreemptionPolicy, PreemptionPolicy.NEVER)
    if value not in allowed:
        raise ObjectError(
            child_path(path, key), f"unsupported value {value.value!r}; must be one of {', '.join(allowed)}"
        )
    return value


def parse_preemption(spec: Mapping[str, Any], path: str) -> ClusterQueuePreemption:
    """spec.preemption, validated as the CRD validates it."""
    raw = get_map(spec, "preemption", path)
    if not raw:
        return NO_PREEMPTION
    preemption_path = child_path(path, "preemption")
    borrow = get_map(raw, "borrowWithinCohort", preemption_path)
    borrow_path = child_path(preemption_path, "borrowWithinCohort")
    threshold = None
    if borrow.get("maxPriorityThreshold") is not None:
        threshold = get_int(borrow, "maxPriorityThreshold", borrow_path)
        if not _INT32[0] <= threshold <= _INT32[1]:
            raise ObjectError(child_path(borrow_path, "maxPriorityThreshold"), "must be a 32-bit integer")
    reclaim = _policy(raw, "reclaimWithinCohort", preemption_path, _RECLAIM)
    borrow_policy = enum_field(borrow, "policy", borrow_path, BorrowWithinCohortPolicy, BorrowWithinCohortPolicy.NEVER)
    if reclaim is PreemptionPolicy.NEVER and borrow_policy is not BorrowWithinCohortPolicy.NEVER:
        raise ObjectError(
            preemption_path, "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"
        )  # the CRD's x-kubernetes-validations rule
    return ClusterQueuePreemption(
        within_cluster_queue=_policy(raw, "withinClusterQueue", preemption_path, _WITHIN_QUEUE),
        reclaim_within_cohort=reclaim,
        borrow_within_cohort=borrow_policy,
        max_priority_threshold=threshold,
    )
