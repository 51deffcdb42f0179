"""The queues as people read them: every quota a ClusterQueue declares with its usage, reservations, borrowing
and what is available (Kueue's ledger, one QuotaView), Kueue's own figures beside them, the reservations held,
and what does not add up (admitted Workloads not placed, pods whose usage could not be charged, allocated claims
no running pod carries: service/drift.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from extender.reports.decisions import charges_json
from extender.reports.quantities import quantity, quantity_text
from extender.service import QuotaView
from extender.service.drift import AllocatedClaim, UnchargedPod, UnplacedWorkload, allocated_claims


def queue_rows(view: QuotaView) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(ClusterQueue, flavor, resource, numbers) for every quota the ClusterQueues declare, from one view: what
    /diagnostics/queues and the quota metrics both show."""
    rows = []
    ledger, usage, reserved = view.ledger, view.usage, view.reserved
    for cq in sorted(view.context.cluster_queues.values(), key=lambda q: q.name):
        kueue = view.snapshot.queue_status.get(cq.name)
        for group in cq.resource_groups:
            for flavor in group.flavors:
                for quota in flavor.resources:
                    key = (cq.name, flavor.name, quota.name)
                    used, held = usage.get(key, Fraction(0)), reserved.get(key, Fraction(0))
                    numbers: dict[str, Fraction | None] = {
                        "nominal": quota.nominal_quota,
                        "borrowingLimit": quota.borrowing_limit,
                        "lendingLimit": quota.lending_limit,
                        "usage": used,
                        "reserved": held,
                        # quota admitted Workloads hold beyond what their pods hold on nodes (Kueue charged it)
                        "admittedPending": view.admitted_holds.get(key, Fraction(0)),
                        "borrowed": ledger.borrowed(cq.name, flavor.name, quota.name)
                        if cq.cohort_name
                        else Fraction(0),
                        "available": ledger.available(cq.name, flavor.name, quota.name),
                        "potentialAvailable": ledger.potential_available(cq.name, flavor.name, quota.name),
                        # Kueue's own view (ClusterQueue status) and the drift: quota Kueue holds for admitted
                        # Workloads minus what is allocated or reserved on nodes (None while Kueue reports none)
                        "kueueReservation": None,
                        "kueueUsage": None,
                        "drift": None,
                    }
                    if kueue is not None:
                        kueue_reserved = kueue.reservation.get((flavor.name, quota.name), Fraction(0))
                        numbers["kueueReservation"] = kueue_reserved
                        numbers["kueueUsage"] = kueue.usage.get((flavor.name, quota.name), Fraction(0))
                        numbers["drift"] = kueue_reserved - used - held
                    rows.append((cq.name, flavor.name, quota.name, numbers))
    return rows


def unplaced_json(unplaced: Sequence[UnplacedWorkload]) -> list[dict[str, Any]]:
    return [
        {
            "workload": item.workload,
            "clusterQueue": item.cluster_queue,
            "flavors": dict(item.flavors),
            "pendingPods": list(item.pending_pods),
            "reason": item.reason,
            "nodesPassing": item.nodes_passing,
        }
        for item in unplaced
    ]


def allocated_claims_json(claims: Sequence[AllocatedClaim]) -> list[dict[str, Any]]:
    return [
        {
            "claim": item.claim,
            "clusterQueue": item.cluster_queue,
            "charges": charges_json(item.charges),
            "node": item.node,
            "carriedBy": item.carried_by,
            "follows": item.follows,
            "podGroup": item.pod_group,
            "problem": item.problem,
        }
        for item in claims
    ]


def uncharged_json(uncharged: Sequence[UnchargedPod]) -> list[dict[str, Any]]:
    return [{"pod": item.pod, "node": item.node, "errors": list(item.errors)} for item in uncharged]


def queues_json(
    view: QuotaView, unplaced: Sequence[UnplacedWorkload] = (), uncharged: Sequence[UnchargedPod] = ()
) -> dict[str, Any]:
    """The queues' numbers, and (when given) the admitted Workloads whose pods are not placed, with why, the
    placed pods part of whose usage could not be charged, with why, and the allocated claims no running pod
    carries (counted in usage on their own: docs/kueue.md)."""
    context = view.context
    by_queue: dict[str, list[dict[str, Any]]] = {}
    for cq_name, flavor, resource, numbers in queue_rows(view):
        row: dict[str, Any] = {"flavor": flavor, "resource": resource}
        row.update({name: quantity(value) if value is not None else None for name, value in numbers.items()})
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
                    {"flavor": flavor, "resource": resource, "amount": quantity(amount)}
                    for (_, flavor, resource), amount in r.charges.items()
                ],
                "node": r.node,
                "expiresIn": round(r.expires - view.at, 1),
            }
            for r in view.reservations
        ],
        "clusterQueues": queues,
        "admittedNotPlaced": unplaced_json(unplaced),
        "allocatedClaimsWithoutPod": allocated_claims_json(
            allocated_claims(view.claim_entries() if view.claim_entries is not None else ())
        ),
        "unchargedPods": uncharged_json(uncharged),
    }


@dataclass(frozen=True, slots=True)
class Borrowing:
    """A ClusterQueue using more than its nominal quota of a flavor's resource: the excess comes out of the
    unused quota its cohort's other ClusterQueues lend (Kueue pools it; no single lender is charged)."""

    borrower: str
    cohort: str
    flavor: str
    resource: str
    amount: Fraction
    lenders: tuple[tuple[str, Fraction], ...]  # (ClusterQueue, unused quota it lends), largest first


def borrowing(
    rows: Sequence[tuple[str, str, str, Mapping[str, Fraction | None]]], root_cohort: Mapping[str, str]
) -> list[Borrowing]:
    """From queue_rows' numbers (Kueue's ledger: `borrowed` is what a queue uses beyond its nominal quota) and
    each ClusterQueue's root cohort (lending reaches across a cohort tree): who borrows, how much, and which
    queues of the same tree have unused quota of that flavor and resource to lend (at most their lendingLimit)."""
    zero = Fraction(0)
    unused: dict[tuple[str, str, str], list[tuple[str, Fraction]]] = {}
    for cq, flavor, resource, numbers in rows:
        cohort = root_cohort.get(cq, "")
        if not cohort:
            continue
        nominal = numbers["nominal"] or zero
        used = (numbers["usage"] or zero) + (numbers["reserved"] or zero) + (numbers.get("admittedPending") or zero)
        spare = max(zero, nominal - used)
        limit = numbers.get("lendingLimit")
        if limit is not None:
            spare = min(spare, limit)
        if spare > 0:
            unused.setdefault((cohort, flavor, resource), []).append((cq, spare))
    out = []
    for cq, flavor, resource, numbers in rows:
        amount = numbers.get("borrowed") or zero
        cohort = root_cohort.get(cq, "")
        if amount > 0 and cohort:
            lenders = sorted(
                (pair for pair in unused.get((cohort, flavor, resource), []) if pair[0] != cq),
                key=lambda pair: (-pair[1], pair[0]),
            )
            out.append(Borrowing(cq, cohort, flavor, resource, amount, tuple(lenders)))
    return out


def _percent(amount: Fraction, scale: Fraction) -> float:
    return round(float(amount / scale) * 100, 2) if scale > 0 else 0.0


def quota_bar(numbers: Mapping[str, Fraction | None]) -> dict[str, Any]:
    """Widths (percent of the bar) of usage, reserved, admitted pending and available, the potential beyond
    them, and where the nominal quota sits. The numbers are queue_rows' (Kueue's ledger); only the drawing is
    done here."""
    zero = Fraction(0)
    nominal = numbers["nominal"] or zero
    usage = numbers["usage"] or zero
    reserved = numbers["reserved"] or zero
    admitted = numbers.get("admittedPending") or zero
    available = numbers["available"] or zero
    potential = numbers["potentialAvailable"] or zero
    used = usage + reserved + admitted
    scale = max(nominal, used + available, potential, Fraction(1))
    segments = []
    x = 0.0
    for name, amount in (
        ("usage", usage),
        ("reserved", reserved),
        ("admitted", admitted),
        ("available", available),
        ("potential", max(zero, potential - used - available)),
    ):
        width = _percent(amount, scale)
        if width:
            segments.append((name, x, width))
            x += width
    return {
        "segments": segments,  # (class, x, width) in percent: drawn as SVG rects (no inline style under the CSP)
        "nominal": _percent(nominal, scale),
        "scale": quantity_text(scale),
        "text": {key: quantity_text(value) for key, value in numbers.items()},
    }


@dataclass(slots=True)
class CohortNode:
    name: str
    cohorts: dict[str, CohortNode] = field(default_factory=dict)
    queues: list[str] = field(default_factory=list)


def cohort_tree(paths: Mapping[str, tuple[str, ...]]) -> tuple[list[CohortNode], list[str]]:
    """Root cohorts (each with its sub-cohorts and ClusterQueues) and the ClusterQueues in no cohort, from each
    queue's cohort path (QuotaTree.cohort_path: own cohort first, root last)."""
    roots: dict[str, CohortNode] = {}
    alone = []
    for queue, path in sorted(paths.items()):
        if not path:
            alone.append(queue)
            continue
        level = roots
        current = None
        for cohort in reversed(path):
            current = level.setdefault(cohort, CohortNode(cohort))
            level = current.cohorts
        assert current is not None
        current.queues.append(queue)
    return sorted(roots.values(), key=lambda c: c.name), alone


@dataclass(frozen=True, slots=True)
class QueuesPage:
    """The web view's queues page from one quota view: the queues report, a bar per quota row by ClusterQueue,
    the cohort forest, who borrows from whom, and the reservations by ClusterQueue then pod (the table is read
    per queue)."""

    report: dict[str, Any]
    bars: dict[str, list[dict[str, Any]]]
    roots: list[CohortNode]
    alone: list[str]
    borrowing: list[Borrowing]
    reservations: list[dict[str, Any]]


def queues_page(view: QuotaView) -> QueuesPage:
    report = queues_json(view)
    numbers_rows = queue_rows(view)
    bars: dict[str, list[dict[str, Any]]] = {}
    for cq_name, flavor, resource, numbers in numbers_rows:
        bars.setdefault(cq_name, []).append({"flavor": flavor, "resource": resource, "bar": quota_bar(numbers)})
    tree = view.context.tree
    paths = {name: tree.cohort_path(name) for name in view.context.cluster_queues}
    roots, alone = cohort_tree(paths)
    borrowed = borrowing(numbers_rows, {name: path[-1] for name, path in paths.items() if path})
    reservations = sorted(report["reservations"], key=lambda r: (r["clusterQueue"], r["pod"]))
    return QueuesPage(report, bars, roots, alone, borrowed, reservations)
