"""A node's devices as people see them: who holds each device, and its state (free, allocated, in flight,
tainted, partly used, unusable) with the reason, for the node report and the web view's device grid."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from extender.state.dra.devices import BLOCKING_TAINT_EFFECTS, Device, DeviceKey
from extender.state.inventory import PoolKey, consumed_counters
from extender.state.kueue.resource_flavor import ResourceFlavor
from extender.state.quantity import format_quantity
from extender.state.snapshot import ClusterSnapshot

FREE, ALLOCATED, IN_FLIGHT, TAINTED, PARTIAL, UNUSABLE = (
    "free",
    "allocated",
    "in-flight",
    "tainted",
    "partial",
    "unusable",
)
DEVICE_STATES = (FREE, PARTIAL, TAINTED, IN_FLIGHT, ALLOCATED, UNUSABLE)


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


NO_FLAVOR = "(no flavor matches)"


def flavor_group(flavors: Sequence[ResourceFlavor], labels: Mapping[str, str]) -> str:
    """The ResourceFlavors whose nodeLabels select the node (flavors without nodeLabels select every node and
    would say nothing): ResourceFlavor.matches_node, the test Kueue and the quota decisions use."""
    matching = [f.name for f in flavors if f.node_labels and f.matches_node(labels)]
    return " + ".join(matching) if matching else NO_FLAVOR


@dataclass(slots=True)
class GroupSummary:
    name: str
    nodes: int = 0
    nodes_with_free: int = 0
    devices: Counter[str] = field(default_factory=Counter)

    @property
    def total_devices(self) -> int:
        return sum(self.devices.values())


GridCells = list[tuple[str, Device]]  # (state, device) of each device of a node
DrawnNode = tuple[str, list[tuple[str, str, str]], dict[str, int]]  # (node, [(state, device name, why)], counts)


@dataclass(frozen=True, slots=True)
class GridNode:
    """A node of the device grid: the flavor group it is shown under, and each device's state."""

    group: str
    name: str
    cells: GridCells
    counts: dict[str, int]


@dataclass(frozen=True, slots=True)
class DeviceGrid:
    """The node x device grid: per-flavor totals over every node, and the nodes the filters keep, in name order.

    Every node is classified (so the totals are exact), but the reasons (`DeviceStates.why`) are drawn only for
    the page shown (`drawn`): 5000 nodes x 8 devices are 40000 cells."""

    groups: list[GroupSummary]
    shown: list[GridNode]
    states: DeviceStates

    def drawn(
        self, nodes: Sequence[GridNode]
    ) -> dict[str, list[tuple[str, list[tuple[str, str, str]], dict[str, int]]]]:
        """flavor group -> (node, [(state, device name, why)], counts) for the nodes of one page."""
        by_group: dict[str, list[tuple[str, list[tuple[str, str, str]], dict[str, int]]]] = {}
        for node in nodes:
            cells = [(state, device.name, self.states.why(device, state)) for state, device in node.cells]
            by_group.setdefault(node.group, []).append((node.name, cells, node.counts))
        return by_group


def device_grid(
    snapshot: ClusterSnapshot, flavors: Sequence[ResourceFlavor], *, group: str = "", state: str = "", query: str = ""
) -> DeviceGrid:
    """Every node's devices classified, grouped by the flavors selecting the node; `group`, `state` and `query`
    (a substring of the node's name) keep the nodes shown, never the totals."""
    states = DeviceStates(snapshot)
    summaries: dict[str, GroupSummary] = {}
    shown: list[GridNode] = []
    state_of = states.state_of
    for name in sorted(snapshot.nodes):
        node_group = flavor_group(flavors, snapshot.nodes[name].labels)
        node_devices = snapshot.node_devices(name)
        usable = node_devices.usable
        all_usable = len(usable) == len(node_devices.devices)
        usable_keys = set() if all_usable else {device.key for device in usable}
        cells = [(state_of(d, all_usable or d.key in usable_keys), d) for d in node_devices.devices]
        counts: dict[str, int] = {}
        for cell_state, _ in cells:
            counts[cell_state] = counts.get(cell_state, 0) + 1
        summary = summaries.get(node_group)
        if summary is None:
            summary = summaries[node_group] = GroupSummary(node_group)
        summary.nodes += 1
        summary.devices.update(counts)
        if FREE in counts:
            summary.nodes_with_free += 1
        if (group and node_group != group) or (state and state not in counts) or (query and query not in name):
            continue
        shown.append(GridNode(node_group, name, cells, counts))
    groups = sorted(summaries.values(), key=lambda s: (s.name == NO_FLAVOR, s.name))
    return DeviceGrid(groups, shown, states)


def state_counts(report: Mapping[str, Any]) -> Counter[str]:
    """How many devices of a node report (node_json) are in each state."""
    return Counter(device["state"] for device in report["devices"])
