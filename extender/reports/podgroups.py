"""A PodGroup as the extender sees it: its policy and condition, each member and where its last decision would put
it, what the group needs and holds, the placements its last attempt tried (service/gang_attempts.py GangStatus),
and the queue each of its allocated claims counts against. GET /diagnostics/podgroups/NS/NAME, the web view's
PodGroup page and `kubectl dra-quota podgroup` all show this report."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from extender.decisions.ranking import Ranking
from extender.reports.decisions import charges_json, decision_json
from extender.reports.pods import failure_reasons
from extender.reports.queues import allocated_claims_json
from extender.service.drift import AllocatedClaim
from extender.service.gang_attempts import GangStatus
from extender.state.core import Pod
from extender.state.podgroups.podgroup import INITIALLY_SCHEDULED


def podgroup_json(status: GangStatus, claims: list[AllocatedClaim] | None = None) -> dict[str, Any]:
    """`claims`: how the group's allocated claims are charged (service.group_claims)."""
    group = status.group
    condition = group.conditions.get(INITIALLY_SCHEDULED) if group is not None else None
    attempt = status.attempt
    return {
        "podGroup": status.group_key,
        "known": group is not None,
        "policy": group.policy if group is not None else "",
        "minCount": group.min_count if group is not None else None,
        "clusterQueues": list(status.cluster_queues),
        "claims": sorted(group.claim_names()) if group is not None else [],
        # the queue each allocated group claim counts against, and the member carrying it or its own entry
        "claimCharges": allocated_claims_json(claims or []),
        "condition": None
        if condition is None
        else {"status": condition.status, "reason": condition.reason, "message": condition.message},
        "placed": status.placed,
        "hold": charges_json(status.hold),
        "tree": None
        if status.tree is None
        else {
            "root": status.tree.root,
            "podGroups": list(status.tree.leaves),
            "minMembers": status.tree.min_members,
        },
        "members": [
            {
                "pod": member.pod_key,
                "state": member.state,
                "node": member.node,
                "reserved": charges_json(member.reserved),
                "lastVerb": member.last_verb,
                "passedNodes": member.passed_nodes,
                "bestNode": member.best_node,
                "refusal": member.refusal,
            }
            for member in status.members
        ],
        "attempt": None
        if attempt is None
        else {
            "outcome": attempt.outcome,
            "minCount": attempt.min_count,
            "ageSeconds": round(attempt.age_seconds, 3),
            "idleSeconds": round(attempt.idle_seconds, 3),
            "members": list(attempt.members),
            "hold": charges_json(attempt.hold),
            "groupClaims": charges_json(attempt.claims),
            "lastRefusal": attempt.last_refusal,
            "placements": [
                {"flavors": list(branch.flavors), "holds": charges_json(branch.whole), "members": branch.members}
                for branch in attempt.branches
            ],
        },
    }


def what_if_members(
    members: list[dict[str, Any]], pods: Mapping[str, Pod], explain: Callable[[Pod], Ranking]
) -> dict[str, Any] | None:
    """For a process that has made no decision for the group (the kubectl plugin's own service): fill each pending
    member of a PodGroup report with an explanation computed now (``what-if``, reserving nothing), and return the
    first one's as the group's verdict, ``{"pod", "fits", "refusal"}`` (None when no member is pending): deciding
    a member of a gang decides the group as a whole (docs/gangs.md)."""
    verdict: dict[str, Any] | None = None
    for member in members:
        pod = pods.get(member["pod"])
        if member["state"] != "pending" or member["lastVerb"] or pod is None:
            continue
        report = decision_json(explain(pod))
        passing = [node["node"] for node in report["nodes"] if node["passed"]]
        gang = report.get("gang") or {}
        reasons = failure_reasons(report["nodes"])
        refusal = gang.get("refused") or ("" if passing else reasons[0][0] if reasons else "no node to run on")
        member.update(
            lastVerb="what-if", passedNodes=len(passing), bestNode=passing[0] if passing else "", refusal=refusal
        )
        if verdict is None and gang:
            verdict = {"pod": member["pod"], "fits": bool(passing), "refusal": refusal}
    return verdict
