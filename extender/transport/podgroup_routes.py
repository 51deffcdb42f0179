"""The `podgroups` blueprint: a PodGroup as the extender sees it, as JSON (/diagnostics/podgroups/<ns>/<name>)
and as a page of the web view (/ui/podgroups/<ns>/<name>): its policy and condition, each member and where its
last decision would put it, what the group needs, what it holds, and how its last attempt went
(service/gang_attempts.py). Read-only, for people, like the rest of /diagnostics and /ui."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, render_template

from extender.service.drift import AllocatedClaim
from extender.service.gang_attempts import GangStatus
from extender.state.podgroups.podgroup import INITIALLY_SCHEDULED
from extender.transport.diagnostics import allocated_claims_json, charges_json
from extender.transport.request_io import current_service, error_response, json_response
from extender.transport.views import _headers, _state_footer

podgroups = Blueprint("podgroups", __name__, template_folder="templates")
podgroups.context_processor(_state_footer)  # the web view's footer, on the PodGroup page too
podgroups.after_request(_headers)  # and its security headers


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


@podgroups.get("/diagnostics/podgroups/<namespace>/<name>")
def podgroup_diagnostics(namespace: str, name: str) -> Response:
    service = current_service()
    status = service.gang_status(namespace, name)
    if status is None:
        return error_response(f"PodGroup {namespace}/{name} is not known to the extender", 404)
    return json_response(podgroup_json(status, service.group_claims(namespace, name)))


@podgroups.get("/ui/podgroups/<namespace>/<name>")
def podgroup_page(namespace: str, name: str) -> tuple[str, int]:
    service = current_service()
    status = service.gang_status(namespace, name)
    report = podgroup_json(status, service.group_claims(namespace, name)) if status is not None else None
    html = render_template("web/podgroup.html", name=f"{namespace}/{name}", report=report)
    return html, 200 if report is not None else 404
