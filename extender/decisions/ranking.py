"""Ranking the nodes that passed: each node's score and the parts that made it (scoring.py), for prioritize and
the explain view.

kube-scheduler's prioritize verb (pkg/scheduler/extender.go HTTPExtender.Prioritize) asks for a score per node it
kept; it multiplies ours by the extender weight. A score's node parts (device fit, firstAvailable choice) depend
only on the node's devices and the devices taken there, so they are remembered by the objects the allocator
hands every pod of one shape (caches.node_scores, caches.allocation_scores); only quota headroom, which moves
with every reservation, is combined afresh, once per NodeQuota.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import cast

from extender.decisions.caches import DecisionCaches
from extender.decisions.devices.results import Allocation
from extender.decisions.devices.settled import NO_SCORE_GROUPS, SettledNodes
from extender.decisions.pod_decision import NodeVerdict, PodDecision
from extender.decisions.scoring import (
    NO_DEVICE_PARTS,
    NO_SCALE,
    ScoreBreakdown,
    ScoreParts,
    ScoringWeights,
    combine,
    fit_scale,
    node_parts,
    quota_headroom,
)
from extender.state.snapshot import ClusterSnapshot

_NOT_LOOKED_UP = object()  # no NodeQuota seen yet (None is one: an ungoverned pod's)


@dataclass(frozen=True, slots=True)
class Ranking:
    """A decision with the scores of the nodes that were asked about (prioritize) or of every passing node."""

    decision: PodDecision
    scores: Mapping[str, ScoreBreakdown]

    def score(self, node: str) -> ScoreBreakdown | None:
        """The node's score breakdown, or None for a node that did not pass (or a fast-path decision)."""
        return self.scores.get(node)

    def ranked(self) -> list[tuple[str, NodeVerdict]]:
        """Passed nodes by score (highest first), then failed ones; ties by name for a stable order."""

        def order(item: tuple[str, NodeVerdict]) -> tuple[bool, int, str]:
            name, verdict = item
            score = self.scores.get(name) if verdict.passed else None
            return (not verdict.passed, -(score.total if score else 0), name)

        return sorted(self.decision.verdicts.items(), key=order)


def score_nodes(
    decision: PodDecision,
    node_names: Iterable[str],
    snapshot: ClusterSnapshot,
    caches: DecisionCaches,
    weights: ScoringWeights,
) -> Ranking:
    """Scores of the named nodes that passed (prioritize asks for a few, explain for all).

    The node parts of a score (device fit, firstAvailable choice) of the commonest pods are remembered in
    `caches.node_scores`: a one-claim ExactCount allocation on the fast path takes its devices from the node's
    free-list entry (the same tuple for every pod of that shape until the node's allocations change), so the
    parts are keyed by that tuple's identity (held by the memo, so it cannot be reused). The tuple stands for the
    node's allocation versions too: it belongs to one free-list entry, which is valid for one pair of versions
    (a change makes a new entry with new tuples), and the node's room read below follows the same versions.
    The commonest pod's allocation on a node is itself kept in that entry and handed to every pod of its shape,
    so the parts are also kept by the allocation's identity (`caches.allocation_scores`, the same argument):
    a node costs one lookup. Both are keyed by identity because the value of a tuple of chosen devices or of an
    allocation hashes every device in it, per node. Nodes with equal parts share one combined breakdown per
    headroom. Only the headroom, which moves with every
    reservation, is combined afresh, once per NodeQuota (shared by every node of one charge and flavor).
    A decision made of the remembered answers of its shape (`PodDecision.settled`) skips even that lookup when
    every node asked passed with a remembered answer (prioritize's list): its nodes' parts are read from the
    answers' score groups and mapped to one breakdown per distinct parts and headroom (`_scores_by_group`). A pod
    that takes no device (a pod of a LocalQueue with cpu and memory only) has the same parts on every node, so
    only its headroom is looked up (`_scores_by_headroom`)."""
    if not decision.verdicts.allocations:  # nothing for us to decide, or refused everywhere: no node to score
        return Ranking(decision, {})
    strategy = decision.strategy
    names = node_names if isinstance(node_names, list) else list(node_names)
    settled = decision.settled
    if (
        decision.quota.pod_rejection is None
        and (settled is not None or decision.takes_no_devices)
        and all(map(decision.verdicts.allocations.__contains__, names))  # none refused, none not looked at
    ):
        if settled is not None:
            grouped = _scores_by_group(decision, names, settled, snapshot, caches, strategy, weights)
        else:  # the same device parts on every node (no device taken): only the quota headroom tells them apart
            grouped = _scores_of_one_part(decision, names, caches.score_part(NO_DEVICE_PARTS), weights)
        if grouped is not None:
            return Ranking(decision, grouped)
        # Asked about nodes that did not pass or were decided afresh (explain asks about all): the device fit
        # is scaled over the nodes asked that passed, so those are scored one by one below.
    return Ranking(decision, _scores_node_by_node(decision, names, snapshot, caches, strategy, weights))


def _scores_by_group(
    decision: PodDecision,
    names: list[str],
    settled: SettledNodes,
    snapshot: ClusterSnapshot,
    caches: DecisionCaches,
    strategy: str,
    weights: ScoringWeights,
) -> dict[str, ScoreBreakdown] | None:
    """The scores of `names`, for a decision whose allocations are remembered ones (`settled`), when every node
    asked passed with a remembered allocation; None otherwise (the caller scores node by node). A node's parts
    are one lookup in the answers' score groups (computed here for the nodes they lack, and published for the
    next pod of this shape); nodes of equal parts and one quota headroom (one NodeQuota) share a breakdown, so
    past the lookups the scores are a few comprehensions in C. The work is the nodes asked, never the nodes
    remembered: at 65,000 nodes kube-scheduler asks about 5 % of them. Every node asked has an allocation in
    the decision (score_nodes checks)."""
    groups = settled.scores.get(strategy, NO_SCORE_GROUPS)
    looked_up = list(map(groups.parts.get, names))
    if None in looked_up:
        allocation_of = settled.allocations.get
        found: dict[str, ScoreParts] = {}
        for index, node in enumerate(names):
            if looked_up[index] is None:
                allocation = allocation_of(node)
                if allocation is None:
                    return None  # decided afresh: not a remembered answer
                looked_up[index] = found[node] = _score_parts(allocation, snapshot, node, caches, strategy)
        settled.scores[strategy] = groups.with_nodes(found)
    return _scores_by_headroom(decision, names, cast(list[ScoreParts], looked_up), weights)  # no None left


def _scores_by_headroom(
    decision: PodDecision, names: list[str], node_parts: list[ScoreParts], weights: ScoringWeights
) -> dict[str, ScoreBreakdown] | None:
    """The scores of `names` from their parts (`node_parts`, interned, in the same order) and quota's headroom
    on each: one breakdown per distinct (parts, headroom), mapped to the nodes in C. None when quota refused a
    node asked (the caller scores node by node)."""
    strategy = decision.strategy
    quota = decision.quota
    distinct = {id(parts): parts for parts in node_parts}  # interned (caches.score_part): by identity
    scale = fit_scale(parts[0].value for parts in distinct.values())
    if not quota.per_node:  # outside quota: full headroom on every node
        breakdowns = {
            key: combine(parts[0], parts[1], 1.0, strategy, weights, scale) for key, parts in distinct.items()
        }
        return dict(zip(names, map(breakdowns.__getitem__, map(id, node_parts)), strict=True))
    headroom_of: dict[str, float] = {}
    for node_quota, bucket in quota.passed_groups:
        headroom_of.update(dict.fromkeys(bucket, quota_headroom(node_quota)))
    if not all(map(headroom_of.__contains__, names)):
        return None  # quota refused one of the nodes asked
    keys = list(zip(map(id, node_parts), map(headroom_of.__getitem__, names), strict=True))
    by_key = {
        (key, headroom): combine(distinct[key][0], distinct[key][1], headroom, strategy, weights, scale)
        for key, headroom in set(keys)
    }
    return dict(zip(names, map(by_key.__getitem__, keys), strict=True))


def _scores_of_one_part(
    decision: PodDecision, names: list[str], parts: ScoreParts, weights: ScoringWeights
) -> dict[str, ScoreBreakdown] | None:
    """_scores_by_headroom when every node has the same parts (a pod that takes no device): one breakdown per
    quota bucket, given to the bucket's nodes and then to the nodes asked in C, with no per-node key built. None
    when quota refused a node asked (the caller scores node by node)."""
    strategy = decision.strategy
    quota = decision.quota
    scale = fit_scale((parts[0].value,))
    if not quota.per_node:  # outside quota: full headroom on every node
        return dict.fromkeys(names, combine(parts[0], parts[1], 1.0, strategy, weights, scale))
    by_headroom: dict[float, ScoreBreakdown] = {}
    of_node: dict[str, ScoreBreakdown] = {}
    for node_quota, bucket in quota.passed_groups:
        headroom = quota_headroom(node_quota)
        breakdown = by_headroom.get(headroom)
        if breakdown is None:
            breakdown = by_headroom[headroom] = combine(parts[0], parts[1], headroom, strategy, weights, scale)
        of_node.update(dict.fromkeys(bucket, breakdown))
    if not all(map(of_node.__contains__, names)):
        return None  # quota refused one of the nodes asked
    return dict(zip(names, map(of_node.__getitem__, names), strict=True))


def _scores_node_by_node(
    decision: PodDecision,
    names: list[str],
    snapshot: ClusterSnapshot,
    caches: DecisionCaches,
    strategy: str,
    weights: ScoringWeights,
) -> dict[str, ScoreBreakdown]:
    """score_nodes for a decision without remembered score groups: a lookup per node (see score_nodes)."""
    quota = decision.quota
    # Only quota refuses nodes that have an allocation (device refusals carry none): by bucket, or every node
    # when it refuses the pod itself (its queue is gone, ...; then there is no NodeQuota at all).
    refused_by_quota = quota.pod_rejection is not None or bool(quota.refused_groups)
    scores: dict[str, ScoreBreakdown] = {}
    verdicts = decision.verdicts
    allocations, per_node = verdicts.allocations, verdicts.per_node
    failures = verdicts.failures.names
    # Without NodeQuotas the headroom is 1.0 on every node.
    governed = bool(per_node)
    # By identity: a NodeQuota holds a dict (no value hash), and nodes of one bucket share one object, which
    # per_node keeps alive through the call.
    headrooms: dict[int, float] = {}
    by_headroom: dict[float, dict[ScoreParts, ScoreBreakdown]] = {}
    headroom = 1.0
    combined = by_headroom[headroom] = {}  # parts -> breakdown, at the current headroom
    last_quota: object = _NOT_LOOKED_UP
    by_allocation = caches.allocation_scores
    allocation_of, quota_of, parts_of = allocations.get, per_node.get, by_allocation.table(strategy).get
    for node in names:  # once per passing node: lookups only, on the methods bound above
        allocation = allocation_of(node)
        if allocation is None or (refused_by_quota and node in failures):
            continue
        remembered = parts_of(id(allocation))  # by identity, checked below: see score_nodes
        if remembered is not None and remembered[0] is allocation:
            parts = remembered[1]
        else:
            parts = _score_parts(allocation, snapshot, node, caches, strategy)
            parts_of = by_allocation.table(strategy).get
        if governed:
            node_quota = quota_of(node)
            if node_quota is not last_quota:  # runs of nodes share one NodeQuota: look it up only when it changes
                last_quota = node_quota
                found = headrooms.get(id(node_quota))
                if found is None:
                    found = headrooms[id(node_quota)] = quota_headroom(node_quota)
                if found != headroom:
                    headroom = found
                    combined = by_headroom.setdefault(headroom, {})
        score = combined.get(parts)  # nodes with the same parts and headroom get the same breakdown
        if score is None:
            score = combined[parts] = combine(parts[0], parts[1], headroom, strategy, weights)
        scores[node] = score
    return _scaled(scores, by_headroom, strategy, weights)


def _scaled(
    scores: dict[str, ScoreBreakdown],
    by_headroom: dict[float, dict[ScoreParts, ScoreBreakdown]],
    strategy: str,
    weights: ScoringWeights,
) -> dict[str, ScoreBreakdown]:
    """`scores` (combined unscaled) with the device fit scaled over the nodes scored (fit_scale): each distinct
    breakdown is made again once, and the nodes are mapped to the new ones in one comprehension."""
    scale = fit_scale(parts[0].value for combined in by_headroom.values() for parts in combined)
    if scale == NO_SCALE:
        return scores
    again = {
        id(score): combine(parts[0], parts[1], headroom, strategy, weights, scale)
        for headroom, combined in by_headroom.items()
        for parts, score in combined.items()
    }
    return {node: again[id(score)] for node, score in scores.items()}


def _score_parts(
    allocation: Allocation, snapshot: ClusterSnapshot, node: str, caches: DecisionCaches, strategy: str
) -> ScoreParts:
    """A node's (device fit, firstAvailable) parts, interned; remembered for one-claim allocations, by the
    devices taken and by the allocation itself (see score_nodes): the shortcut's and the full search's are kept
    per node until its allocations change (free-list entries, caches.searched), so the same objects come back."""
    claims = allocation.claims
    if len(claims) != 1:  # several claims: an allocation made afresh for each pod
        return caches.score_part(node_parts(allocation, caches.device_room.room(snapshot, node), strategy))
    memo = caches.node_scores
    taken = claims[0].devices
    remembered = memo.get(id(taken), strategy)
    if remembered is None or remembered[0] is not taken:
        parts = caches.score_part(node_parts(allocation, caches.device_room.room(snapshot, node), strategy))
        memo.put(id(taken), (taken, parts), strategy)
    else:
        parts = remembered[1]
    caches.allocation_scores.put(id(allocation), (allocation, parts), strategy)
    return parts
