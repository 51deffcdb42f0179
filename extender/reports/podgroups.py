"""A PodGroup as the extender sees it: its policy and condition, each member and where its last decision would put
it, what the group needs and holds, the placements its last attempt tried (service/gang_attempts.py GangStatus),
and the queue each of its allocated claims counts against. GET /diagnostics/podgroups/NS/NAME, the web view's
PodGroup page and `kubectl dra-quota podgroup` all show this report."""

from __future__ import annotations

from typing import Any

from extender.reports.decisions import charges_json
from extender.reports.queues import allocated_claims_json
from extender.service.drift import AllocatedClaim
from extender.service.gang_attempts import GangStatus
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
