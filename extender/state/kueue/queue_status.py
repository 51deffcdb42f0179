"""What Kueue itself reports about a ClusterQueue (its status), kept apart from the spec."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from extender.state.fields import get_str, map_items
from extender.state.kueue.parsing import nonnegative_quantity

FlavorResourceKey = tuple[str, str]  # (flavor, resource)


@dataclass(frozen=True, slots=True)
class KueueQueueStatus:
    """A ClusterQueue's status as Kueue writes it (status.flavorsReservation / flavorsUsage, v1beta1 and v1beta2
    alike: [{name, resources: [{name, total, borrowed}]}]; pkg/controller/core/clusterqueue_controller.go).

    Kept apart from the ClusterQueue model: Kueue rewrites it on every admission, and the quota context (built
    from the spec) must not be rebuilt for that."""

    reservation: Mapping[FlavorResourceKey, Fraction]  # quota reserved for admitted (and reserving) Workloads
    usage: Mapping[FlavorResourceKey, Fraction]  # of those, Workloads that are admitted
    borrowed: Mapping[FlavorResourceKey, Fraction]  # reservation beyond nominal quota
    admitted_workloads: int = 0
    reserving_workloads: int = 0
    pending_workloads: int = 0


def _flavor_totals(status: Mapping[str, Any], key: str) -> tuple[dict[FlavorResourceKey, Fraction], ...]:
    totals: dict[FlavorResourceKey, Fraction] = {}
    borrowed: dict[FlavorResourceKey, Fraction] = {}
    for flavor_path, flavor in map_items(status, key, "status"):
        flavor_name = get_str(flavor, "name", flavor_path, required=True)
        for resource_path, resource in map_items(flavor, "resources", flavor_path):
            resource_key = (flavor_name, get_str(resource, "name", resource_path, required=True))
            totals[resource_key] = nonnegative_quantity(resource, "total", resource_path) or Fraction(0)
            borrowed[resource_key] = nonnegative_quantity(resource, "borrowed", resource_path) or Fraction(0)
    return totals, borrowed


def parse_queue_status(obj: Mapping[str, Any]) -> KueueQueueStatus | None:
    """None when the ClusterQueue has no status yet (Kueue not running, or not reconciled it yet)."""
    status = obj.get("status")
    if not isinstance(status, Mapping) or not status:
        return None
    reservation, borrowed = _flavor_totals(status, "flavorsReservation")
    usage, _ = _flavor_totals(status, "flavorsUsage")

    def count(name: str) -> int:
        value = status.get(name, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    return KueueQueueStatus(
        reservation=reservation,
        usage=usage,
        borrowed=borrowed,
        admitted_workloads=count("admittedWorkloads"),
        reserving_workloads=count("reservingWorkloads"),
        pending_workloads=count("pendingWorkloads"),
    )
