"""Node ranking diagnostics: decisions, nodes and queues rendered for people (tables) and tools (JSON).

The same renderers serve the HTTP endpoints and the `explain` command, so a person sees one vocabulary
whether they ask a live extender or an offline snapshot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from extender.decisions.gang.quota import GangQuota
from extender.decisions.pod_decision import NodeVerdict, PodDecision
from extender.decisions.ranking import Ranking
from extender.decisions.scoring import ScoreBreakdown
from extender.service import DecisionRecord, QuotaView
from extender.service.drift import AllocatedClaim, UnchargedPod, UnplacedWorkload, allocated_claims
from extender.state.dra.devices import Device, DeviceKey
from extender.state.inventory import PoolKey, consumed_counters
from extender.state.quantity import format_quantity
from extender.state.reservations import QuotaKey
from extender.state.snapshot import ClusterSnapshot


def _quantity(value: Fraction) -> str | int:
    return int(value) if value.denominator == 1 else format_quantity(value)


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
        {"clusterQueue": cq, "flavor": flavor, "resource": resource, "amount": _quantity(amount)}
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
                {"clusterQueue": cq, "flavor": flavor, "resource": resource, "amount": _quantity(amount)}
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


# --- devices: who holds each, and the state people see ---------------------------------------------------------

FREE, ALLOCATED, IN_FLIGHT, TAINTED, PARTIAL, UNUSABLE = (
    "free",
    "allocated",
    "in-flight",
    "tainted",
    "partial",
    "unusable",
)
DEVICE_STATES = (FREE, PARTIAL, TAINTED, IN_FLIGHT, ALLOCATED, UNUSABLE)
BLOCKING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class Holder:
    """A claim holding a device, and the pods it is reserved for (pod key, bound node or "").

    in_flight: reserved for pods none of which is bound yet: kube-scheduler's PreBind wrote the allocation and
    reservedFor, the binding is not visible yet (the window decisions/quota/attribution.py in_flight_node counts)."""

    claim: str
    admin_access: bool
    pods: tuple[tuple[str, str], ...]
    in_flight: bool


def device_holders(snapshot: ClusterSnapshot) -> dict[DeviceKey, list[Holder]]:
    """Every allocated device -> the claims holding it: one pass over the claims, shared by a whole page."""
    holders: dict[DeviceKey, list[Holder]] = {}
    pods = snapshot.pods
    for claim in snapshot.claims.values():
        if claim.allocation is None:
            continue
        consumers = []
        for consumer in claim.reserved_for:
            if consumer.resource != "pods":
                continue
            pod = pods.get(f"{claim.namespace}/{consumer.name}")
            consumers.append((f"{claim.namespace}/{consumer.name}", pod.node_name if pod is not None else ""))
        in_flight = bool(consumers) and not any(node for _, node in consumers)
        pods_held = tuple(consumers)
        key = claim.key
        for result in claim.allocation.results:
            holders.setdefault(result.key, []).append(Holder(key, result.admin_access, pods_held, in_flight))
    return holders


def in_flight_devices(snapshot: ClusterSnapshot) -> set[DeviceKey]:
    """Devices whose every holder (adminAccess aside) is a claim reserved for pods none of which is bound yet.

    Cheaper than device_holders (no Holder per result): the grid needs only this to tell in-flight from
    allocated for every device of a 5000-node cluster."""
    pods = snapshot.pods
    in_flight: set[DeviceKey] = set()
    settled: set[DeviceKey] = set()
    for claim in snapshot.claims.values():
        allocation = claim.allocation
        if allocation is None:
            continue
        flight = False
        for consumer in claim.reserved_for:
            if consumer.resource != "pods":
                continue
            pod = pods.get(f"{claim.namespace}/{consumer.name}")
            if pod is not None and pod.node_name:
                flight = False
                break
            flight = True
        target = in_flight if flight else settled
        for result in allocation.results:
            if not result.admin_access:
                target.add(result.key)
    return in_flight - settled


class DeviceStates:
    """The state of each device as the grid and the node page colour it, from one snapshot.

    free: selectable by a new claim; allocated: held by a claim (adminAccess holders do not count, as in the
    allocator); in-flight: held for a pod not yet bound; tainted: free but a NoSchedule/NoExecute taint keeps
    pods without a toleration away; partial: a device that can be shared (allowMultipleAllocations) with holders,
    or a free partitionable device whose pool's shared counters are partly consumed by its siblings (upstream
    allocator_experimental.go, checkAvailableCounters); unusable: its pool is incomplete or invalid, or the
    device itself cannot be allocated (e.g. a malformed capacity requestPolicy).
    """

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self._allocated = snapshot.allocated  # device -> claims holding it, adminAccess excluded
        self._in_flight = in_flight_devices(snapshot)
        self._holders: dict[DeviceKey, list[Holder]] | None = None
        self._consumed: dict[PoolKey, dict[str, dict[str, Fraction]]] = {}

    @property
    def holders(self) -> dict[DeviceKey, list[Holder]]:
        """device_holders of the snapshot, built on first use (the node page and the page of the grid shown)."""
        if self._holders is None:
            self._holders = device_holders(self.snapshot)
        return self._holders

    def _pool_consumed(self, pool_key: PoolKey) -> dict[str, dict[str, Fraction]]:
        consumed = self._consumed.get(pool_key)
        if consumed is None:
            pool = self.snapshot.pools.get(pool_key)
            consumed = consumed_counters(pool, self.snapshot.allocated) if pool is not None else {}
            self._consumed[pool_key] = consumed
        return consumed

    def _counters_in_use(self, device: Device) -> list[str]:
        consumed = self._pool_consumed((device.driver, device.pool))
        return [
            f"{consumption.counter_set}/{counter} {format_quantity(consumed[consumption.counter_set][counter])}"
            for consumption in device.consumes_counters
            for counter in consumption.counters
            if consumed.get(consumption.counter_set, {}).get(counter)
        ]

    def state_of(self, device: Device, usable: bool) -> str:
        """The state alone (the grid counts 40000 of them for 5000 nodes; `why` is drawn for one page only).
        `usable`: the device comes from a complete, valid pool."""
        held = self._allocated.get(device.key)
        if held and not device.allow_multiple_allocations:
            return IN_FLIGHT if device.key in self._in_flight else ALLOCATED
        if not usable or device.unusable_reason:
            return UNUSABLE
        if device.taints and any(t.effect in BLOCKING_TAINT_EFFECTS for t in device.taints):
            return TAINTED
        if held or (device.consumes_counters and self._counters_in_use(device)):
            return PARTIAL
        return FREE

    def why(self, device: Device, state: str) -> str:
        """For people: what makes the device `state` (the claims holding it, its taints, the counters used)."""
        held = [h for h in self.holders.get(device.key, ()) if not h.admin_access]
        if state in (ALLOCATED, IN_FLIGHT):
            claims = ", ".join(h.claim for h in held)
            return f"held by {claims}" + (", pod not bound yet" if state == IN_FLIGHT else "")
        if state == UNUSABLE:
            return device.unusable_reason or "its pool is incomplete or invalid"
        if state == TAINTED:
            blocking = [t for t in device.taints if t.effect in BLOCKING_TAINT_EFFECTS]
            return "taint " + ", ".join(f"{t.key}={t.value}:{t.effect}" for t in blocking)
        if state == PARTIAL:
            if held:
                return f"shared device, held by {len(held)} claim(s)"
            return "shared counters in use: " + ", ".join(self._counters_in_use(device))
        return "free"

    def state(self, device: Device, usable: bool) -> tuple[str, str]:
        """(state, why) for one device."""
        state = self.state_of(device, usable)
        return state, self.why(device, state)


def node_json(snapshot: ClusterSnapshot, node_name: str, states: DeviceStates | None = None) -> dict[str, Any] | None:
    node = snapshot.nodes.get(node_name)
    if node is None:
        return None
    states = states if states is not None else DeviceStates(snapshot)
    node_devices = snapshot.node_devices(node_name)
    usable = {device.key for device in node_devices.usable}
    devices = []
    for device in node_devices.devices:
        holding = states.holders.get(device.key, [])
        state, why = states.state(device, device.key in usable)
        devices.append(
            {
                "device": "/".join(device.key),
                "slice": device.slice_name,
                "free": device.key not in snapshot.allocated,
                "state": state,
                "why": why,
                "heldBy": [h.claim + (" (adminAccess)" if h.admin_access else "") for h in holding],
                "holders": [
                    {
                        "claim": h.claim,
                        "adminAccess": h.admin_access,
                        "pods": [{"pod": pod, "node": bound} for pod, bound in h.pods],
                    }
                    for h in holding
                ],
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
        "admittedNotPlaced": unplaced_json(unplaced),
        "allocatedClaimsWithoutPod": allocated_claims_json(
            allocated_claims(view.claim_entries() if view.claim_entries is not None else ())
        ),
        "unchargedPods": uncharged_json(uncharged),
    }


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
