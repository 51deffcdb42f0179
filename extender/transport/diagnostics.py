"""Node ranking diagnostics: decisions, nodes and queues rendered for people (tables) and tools (JSON).

The same renderers serve the HTTP endpoints and the `explain` command, so a person sees one vocabulary
whether they ask a live extender or an offline snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from extender.decisions.scheduling import NodeVerdict, Ranking
from extender.decisions.scoring import ScoreBreakdown
from extender.service import DecisionRecord, QuotaView
from extender.state.quantity import format_quantity
from extender.state.store import ClusterSnapshot


def _quantity(value: Fraction) -> str | int:
    return int(value) if value.denominator == 1 else format_quantity(value)


def verdict_json(name: str, verdict: NodeVerdict, score: ScoreBreakdown | None) -> dict[str, Any]:
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
                "claim": claim.claim.label,
                "request": chosen.request,
                "device": "/".join(chosen.device.key),
                "deviceClass": chosen.device_class,
                "adminAccess": chosen.admin_access,
            }
            for claim in verdict.allocation.claims
            for chosen in claim.devices
        ]
    if verdict.quota is not None and verdict.quota.charges:
        out["quota"] = {
            "flavor": verdict.quota.flavor,
            "charges": [
                {"clusterQueue": cq, "flavor": flavor, "resource": resource, "amount": _quantity(amount)}
                for (cq, flavor, resource), amount in verdict.quota.charges.items()
            ],
            "fits": [
                {
                    "flavor": fit.flavor,
                    "resource": fit.resource,
                    "outcome": fit.outcome.value,
                    "requested": _quantity(fit.requested),
                    "usage": _quantity(fit.usage),
                    "nominal": _quantity(fit.nominal),
                    "available": _quantity(fit.available),
                    "potentialAvailable": _quantity(fit.potential_available),
                }
                for fit in verdict.quota.fits
            ],
        }
    if score is not None:
        out["score"] = {
            "total": score.total,
            "strategy": score.strategy,
            "deviceFit": round(score.device_fit, 3),
            "firstAvailable": round(score.first_available, 3),
            "quotaHeadroom": round(score.quota_headroom, 3),
        }
    return out


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
                {"clusterQueue": cq, "flavor": flavor, "resource": resource, "amount": _quantity(amount)}
                for (cq, flavor, resource), amount in decision.reservation.items()
            ],
        },
        "nodes": [verdict_json(name, v, ranking.score(name)) for name, v in ranked],
    }
    if record is not None:
        out["verb"] = record.verb
        out["at"] = record.at
        out["durationMs"] = round(record.duration_seconds * 1000, 3)
    return out


def node_json(snapshot: ClusterSnapshot, node_name: str) -> dict[str, Any] | None:
    node = snapshot.nodes.get(node_name)
    if node is None:
        return None
    holders: dict[tuple[str, str, str], list[str]] = {}
    for claim in snapshot.claims.values():
        if claim.allocation is None:
            continue
        for result in claim.allocation.results:
            holders.setdefault(result.key, []).append(claim.key + (" (adminAccess)" if result.admin_access else ""))
    node_devices = snapshot.node_devices(node_name)
    devices = []
    for device in node_devices.devices:
        holding = holders.get(device.key, [])
        devices.append(
            {
                "device": "/".join(device.key),
                "slice": device.slice_name,
                "free": device.key not in snapshot.allocated,
                "heldBy": holding,
                "attributes": {name: attr.value for name, attr in device.attributes.items()},
                "capacity": {name: format_quantity(value) for name, value in device.capacity.items()},
                "taints": [f"{t.key}={t.value}:{t.effect}" for t in device.taints],
            }
        )
    pools = [
        {
            "pool": f"{pool.driver}/{pool.name}",
            "generation": pool.generation,
            "incomplete": pool.incomplete,
            "invalid": pool.invalid_reason,
        }
        for pool in node_devices.pools
    ]
    pods = sorted(pod.key for pod in snapshot.pods.values() if pod.node_name == node_name and pod.claims)
    return {
        "node": node_name,
        "labels": dict(node.labels),
        "devices": devices,
        "freeDevices": sum(1 for d in devices if d["free"]),
        "totalDevices": len(devices),
        "pools": pools,
        "podsWithClaims": pods,
    }


def queue_rows(view: QuotaView) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(ClusterQueue, flavor, resource, numbers) for every quota the ClusterQueues declare, from one view: what
    /diagnostics/queues and the quota metrics both show."""
    rows = []
    ledger, usage, reserved = view.ledger, view.usage, view.reserved
    for cq in sorted(view.context.cluster_queues.values(), key=lambda q: q.name):
        for group in cq.resource_groups:
            for flavor in group.flavors:
                for quota in flavor.resources:
                    key = (cq.name, flavor.name, quota.name)
                    numbers = {
                        "nominal": quota.nominal_quota,
                        "borrowingLimit": quota.borrowing_limit,
                        "lendingLimit": quota.lending_limit,
                        "usage": usage.get(key, Fraction(0)),
                        "reserved": reserved.get(key, Fraction(0)),
                        "available": ledger.available(cq.name, flavor.name, quota.name),
                        "potentialAvailable": ledger.potential_available(cq.name, flavor.name, quota.name),
                    }
                    rows.append((cq.name, flavor.name, quota.name, numbers))
    return rows


def queues_json(view: QuotaView) -> dict[str, Any]:
    context = view.context
    by_queue: dict[str, list[dict[str, Any]]] = {}
    for cq_name, flavor, resource, numbers in queue_rows(view):
        row: dict[str, Any] = {"flavor": flavor, "resource": resource}
        row.update({name: _quantity(value) if value is not None else None for name, value in numbers.items()})
        by_queue.setdefault(cq_name, []).append(row)
    queues = []
    for cq in sorted(context.cluster_queues.values(), key=lambda q: q.name):
        rows = by_queue.get(cq.name, [])
        queues.append(
            {
                "name": cq.name,
                "cohort": cq.cohort_name,
                "stopPolicy": cq.stop_policy.value,
                "problem": context.problems.get(cq.name, ""),
                "resources": rows,
            }
        )
    return {
        "kueueEnabled": context.enabled,
        "deviceClassMappings": {m.name: list(m.device_class_names) for m in context.mappings.mappings},
        "mappingsSource": context.mappings_source,
        "reservations": [
            {
                "pod": r.pod_key,
                "clusterQueue": r.cluster_queue,
                "charges": [
                    {"flavor": flavor, "resource": resource, "amount": _quantity(amount)}
                    for (_, flavor, resource), amount in r.charges.items()
                ],
                "node": r.node,
                "expiresIn": round(r.expires - view.at, 1),
            }
            for r in view.reservations
        ],
        "clusterQueues": queues,
    }


def render_table(decision: Mapping[str, Any]) -> str:
    """The ranked nodes as a terminal table: rank, node, verdict, score, and the reason or devices."""
    lines = [f"Pod {decision['pod']}  strategy={decision['strategy']}"]
    quota = decision["quota"]
    if quota["governed"]:
        flavor = quota["chosenFlavor"] or "(none fits)"
        lines.append(f"ClusterQueue {quota['clusterQueue']}  flavor {flavor}")
    else:
        lines.append("Not quota-governed (no kueue.x-k8s.io/queue-name label, or Kueue is off)")
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
