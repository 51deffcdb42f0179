"""Output as kubectl prints it: tables (upper-case headers, padded columns), JSON or YAML (``-o``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
import yaml

QUEUES_HEADER = (
    "CLUSTERQUEUE",
    "COHORT",
    "FLAVOR",
    "RESOURCE",
    "NOMINAL",
    "USAGE",
    "RESERVED",
    "ADMITTED-PENDING",
    "AVAILABLE",
    "BORROWING-LIMIT",
    "KUEUE-RESERVED",
    "DRIFT",
    "PROBLEM",
)
RESERVATIONS_HEADER = ("RESERVED FOR POD", "CLUSTERQUEUE", "NODE", "CHARGES", "EXPIRES-IN")
UNPLACED_HEADER = ("ADMITTED, NOT PLACED", "CLUSTERQUEUE", "FLAVORS", "PENDING PODS", "WHY")
UNCHARGED_HEADER = ("UNCHARGED POD", "NODE", "WHY")


def padded_columns(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """kubectl's table layout: upper-case headers, columns padded to the widest cell, three spaces apart."""
    widths = [
        max(len(header[i]), *(len(row[i]) for row in rows)) if rows else len(header[i]) for i in range(len(header))
    ]
    lines = []
    for row in (header, *rows):
        lines.append("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return lines


def cell_text(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _queue_rows(queues: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """One row per ClusterQueue, flavor and resource (one row of dashes for a queue without resources)."""
    rows: list[tuple[str, ...]] = []
    for queue in queues:
        for row in queue["resources"] or [{}]:
            rows.append(
                (
                    queue["name"],
                    cell_text(queue.get("cohort")),
                    cell_text(row.get("flavor")),
                    cell_text(row.get("resource")),
                    cell_text(row.get("nominal")),
                    cell_text(row.get("usage")),
                    cell_text(row.get("reserved")),
                    cell_text(row.get("admittedPending")),
                    cell_text(row.get("available")),
                    cell_text(row.get("borrowingLimit")),
                    cell_text(row.get("kueueReservation")),
                    cell_text(row.get("drift")),
                    cell_text(queue.get("problem") or (queue["stopPolicy"] if queue["stopPolicy"] != "None" else "")),
                )
            )
    return rows


def _reservation_rows(reservations: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """The extender's in-flight quota reservations: pod, queue, node, what it charges and when it expires."""
    return [
        (
            r["pod"],
            r["clusterQueue"],
            cell_text(r.get("node")),
            ", ".join(f"{c['amount']} {c['resource']} in {c['flavor']}" for c in r["charges"]),
            f"{r['expiresIn']}s",
        )
        for r in reservations
    ]


def _unplaced_rows(unplaced: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """Workloads Kueue admitted whose pods are not placed yet, with their flavors and why."""
    return [
        (
            u["workload"],
            u["clusterQueue"],
            ", ".join(f"{resource}: {flavor}" for resource, flavor in u["flavors"].items()) or "-",
            str(len(u["pendingPods"])),
            cell_text(u.get("reason")),
        )
        for u in unplaced
    ]


def render_queues(report: Mapping[str, Any]) -> str:
    rows = _queue_rows(report["clusterQueues"])
    lines = padded_columns(QUEUES_HEADER, rows) if rows else ["No ClusterQueues found."]
    if not report.get("kueueEnabled", True):
        lines.insert(0, "Kueue's CRDs are not installed: no pod is quota-governed.")
    reservations = report.get("reservations") or []
    if reservations:
        lines.append("")
        lines.extend(padded_columns(RESERVATIONS_HEADER, _reservation_rows(reservations)))
    unplaced = report.get("admittedNotPlaced") or []
    if unplaced:
        lines.append("")
        lines.extend(padded_columns(UNPLACED_HEADER, _unplaced_rows(unplaced)))
    uncharged = report.get("unchargedPods") or []
    if uncharged:
        lines.append("")
        rows = [(u["pod"], u["node"], cell_text("; ".join(u["errors"]))) for u in uncharged]
        lines.extend(padded_columns(UNCHARGED_HEADER, rows))
    return "\n".join(lines)


def render_node(report: Mapping[str, Any]) -> str:
    lines = [f"Node {report['node']}  {report['freeDevices']}/{report['totalDevices']} device(s) free", ""]
    rows = [
        (
            d["device"],
            "yes" if d["free"] else "no",
            ", ".join(d["heldBy"]) or "-",
            ", ".join(d["taints"]) or "-",
        )
        for d in report["devices"]
    ]
    lines.extend(padded_columns(("DEVICE", "FREE", "HELD BY", "TAINTS"), rows) if rows else ["No devices published."])
    problems = [p for p in report.get("pools", []) if p.get("incomplete") or p.get("invalid")]
    for pool in problems:
        state = pool["invalid"] or "incomplete (not every ResourceSlice of this generation is published yet)"
        lines.append(f"pool {pool['pool']} generation {pool['generation']}: {state}")
    if report.get("podsWithClaims"):
        lines.append("")
        lines.append("Pods with claims on this node: " + ", ".join(report["podsWithClaims"]))
    return "\n".join(lines)


def render_explanation(report: Mapping[str, Any]) -> str:
    """The ranking table of `dra-extender explain` (passing nodes first, then why the others fail)."""
    from extender.reports.text import render_table

    return render_table(report)


def emit(report: Mapping[str, Any], output: str, table: Callable[[Mapping[str, Any]], str]) -> None:
    """Print the report in the ``-o`` format; ``table`` renders it for the default one."""
    if output == "json":
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif output == "yaml":
        sys.stdout.write(yaml.safe_dump(dict(report), sort_keys=False, allow_unicode=True))
    else:
        sys.stdout.write(table(report) + "\n")
