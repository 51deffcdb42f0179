"""What an admitted Workload holds of its ClusterQueue's quota before (and while) its pods are placed.

Kueue charges a Workload's quota when it admits it and keeps it charged until the Workload finishes
(pkg/cache/scheduler: an admitted Workload's `workload.Info` usage stays in the ClusterQueue snapshot; the
amounts are `status.admission.podSetAssignments[].resourceUsage`, scaled down by `status.reclaimablePods` as
pkg/workload/workload.go totalRequestsFromAdmission does). The extender charges what is allocated on nodes.
Counting only the latter leaves the quota Kueue promised to an admitted Workload whose pods are not bound yet
free for anyone else with the same queue (a pod outside Kueue's management), and the admitted Workload's own
pods are then refused.

One usage model for both: an admitted Workload holds, per (ClusterQueue, flavor, resource), what Kueue admitted
it for minus what its pods already hold on nodes (usage and reservations), never below zero. As its pods bind,
their per-node charges replace the hold; a Workload whose pods take more than it was admitted for (e.g. a
node's charge for allocationMode All) is charged what they take. Its own pods are decided without its hold:
they are what the hold is for. Only resources the extender itself charges are held (device classes' quota
resources); Kueue enforces cpu, memory and the rest on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from math import ceil

from extender.decisions.devices.extended_resources import quota_resource
from extender.decisions.quota.context import IMPLICIT_EXTENDED_RESOURCE_PREFIX, QuotaContext
from extender.state.core import Pod
from extender.state.dra.device_class import DeviceClass
from extender.state.kueue.pod_workload import admitted_flavors_of_pod, pod_workload
from extender.state.kueue.workload import Workload
from extender.state.reservations import QuotaKey, add_signed
from extender.state.snapshot import ClusterSnapshot


def governed_resources(context: QuotaContext, device_classes: Mapping[str, DeviceClass]) -> frozenset[str]:
    """Every quota resource a pod's devices can be charged to here: a DeviceClass's mapped (or covered)
    resource, and the resource its extended resource names resolve to (Kueue's resolveQuotaKey)."""
    names = set(context.mappings.resource_names)
    for device_class in device_classes.values():
        resource = context.resource_for_class(device_class.name)
        if resource:
            names.add(resource)
        implicit = f"{IMPLICIT_EXTENDED_RESOURCE_PREFIX}{device_class.name}"
        for extended in (device_class.extended_resource_name, implicit):
            if extended:
                charged, problem = quota_resource(context.mappings, extended, device_class.name)
                if charged and not problem:
                    names.add(charged)
    return frozenset(names)


def admitted_quota_by_pod_set(
    workload: Workload, context: QuotaContext, governed: frozenset[str]
) -> dict[str, dict[QuotaKey, Fraction]]:
    """What Kueue charges each pod set of the Workload, per quota key, restricted to `governed` resources; empty
    unless it holds quota (admitted, QuotaReserved, not Finished) in a ClusterQueue this context knows.

    A pod set whose reclaimable pods lower its count is scaled as Kueue scales it: the admitted usage divided by
    the admitted count, in Kueue's integer units, times the count left."""
    admission = workload.admission
    if admission is None or not workload.holds_quota or admission.cluster_queue not in context.cluster_queues:
        return {}
    by_pod_set: dict[str, dict[QuotaKey, Fraction]] = {}
    for assignment in admission.pod_set_assignments:
        admitted_count = assignment.count
        if admitted_count is None:
            admitted_count = workload.pod_set_counts.get(assignment.name)
        left = workload.count_after_reclaim(assignment.name)
        for resource, amount in assignment.resource_usage.items():
            if resource not in governed or amount <= 0:
                continue
            flavor = assignment.flavors.get(resource)
            if not flavor:
                continue
            if admitted_count and left is not None and left < admitted_count:
                amount = _scaled(resource, amount, admitted_count, left)
            if amount > 0:
                amounts = by_pod_set.setdefault(assignment.name, {})
                key = (admission.cluster_queue, flavor, resource)
                amounts[key] = amounts.get(key, Fraction(0)) + amount
    return by_pod_set


def admitted_quota(workload: Workload, context: QuotaContext, governed: frozenset[str]) -> dict[QuotaKey, Fraction]:
    """What Kueue charges the Workload, per quota key: its pod sets' admitted_quota_by_pod_set together."""
    amounts: dict[QuotaKey, Fraction] = {}
    for pod_set_amounts in admitted_quota_by_pod_set(workload, context, governed).values():
        for key, amount in pod_set_amounts.items():
            amounts[key] = amounts.get(key, Fraction(0)) + amount
    return amounts


def pod_set_hold(
    admitted: Mapping[str, Mapping[QuotaKey, Fraction]], used: Mapping[str, Mapping[QuotaKey, Fraction]]
) -> dict[QuotaKey, Fraction]:
    """What the Workload still holds: per pod set, what Kueue admitted it for minus what that pod set's own pods
    hold (by their `kueue.x-k8s.io/podset`), never below zero, summed per quota key. A pod set whose pods take
    more than admitted (allocationMode All on a large node) never eats into another pod set's hold. Usage of
    pods whose pod set the admission does not name (no label on a Workload of several) comes off the sum."""
    held: dict[QuotaKey, Fraction] = {}
    for pod_set, amounts in admitted.items():
        for key, left in remaining_hold(amounts, used.get(pod_set, {})).items():
            held[key] = held.get(key, Fraction(0)) + left
    unnamed = [amounts for pod_set, amounts in used.items() if pod_set not in admitted]
    return remaining_hold(held, *unnamed) if unnamed else held


def _scaled(resource: str, amount: Fraction, admitted_count: int, left: int) -> Fraction:
    """Kueue's integer arithmetic on resource values (pkg/resources ResourceValue: millicores for cpu, whole
    units rounded up otherwise): value // admitted_count * left."""
    unit = Fraction(1, 1000) if resource == "cpu" else Fraction(1)
    value = ceil(amount / unit)
    return Fraction(value // admitted_count * left) * unit


def admitted_workload_of(snapshot: ClusterSnapshot, pod: Pod) -> Workload | None:
    """The admitted Workload the pod belongs to, found as Kueue marks its pods (state/kueue/pod_workload.py:
    the Workload it names, else the one its pod, owners or JobSet own), whatever its ClusterQueue."""
    return pod_workload(pod, snapshot.workloads, snapshot.admitted_workloads)


def own_workload(snapshot: ClusterSnapshot, pod: Pod, cluster_queue: str | None) -> Workload | None:
    """The admitted Workload the pod belongs to when Kueue admitted it to the same ClusterQueue the pod's queue
    points to: the one whose flavors and hold the pod's charges count against."""
    if not cluster_queue:
        return None
    workload = admitted_workload_of(snapshot, pod)
    if workload is None or workload.admission is None or workload.admission.cluster_queue != cluster_queue:
        return None
    return workload


def own_flavors(snapshot: ClusterSnapshot, pod: Pod, cluster_queue: str | None) -> dict[str, str]:
    """Resource -> flavor Kueue admitted the pod's own pod set to (its `kueue.x-k8s.io/podset`), when its
    Workload was admitted to the pod's ClusterQueue; empty otherwise. Pod sets of one Workload may be in
    different flavors: each pod is held to its own pod set's."""
    workload = own_workload(snapshot, pod, cluster_queue)
    return admitted_flavors_of_pod(workload, pod) if workload is not None else {}


def remaining_hold(
    admitted: Mapping[QuotaKey, Fraction], *held_by_pods: Mapping[QuotaKey, Fraction]
) -> dict[QuotaKey, Fraction]:
    """admitted - what the Workload's pods hold, per key, never below zero."""
    remaining: dict[QuotaKey, Fraction] = {}
    for key, amount in admitted.items():
        left = amount - sum((held.get(key, Fraction(0)) for held in held_by_pods), Fraction(0))
        if left > 0:
            remaining[key] = left
    return remaining


def holds_with_reservations(
    totals: Mapping[QuotaKey, Fraction],
    by_workload: Mapping[str, Mapping[QuotaKey, Fraction]],
    reserved_by_workload: Mapping[str, Mapping[QuotaKey, Fraction]],
) -> tuple[Mapping[QuotaKey, Fraction], Mapping[str, Mapping[QuotaKey, Fraction]]]:
    """The holds once the reservations of the Workloads' pods (filtered, not yet seen bound) are subtracted
    too, never below zero: (totals, by Workload). Only the Workloads with reservations are recomputed."""
    if not reserved_by_workload:
        return totals, by_workload
    new_totals = dict(totals)
    new_by_workload = dict(by_workload)
    for key, reserved in reserved_by_workload.items():
        before = by_workload.get(key)
        if not before:
            continue
        hold = remaining_hold(before, reserved)
        add_signed(new_totals, before.items(), -1)
        add_signed(new_totals, hold.items(), 1)
        if hold:
            new_by_workload[key] = hold
        else:
            new_by_workload.pop(key, None)
    return new_totals, new_by_workload
