"""The ``podgroup`` table: a PodGroup's group verdict as facts, then one row per member, kubectl-style.

It reads the report of ``GET /diagnostics/podgroups/NS/NAME`` (transport/podgroup_routes.py ``podgroup_json``),
whichever source produced it, so the remote and the local answer print alike; ``-o json|yaml`` print that report
as it is. The web view's ``/ui/podgroups/NS/NAME`` shows the same facts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from extender.kubectl_plugin.rendering import cell_text, padded_columns

MEMBERS_HEADER = ("POD", "NODE", "RESERVED", "VERDICT")


def _charges(charges: Sequence[Mapping[str, Any]], queue: bool) -> str:
    """Quota charges as ``6 example.com/gpu in team-a/on-demand`` (``queue``) or ``2 example.com/gpu (on-demand)``
    (a member's row, whose queue is the group's), comma-separated; "" for none."""
    if queue:
        return ", ".join(f"{c['amount']} {c['resource']} in {c['clusterQueue']}/{c['flavor']}" for c in charges)
    return ", ".join(f"{c['amount']} {c['resource']} ({c['flavor']})" for c in charges)


def _policy(report: Mapping[str, Any]) -> str:
    if not report["known"]:
        return "no PodGroup object in the view (pods name it)"
    if report["minCount"] is None:
        return str(report["policy"])
    return f"{report['policy']}, minCount {report['minCount']}"


def _placed(report: Mapping[str, Any]) -> str:
    """How many members are placed and, for a gang, how many more its minCount needs."""
    text = f"{report['placed']} of {len(report['members'])} member(s) bound or nominated"
    if report["minCount"] is None:
        return text
    missing = report["minCount"] - report["placed"]
    return f"{text}: needs {missing} more" if missing > 0 else f"{text}: minCount reached"


def _condition(report: Mapping[str, Any]) -> str:
    condition = report["condition"]
    if condition is None:
        return "none yet"
    text = f"PodGroupInitiallyScheduled={condition['status']} {condition['reason']}".rstrip()
    return f"{text}: {condition['message']}" if condition["message"] else text


def _members(report: Mapping[str, Any]) -> str | None:
    """How many members exist against minCount, when fewer than it needs: kube-scheduler waits for the rest
    to be created before it schedules the group (schedule_one_podgroup.go), whatever the quota."""
    count, min_count = len(report["members"]), report["minCount"]
    if min_count is None or count >= min_count:
        return None
    return f"{count} exist, minCount {min_count}: the group waits for {min_count - count} more to be created"


def _verdict_now(report: Mapping[str, Any]) -> str | None:
    """The group's verdict computed now for its first pending member (a local answer: nothing reserved)."""
    verdict = report.get("verdictNow")
    if not verdict:
        return None
    if verdict["fits"]:
        return f"fits (computed now for {verdict['pod']}, nothing reserved)"
    return f"does not fit (computed now for {verdict['pod']}, nothing reserved): {verdict['refusal']}"


def _facts(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The header block: policy, queue, the group verdict (need, hold, condition, last attempt, refusal)."""
    facts = [("Policy", _policy(report))]
    members = _members(report)
    if members:
        facts.append(("Members", members))
    facts += [
        ("ClusterQueue", ", ".join(report.get("clusterQueues") or []) or "none (no member is quota-governed)"),
        ("Placed", _placed(report)),
        ("Held for group", _charges(report["hold"], queue=True) or "nothing"),
    ]
    verdict = _verdict_now(report)
    if verdict:
        facts.append(("Group verdict", verdict))
    if report["claims"]:
        facts.append(("Group claims", ", ".join(report["claims"])))
    tree = report.get("tree")
    if tree:
        groups = ", ".join(tree["podGroups"])
        facts.append(("Scheduled with", f"CompositePodGroup {tree['root']}, all or nothing: {groups}"))
    facts.append(("Condition", _condition(report)))
    attempt = report["attempt"]
    if attempt is None:
        facts.append(("Last attempt", "none seen since the extender started"))
        return facts
    members = ", ".join(attempt["members"]) or "nobody"
    facts.append(
        ("Last attempt", f"{attempt['outcome']} (started {attempt['ageSeconds']:.0f}s ago; reserved in it: {members})")
    )
    placements = attempt.get("placements") or []
    if len(placements) > 1:
        judged = "; ".join(_charges(p["holds"], queue=True) for p in placements)
        facts.append(("Placements held", judged))
    if attempt["lastRefusal"]:
        facts.append(("Refused", attempt["lastRefusal"]))
    return facts


def _node(member: Mapping[str, Any]) -> str:
    """Where the member is: its node and whether bound or nominated; ``-`` while pending."""
    if member["state"] == "pending":
        return "-"
    return f"{cell_text(member['node'])} ({member['state']})"


def _verdict(member: Mapping[str, Any], group_refusal: str) -> str:
    """The member's last decision: refused and why (the group's refusal, printed once above, by reference),
    else how many nodes passed and the first."""
    if member["refusal"] and member["refusal"] == group_refusal:
        return f"{member['lastVerb']}: refused as a group (Group verdict above)"
    if member["refusal"]:
        return f"refused: {member['refusal']}"
    if not member["lastVerb"]:
        return "no decision remembered"
    first = f", first {member['bestNode']}" if member["bestNode"] else ""
    return f"{member['lastVerb']}: {member['passedNodes']} node(s) pass{first}"


def render_podgroup(report: Mapping[str, Any]) -> str:
    facts = _facts(report)
    width = max(len(label) for label, _ in facts)
    lines = [f"PodGroup {report['podGroup']}", *(f"{label.ljust(width)}   {value}" for label, value in facts), ""]
    group_refusal = (report.get("verdictNow") or {}).get("refusal", "")
    rows = [
        (
            member["pod"],
            _node(member),
            cell_text(_charges(member["reserved"], queue=False)),
            _verdict(member, group_refusal),
        )
        for member in report["members"]
    ]
    lines.extend(padded_columns(MEMBERS_HEADER, rows) if rows else ["No member pods found."])
    return "\n".join(lines)
