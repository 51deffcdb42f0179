"""A pod's decision as a terminal table: what `dra-extender explain` and `kubectl dra-quota explain` print by
default, from the decision report (reports/decisions.py decision_json), so the table and the JSON never differ."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def render_table(decision: Mapping[str, Any]) -> str:
    """The ranked nodes as a terminal table: rank, node, verdict, score, and the reason or devices."""
    lines = [f"Pod {decision['pod']}  strategy={decision['strategy']}"]
    quota = decision["quota"]
    if quota["governed"]:
        # a pod that passes with no flavor was charged nothing (no devices): "none fits" would contradict it
        flavor = quota["chosenFlavor"] or ("(none fits)" if not decision["passed"] else "(none: nothing charged)")
        if not quota["chosenFlavor"] and (decision.get("gang") or {}).get("refused"):
            flavor = "(none: the group does not fit)"
        lines.append(f"ClusterQueue {quota['clusterQueue']}  flavor {flavor}")
    else:
        lines.append("Not quota-governed (no kueue.x-k8s.io/queue-name label, or Kueue is off)")
    gang = decision.get("gang")
    if gang:
        held = ", ".join(f"{h['amount']} {h['resource']} ({h['flavor']})" for h in gang["groupHold"]) or "nothing"
        lines.append(
            f"PodGroup {gang['podGroup']} (gang, minCount {gang['minCount']}): {gang['present']} present, "
            f"{gang['placed']} placed, {gang['othersNeeded']} more besides this pod; held for them: {held}"
        )
        if gang["waiting"]:
            lines.append(f"Waiting for members: {gang['waiting']}")
        elif gang["refused"]:
            lines.append(f"Refused as a group: {gang['refused']}")
    lines.append(f"{decision['passed']} node(s) pass, {decision['failed']} fail")
    lines.append("")
    header = ("RANK", "NODE", "VERDICT", "SCORE", "WHY")
    rows: list[tuple[str, ...]] = []
    rank = 0
    for node in decision["nodes"]:
        if node["passed"]:
            rank += 1
            devices = ", ".join(
                d["device"].rsplit("/", 1)[-1] + (f" ({d['request']})" if "/" in d["request"] else "")
                for d in node.get("devices", [])
            )
            charges = node.get("quota", {}).get("charges", [])
            charge = "; ".join(f"{c['amount']} {c['resource']} in {c['flavor']}" for c in charges)
            why = f"devices: {devices}" if devices else "no devices needed"
            if charge:
                why += f" | quota: {charge}"
            score = node.get("score", {})
            parts = score.get("deviceFitParts")
            if parts:
                why += (
                    f" | fit {score['deviceFit']}: smallLeft {parts['smallLeft']}, smallUnit {parts['smallUnit']},"
                    f" nodeFill {parts['nodeFill']}"
                )
            score_text = str(score.get("total", "-"))
            rows.append((str(rank), node["node"], "pass", score_text, why))
        else:
            verdict = "fail (unresolvable)" if node.get("unresolvable") else "fail"
            rows.append(("-", node["node"], verdict, "-", node.get("detail") or node.get("reason", "")))
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) if rows else len(header[i]) for i in range(4)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    lines.append(fmt.format(*header))
    for row in rows:
        lines.append(fmt.format(*row))
    return "\n".join(lines)
