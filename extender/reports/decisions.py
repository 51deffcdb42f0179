"""A pod's decision as people read it: every candidate node with its verdict, devices, quota charges and score,
the group verdict of a gang member, and the one-line summary of the pods list.

decision_json is what GET /diagnostics/pods/NS/NAME and POST /diagnostics/explain answer, what `dra-extender
explain --output json` prints and what the web view's pod page draws (decisions/pod_decision.py PodDecision,
decisions/ranking.py Ranking)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from extender.decisions.gang.quota import GangQuota
from extender.decisions.pod_decision import NodeVerdict, PodDecision
from extender.decisions.ranking import Ranking
from extender.decisions.scoring import ScoreBreakdown
from extender.reports.quantities import quantity
from extender.service import DecisionRecord
from extender.state.reservations import QuotaKey


def verdict_json(
    name: str, verdict: NodeVerdict, score: ScoreBreakdown | None, decision: PodDecision
) -> dict[str, Any]:
    out: dict[str, Any] = {"node": name, "passed": verdict.passed}
    if not verdict.passed:
        out.update(
            {
                "unresolvable": verdict.unresolvable,
                "category": verdict.category,
                "reason": verdict.reason,
                "detail": verdict.detail,
            }
        )
    if verdict.allocation is not None:
        out["devices"] = [
            {
                "claim": decision.claim_label(index, claim),
                "request": chosen.request,
                "device": "/".join(chosen.device.key),
                "deviceClass": chosen.device_class,
                "adminAccess": chosen.admin_access,
            }
            for index, claim in enumerate(verdict.allocation.claims)
            for chosen in claim.devices
        ]
    if verdict.quota is not None and verdict.quota.charges:
        out["quota"] = {
            "flavor": verdict.quota.flavor,
            "charges": [
                {"clusterQueue": cq, "flavor": flavor, "resource": resource, "amount": quantity(amount)}
                for (cq, flavor, resource), amount in verdict.quota.charges.items()
            ],
            "fits": [
                {
                    "flavor": fit.flavor,
                    "resource": fit.resource,
                    "outcome": fit.outcome.value,
                    "requested": quantity(fit.requested),
                    "usage": quantity(fit.usage),
                    "nominal": quantity(fit.nominal),
                    "available": quantity(fit.available),
                    "potentialAvailable": quantity(fit.potential_available),
                }
                for fit in verdict.quota.fits
            ],
        }
    if score is not None:
        out["score"] = {
            "total": score.total,
            "strategy": score.strategy,
            "deviceFit": round(score.device_fit, 3),
            "deviceFitParts": {
                "value": score.fit_parts.value,
                "keptWhole": score.fit_parts.kept_whole,
                "unitFill": score.fit_parts.unit_fill,
                "nodeFill": score.fit_parts.node_fill,
                "smallLeft": score.fit_parts.small_left,
                "smallUnit": score.fit_parts.small_unit,
            },
            "firstAvailable": round(score.first_available, 3),
            "quotaHeadroom": round(score.quota_headroom, 3),
        }
    return out


def charges_json(charges: Mapping[QuotaKey, Fraction]) -> list[dict[str, Any]]:
    return [
        {"clusterQueue": cq, "flavor": flavor, "resource": resource, "amount": quantity(amount)}
        for (cq, flavor, resource), amount in sorted(charges.items())
    ]


def gang_decision_json(gang: GangQuota) -> dict[str, Any]:
    """The group-level verdict of a gang member (decisions/gang/quota.py): what the group needs and holds."""
    need = gang.need
    return {
        "podGroup": need.group_key,
        "minCount": need.min_count,
        "placed": need.placed,
        "present": need.present,
        "othersNeeded": need.needed,
        "counted": {"alike": gang.counted.alike, "unlike": len(gang.counted.unlike), "free": gang.counted.free},
        "own": charges_json(gang.own),
        "groupHold": charges_json(gang.group_hold),
        "groupClaims": charges_json(gang.claims),
        "refused": gang.refused,
        "waiting": gang.waiting,
    }


def decision_json(ranking: Ranking, record: DecisionRecord | None = None) -> dict[str, Any]:
    decision = ranking.decision
    ranked = ranking.ranked()
    out: dict[str, Any] = {
        "pod": decision.pod_key,
        "podUID": decision.pod_uid,
        "snapshotVersion": decision.snapshot_version,
        "fastPath": decision.fast_path,
        "strategy": decision.strategy,
        "passed": sum(1 for _, v in ranked if v.passed),
        "failed": sum(1 for _, v in ranked if not v.passed),
        "quota": {
            "governed": decision.quota.governed,
            "clusterQueue": decision.quota.cluster_queue,
            "chosenFlavor": decision.quota.chosen_flavor,
            "reservation": [
                {"clusterQueue": cq, "flavor": flavor, "resource": resource, "amount": quantity(amount)}
                for (cq, flavor, resource), amount in decision.reservation.items()
            ],
        },
        "nodes": [verdict_json(name, v, ranking.score(name), ranking.decision) for name, v in ranked],
    }
    if decision.gang is not None:
        out["gang"] = gang_decision_json(decision.gang)
    if record is not None:
        out["verb"] = record.verb
        out["at"] = record.at
        out["durationMs"] = round(record.duration_seconds * 1000, 3)
    return out


def decision_summary(record: DecisionRecord) -> dict[str, Any]:
    """One line of the pod list: counts, queue, flavor, and the reason most failing nodes gave."""
    decision = record.decision
    reasons = Counter(v.reason or v.category for v in decision.verdicts.values() if not v.passed)
    reason, count = reasons.most_common(1)[0] if reasons else ("", 0)
    passed = sum(1 for v in decision.verdicts.values() if v.passed)
    return {
        "pod": decision.pod_key,
        "verb": record.verb,
        "at": record.at,
        "durationMs": round(record.duration_seconds * 1000, 3),
        "passed": passed,
        "failed": len(decision.verdicts) - passed,
        "governed": decision.quota.governed,
        "clusterQueue": decision.quota.cluster_queue,
        "chosenFlavor": decision.quota.chosen_flavor,
        "commonReason": reason,
        "commonReasonNodes": count,
    }


def ranked_nodes(decision: Mapping[str, Any]) -> list[tuple[int | None, dict[str, Any]]]:
    """The decision report's nodes with their rank (1 for the best passing node; None for a failing one):
    decision_json lists passing nodes by score, then failing ones."""
    rank = 0
    ranked: list[tuple[int | None, dict[str, Any]]] = []
    for node in decision["nodes"]:
        if node["passed"]:
            rank += 1
        ranked.append((rank if node["passed"] else None, node))
    return ranked
