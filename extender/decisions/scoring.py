"""One node's score for a pod that passed there: an integer 0..10 with the parts that made it.

Three signals: device fit (MostAllocated packs by what is left: a partition goes beside partitions rather than
onto a fresh GPU, into the fullest and smallest unit that takes it, on the fullest node; LeastAllocated spreads,
as kube-scheduler's NodeResourcesFit scoring strategies of those names do for cpu and memory; docs/placement.md),
the firstAvailable choice (an earlier subrequest is preferred, as the DynamicResources plugin's allocator does)
and quota headroom (prefer flavors where the queue keeps room). kube-scheduler multiplies an extender's score by
its weight and adds it to its own, so the score stays inside 0..MaxExtenderPriority (10,
k8s.io/kube-scheduler/extender/v1). Ranking the nodes of a decision is ranking.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from typing import NamedTuple

from extender.decisions.devices.results import Allocation
from extender.decisions.quota.verdicts import NodeQuota
from extender.state.dra.devices import consumed_by_name
from extender.state.indexes.device_room import PLAIN_DEVICES, FitParts, NodeRoom, UnitKey, used_share

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
    fit_parts: FitParts  # what device_fit is made of


ScoreParts = tuple[FitParts, float]  # (device fit, firstAvailable): what a node and the devices taken decide
_new_score = partial(tuple.__new__, ScoreBreakdown)  # hot path: skips the NamedTuple's Python-level __new__


# A unit counts as filled once this share of it is in use (float sums of exact counters).
FULL = 0.999
ZERO = Fraction(0)
# MostAllocated's device fit, nearly lexicographic: least capacity left idle in the units the pod draws on (best
# fit: a partition beside partitions leaves less idle than one on a fresh GPU, a 20Gi partition on a 40Gi GPU
# less than on an 80Gi one), then the fuller node (packing: of two equal fits, the node already in use), then
# the smaller units (the bigger unit stays for a bigger shape). The later weights are small enough that they
# never outweigh more than a few Gi of idle capacity.
SMALL_LEFT_WEIGHT, NODE_FILL_WEIGHT, SMALL_UNIT_WEIGHT = 0.995, 0.004, 0.001
LEFT_REFERENCE = float(2**40)  # 1Ti: capacities are compared in their own units (bytes of GPU memory)
NEUTRAL_FIT = FitParts(0.5, 0.5, 0.5, 0.5, 0.5, 0.5)  # nothing to pack


def _added_by_unit(allocation: Allocation, room: NodeRoom) -> tuple[dict[UnitKey, dict[str, Fraction]], set[UnitKey]]:
    """What the allocation adds to each unit it draws on (counters of a partition, capacity of a share, one
    more of a pool's plain devices), and the units it takes whole (a shareable device taken without sharing)."""
    added: dict[UnitKey, dict[str, Fraction]] = {}
    whole: set[UnitKey] = set()
    units_of = room.device_units
    for claim in allocation.claims:
        for chosen in claim.devices:
            device = chosen.device
            keys = units_of.get(device.key)
            if keys is None or chosen.admin_access:
                continue
            if device.consumes_counters:
                for use in device.consumes_counters:
                    bucket = added.setdefault(("set", device.driver, device.pool, use.counter_set), {})
                    for name, amount in use.counters.items():
                        bucket[name] = bucket.get(name, ZERO) + amount
            elif chosen.shared:
                bucket = added.setdefault(keys[0], {})
                for name, amount in consumed_by_name(chosen.consumed_capacity, device.driver).items():
                    bucket[name] = bucket.get(name, ZERO) + amount
            elif keys[0][0] == "plain":
                bucket = added.setdefault(keys[0], {})
                bucket[PLAIN_DEVICES] = bucket.get(PLAIN_DEVICES, ZERO) + 1
            else:
                added.setdefault(keys[0], {})
                whole.add(keys[0])
    return added, whole


def device_fit(allocation: Allocation, room: NodeRoom, strategy: str) -> FitParts:
    """How usable the node's units stay once the pod's devices are taken (see FitParts): O(devices taken).

    MostAllocated weighs idle capacity, unit size and node fill (SMALL_LEFT_WEIGHT...); LeastAllocated spreads,
    like kube-scheduler's NodeResourcesFit strategy of that name for cpu and memory: the share of the node left
    free."""
    added, whole = _added_by_unit(allocation, room)
    if not added:
        return NEUTRAL_FIT
    size_sum = kept = fill = left = 0.0
    grown: dict[str, float] = {}
    for key, extra in added.items():
        unit = room.units[key]
        if key in whole or not unit.totals:
            after = 1.0
        else:
            after = used_share(
                unit.totals, {name: unit.held.get(name, ZERO) + extra.get(name, ZERO) for name in unit.totals}
            )
        size_sum += unit.size
        fill += unit.size * after
        left += unit.size * (1.0 - after)
        kept += unit.size if unit.used > 0 or after >= FULL else 0.0
        grown[unit.driver] = grown.get(unit.driver, 0.0) + unit.size * max(0.0, after - unit.used)
    node_total = node_used = 0.0
    for driver, growth in grown.items():
        total, in_use = room.by_driver.get(driver, (0.0, 0.0))
        node_total += total
        node_used += in_use + growth
    return _fit_parts(size_sum, kept, fill, left, node_total, node_used, strategy)


def _fit_parts(
    size_sum: float, kept: float, fill: float, left: float, node_total: float, node_used: float, strategy: str
) -> FitParts:
    """device_fit's value from what it adds up over the units drawn on (their size, the size kept whole, filled
    and left idle) and the node's units of those drivers (their size, the size in use once the pod is in)."""
    node_fill = round(min(1.0, node_used / node_total), 2) if node_total else 1.0
    kept_whole, unit_fill = round(kept / size_sum, 2), round(fill / size_sum, 2)
    small_left = round(1.0 - min(1.0, left / LEFT_REFERENCE), 4)
    small_unit = round(1.0 - min(1.0, size_sum / LEFT_REFERENCE), 4)
    if strategy != STRATEGY_MOST:
        return FitParts(round(1.0 - node_fill, 2), kept_whole, unit_fill, node_fill, small_left, small_unit)
    value = SMALL_LEFT_WEIGHT * small_left + SMALL_UNIT_WEIGHT * small_unit + NODE_FILL_WEIGHT * node_fill
    return FitParts(round(value, 6), kept_whole, unit_fill, node_fill, small_left, small_unit)


def unit_fit(size: float, used: float, after: float, node_held: float, node_total: float, strategy: str) -> FitParts:
    """device_fit for a pod that draws on units of one driver that are alike (`size` in all, each `used` before
    and `after` the pod), on a node whose units of that driver have `node_total` in all with `node_held` in use:
    the same value device_fit computes from the allocation and the room, from these numbers (what a model of a
    cluster has without the objects)."""
    kept = size if used > 0 or after >= FULL else 0.0
    growth = size * max(0.0, after - used)
    return _fit_parts(size, kept, size * after, size * (1.0 - after), node_total, node_held + growth, strategy)


def bare_fit(value: float) -> FitParts:
    """A device fit of `value` with no parts to show (what combine needs of a value computed elsewhere)."""
    return FitParts(value, 0.0, 0.0, 0.0, 0.0, 0.0)


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


def node_parts(allocation: Allocation, room: NodeRoom, strategy: str) -> ScoreParts:
    """The parts of a score that depend on the node and the devices taken there (not on quota): device fit and
    the firstAvailable choice. `room`: what the node's units have left (state/indexes/device_room.py)."""
    return device_fit(allocation, room, strategy), _first_available(allocation)


# node_parts of an allocation that takes no device, on any node: nothing to pack, no alternative chosen.
NO_DEVICE_PARTS: ScoreParts = (NEUTRAL_FIT, 1.0)

NO_SCALE = (0.0, 1.0)  # (lowest, span): device fit values as they are


def fit_scale(values: Iterable[float]) -> tuple[float, float]:
    """How the device fit is scaled over the nodes of one ranking: the lowest value to 0 and the highest to 1,
    as kube-scheduler's score plugins normalize their scores over the nodes scored (framework
    ScoreExtensions.NormalizeScore). Without it the fit would move a 0..10 total by steps of a fifth (weight 2 of
    4), and a partition on half of a 40Gi GPU would tie with one on a quarter of an 80Gi GPU. NO_SCALE when
    every node has the same fit (nothing to tell apart)."""
    low = high = None
    for value in values:
        if low is None or value < low:
            low = value
        if high is None or value > high:
            high = value
    if low is None or high is None or high <= low:
        return NO_SCALE
    return (low, high - low)


def combine(
    fit_parts: FitParts,
    first: float,
    headroom: float,
    strategy: str,
    weights: ScoringWeights,
    scale: tuple[float, float] = NO_SCALE,
) -> ScoreBreakdown:
    """The 0..10 total of the weighted parts (`headroom` from `quota_headroom`; the device fit scaled by
    `scale`, fit_scale's)."""
    fit = (fit_parts.value - scale[0]) / scale[1]
    weight_sum = weights.device_fit + weights.first_available + weights.quota_headroom
    if weight_sum <= 0:
        total = 0
    else:
        combined = fit * weights.device_fit + first * weights.first_available + headroom * weights.quota_headroom
        total = round(MAX_SCORE * combined / weight_sum)
    total = max(0, min(MAX_SCORE, total))
    return _new_score((fit, first, headroom, total, strategy, fit_parts))
