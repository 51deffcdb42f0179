"""Ranking the nodes that passed: integer scores 0..10 with the parts that made them.

Three signals: device fit (MostAllocated packs devices so whole nodes stay free for large pods;
LeastAllocated spreads), the firstAvailable choice (an earlier subrequest is preferred, as the in-tree plugin
does) and quota headroom (prefer flavors where the queue keeps room). kube-scheduler multiplies our score by
the extender weight and adds it to its own, so the score must stay inside 0..10.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from extender.decisions.allocator import Allocation
from extender.decisions.quota_decision import NodeQuota
from extender.state.dra import DeviceKey
from extender.state.inventory import NodeDevices

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


@dataclass(frozen=True, slots=True)
class ScoreBreakdown:
    device_fit: float  # 0..1 before weighting
    first_available: float
    quota_headroom: float
    total: int  # 0..10
    strategy: str
    parts: Mapping[str, float] = field(default_factory=dict)


def _device_fit(
    allocation: Allocation, devices: NodeDevices, allocated: Mapping[DeviceKey, int], strategy: str
) -> float:
    """Share of the node's devices of the pod's classes that are in use once the pod lands."""
    classes = {chosen.device_class for claim in allocation.claims for chosen in claim.devices}
    if not classes:
        return 0.5  # nothing to pack: neutral
    drivers = {chosen.device.driver for claim in allocation.claims for chosen in claim.devices}
    relevant = [device for device in devices.devices if device.driver in drivers]
    if not relevant:
        return 0.5
    in_use = sum(1 for device in relevant if device.key in allocated)
    taken = sum(1 for claim in allocation.claims for chosen in claim.devices if not chosen.admin_access)
    used_share = min(1.0, (in_use + taken) / len(relevant))
    return used_share if strategy == STRATEGY_MOST else 1.0 - used_share


def _first_available(allocation: Allocation) -> float:
    """1.0 when every firstAvailable request got its first subrequest, falling with the positions chosen."""
    positions = [index for claim in allocation.claims for index in claim.chosen_alternatives.values()]
    if not positions:
        return 1.0
    # Each request can be at position 0..7 (at most 8 subrequests).
    return 1.0 - sum(positions) / (7 * len(positions))


def _quota_headroom(quota: NodeQuota | None) -> float:
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


def score_node(
    allocation: Allocation,
    devices: NodeDevices,
    allocated: Mapping[DeviceKey, int],
    quota: NodeQuota | None,
    strategy: str,
    weights: ScoringWeights,
) -> ScoreBreakdown:
    fit = _device_fit(allocation, devices, allocated, strategy)
    first = _first_available(allocation)
    headroom = _quota_headroom(quota)
    weight_sum = weights.device_fit + weights.first_available + weights.quota_headroom
    if weight_sum <= 0:
        total = 0
    else:
        combined = fit * weights.device_fit + first * weights.first_available + headroom * weights.quota_headroom
        total = round(MAX_SCORE * combined / weight_sum)
    total = max(0, min(MAX_SCORE, total))
    return ScoreBreakdown(fit, first, headroom, total, strategy)
