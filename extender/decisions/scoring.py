"""One node's score for a pod that passed there: an integer 0..10 with the parts that made it.

Three signals: device fit (MostAllocated packs devices so whole nodes stay free for large pods;
LeastAllocated spreads, as kube-scheduler's NodeResourcesFit scoring strategies of those names do for cpu and
memory), the firstAvailable choice (an earlier subrequest is preferred, as the DynamicResources plugin's
allocator does) and quota headroom (prefer flavors where the queue keeps room). kube-scheduler multiplies an
extender's score by its weight and adds it to its own, so the score stays inside 0..MaxExtenderPriority (10,
k8s.io/kube-scheduler/extender/v1). Ranking the nodes of a decision is ranking.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from typing import NamedTuple

from extender.decisions.devices.results import Allocation
from extender.decisions.quota.verdicts import NodeQuota

MAX_SCORE = 10
STRATEGY_MOST = "MostAllocated"
STRATEGY_LEAST = "LeastAllocated"
STRATEGIES = (STRATEGY_MOST, STRATEGY_LEAST)
STRATEGY_ANNOTATION = "dra-extender.kueue.x-k8s.io/scoring-strategy"


@dataclass(frozen=True, slots=True)
class ScoringWeights:
    device_fit: int = 2
    first_available: int = 1
    quota_headroom: int = 1


class ScoreBreakdown(NamedTuple):
    device_fit: float  # 0..1 before weighting
    first_available: float
    quota_headroom: float
    total: int  # 0..10
    strategy: str


_new_score = partial(tuple.__new__, ScoreBreakdown)  # hot path: skips the NamedTuple's Python-level __new__


def _device_fit(allocation: Allocation, driver_usage: Mapping[str, tuple[int, int]], strategy: str) -> float:
    """Share of the node's devices (of the drivers the pod uses) that are in use once the pod lands."""
    drivers: set[str] = set()
    taken = 0
    for claim in allocation.claims:
        for chosen in claim.devices:
            drivers.add(chosen.device.driver)
            taken += not chosen.admin_access
    if not drivers:
        return 0.5  # nothing to pack: neutral
    total = in_use = 0
    for driver in drivers:
        driver_total, driver_in_use = driver_usage.get(driver, (0, 0))
        total += driver_total
        in_use += driver_in_use
    if not total:
        return 0.5
    used_share = min(1.0, (in_use + taken) / total)
    return used_share if strategy == STRATEGY_MOST else 1.0 - used_share


def _first_available(allocation: Allocation) -> float:
    """1.0 when every firstAvailable request got its first subrequest, falling with the positions chosen."""
    count = chosen = 0
    for claim in allocation.claims:
        for index in claim.chosen_alternatives.values():
            count += 1
            chosen += index
    if not chosen:
        return 1.0
    # Each request can be at position 0..7 (at most 8 subrequests).
    return 1.0 - chosen / (7 * count)


def quota_headroom(quota: NodeQuota | None) -> float:
    """Share of the ClusterQueue's reachable quota left after the charge (the tightest resource counts)."""
    if quota is None or not quota.fits:
        return 1.0
    shares = []
    for fit in quota.fits:
        capacity = fit.potential_available if fit.potential_available > 0 else fit.nominal
        if capacity <= 0:
            shares.append(0.0)
            continue
        left = max(Fraction(0), fit.available - fit.requested)
        shares.append(float(min(Fraction(1), left / capacity)))
    return min(shares)


def node_parts(
    allocation: Allocation, driver_usage: Mapping[str, tuple[int, int]], strategy: str
) -> tuple[float, float]:
    """The parts of a score that depend on the node and the devices taken there (not on quota): device fit and
    the firstAvailable choice. `driver_usage`: driver -> (devices on the node, devices in use)."""
    return _device_fit(allocation, driver_usage, strategy), _first_available(allocation)


def combine(fit: float, first: float, headroom: float, strategy: str, weights: ScoringWeights) -> ScoreBreakdown:
    """The 0..10 total of the weighted parts (`headroom` from `quota_headroom`)."""
    weight_sum = weights.device_fit + weights.first_available + weights.quota_headroom
    if weight_sum <= 0:
        total = 0
    else:
        combined = fit * weights.device_fit + first * weights.first_available + headroom * weights.quota_headroom
        total = round(MAX_SCORE * combined / weight_sum)
    total = max(0, min(MAX_SCORE, total))
    return _new_score((fit, first, headroom, total, strategy))
