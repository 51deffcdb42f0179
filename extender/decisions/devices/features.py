"""The DRA feature gates the allocator honours, as one frozen value (upstream's structured.Features).

kube-scheduler passes its gates to the structured allocator as `structured.Features`
(k8s.io/dynamic-resource-allocation@v0.37.2 structured/internal/types.go, filled in
pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go); the experimental allocator
(structured/internal/experimental/allocator_experimental.go, pools_experimental.go) changes its behaviour per
gate. The extender mirrors that: the service owns one `Features` for its life (config `features:`), and every
decision reads it from there. Defaults are Kubernetes 1.37's (pkg/features/kube_features.go at v1.37.2).

What each gate turned off does, as upstream:
- DRAPrioritizedList: a request with firstAvailable fails the pod (the plugin's PreFilter, unschedulable).
- DRAAdminAccess: a request with adminAccess is an allocator error. (GA and locked on in 1.37: the config
  refuses turning it off, as kube-scheduler does; the value itself supports it, for upstream's table.)
- DRAConsumableCapacity: allowMultipleAllocations is ignored (every device is exclusive) and no capacity is
  checked or consumed; a request with capacity requests is an allocator error, except where upstream runs its
  stable allocator (DRADeviceBindingConditions and DRAFractionalCapacityRange off too: `stable_allocator`),
  which ignores the capacity requests.
- DRADeviceTaints: taints are ignored.
- DRADeviceBindingConditions (with DRAResourceClaimDeviceStatus, upstream's DeviceBindingAndStatus): a device
  with bindingConditions is not selectable.
- DRAPartitionableDevices: slices with perDeviceNodeSelection or sharedCounters contribute no devices, and a
  device that consumes counters cannot be allocated.
- DRAFractionalCapacityRange: capacity ranges with fractional min/max/step are checked and rounded in whole
  units instead of milli-units (consumable_capacity.go useMilli). A device's precomputed `default_request_fits`
  (whether a request without capacity requests may take it) is computed with the gate on and not recomputed
  with it off: a known gap, only for fractional validRanges.
- DRAExtendedResource: does not change the structured allocator (it is the plugin's extended-resource path);
  accepted so that a kube-scheduler configuration can be mirrored name for name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace

from extender.decisions.devices.results import CATEGORY_FEATURE_GATE, NotAllocatable, PendingClaim
from extender.state.dra.device_class import DeviceClass
from extender.state.dra.devices import Device
from extender.state.inventory import NodeDevices

# Gate name as upstream spells it -> (Features field, on by default in Kubernetes 1.37).
GATES: Mapping[str, tuple[str, bool]] = {
    "DRAAdminAccess": ("admin_access", True),
    "DRAConsumableCapacity": ("consumable_capacity", True),
    "DRADeviceBindingConditions": ("device_binding_conditions", True),
    "DRADeviceTaints": ("device_taints", True),
    "DRAExtendedResource": ("extended_resource", True),
    "DRAFractionalCapacityRange": ("fractional_capacity_range", True),
    "DRAPartitionableDevices": ("partitionable_devices", True),
    "DRAPrioritizedList": ("prioritized_list", True),
}

# Alpha gates (off by default in 1.37) the allocator does not implement: enabling one is refused at start.
UNIMPLEMENTED_ALPHA_GATES: tuple[str, ...] = (
    "DRADerivedAttributes",
    "DRADeviceCompatibilityGroups",
    "DRAListTypeAttributes",
    "DRAOptionalNodeOperations",
)

# GA gates locked to their default (on) in 1.37: kube-scheduler refuses to start with one turned off.
LOCKED_GATES: tuple[str, ...] = ("DRAAdminAccess", "DRAExtendedResource", "DRAPrioritizedList")

# Gate -> the gate it needs (kube_features.go defaultKubernetesFeatureGateDependencies): kube-scheduler refuses to
# start with a gate on whose dependency is off.
GATE_DEPENDENCIES: Mapping[str, str] = {"DRAFractionalCapacityRange": "DRAConsumableCapacity"}

# Upstream's allocator table names the binding-conditions gate pair this way (allocatortesting).
TABLE_ALIASES: Mapping[str, str] = {
    "DRADeviceBindingConditions+DRAResourceClaimDeviceStatus": "DRADeviceBindingConditions",
}


@dataclass(frozen=True, slots=True)
class Features:
    """One bool per gate; hashable, so caches that depend on the gates can key on it."""

    admin_access: bool = True
    consumable_capacity: bool = True
    device_binding_conditions: bool = True
    device_taints: bool = True
    extended_resource: bool = True
    fractional_capacity_range: bool = True
    partitionable_devices: bool = True
    prioritized_list: bool = True

    @property
    def changes_devices(self) -> bool:
        """Whether a node's devices look different to the allocator than with every gate on."""
        return not (
            self.consumable_capacity
            and self.device_binding_conditions
            and self.device_taints
            and self.partitionable_devices
        )

    @property
    def stable_allocator(self) -> bool:
        """Whether upstream runs its stable allocator with these gates: structured.NewAllocator picks the first
        implementation whose SupportedFeatures cover the enabled ones, and stable/allocator_stable.go supports
        neither DeviceBindingAndStatus, ConsumableCapacity nor FractionalCapacityRange. The stable allocator does
        not know capacity requests at all: it ignores them (the incubating one, chosen as soon as one of those
        gates is on, refuses them while DRAConsumableCapacity is off)."""
        return not (self.consumable_capacity or self.device_binding_conditions or self.fractional_capacity_range)

    def gates(self) -> dict[str, bool]:
        """Gate name -> enabled, in name order (for the start-up log and diagnostics)."""
        return {name: getattr(self, field_name) for name, (field_name, _) in sorted(GATES.items())}

    @classmethod
    def from_enabled(cls, enabled: Iterable[str]) -> Features:
        """The gates listed in `enabled` on, every other one off (upstream's allocator table lists a case's
        features this way). Unknown names raise ValueError."""
        names = {TABLE_ALIASES.get(name, name) for name in enabled}
        unknown = names - set(GATES)
        if unknown:
            raise ValueError(f"unknown or unsupported feature gate(s): {', '.join(sorted(unknown))}")
        return cls(**{field_name: name in names for name, (field_name, _) in GATES.items()})


DEFAULT_FEATURES = Features()


def gated_devices(devices: NodeDevices, features: Features) -> NodeDevices:
    """A node's devices as the allocator sees them with `features` (only called when `changes_devices`).

    Upstream drops slices with perDeviceNodeSelection or sharedCounters while DRAPartitionableDevices is off
    (pools_experimental.go GatherPools; the pool's completeness is still judged on all its slices), ignores
    taints while DRADeviceTaints is off (allocateDevice), treats no device as multi-allocatable and checks no
    capacity while DRAConsumableCapacity is off (allocateDevice, CmpRequestOverCapacity behind the gate), and
    refuses devices with bindingConditions as not selectable while DRADeviceBindingConditions is off
    (isSelectable). The result is a new NodeDevices with new Device objects, so every memo keyed on either
    (selector verdicts, free lists) is naturally separate from the all-gates-on view; callers remember the
    result per (NodeDevices, Features) in DecisionCaches.gated so that those identities are stable."""
    dropped_slices: set[tuple[str, str, str]] = set()
    if not features.partitionable_devices:
        for pool in devices.pools:
            for pool_slice in pool.all_slices or pool.slices:
                if pool_slice.per_device_node_selection or pool_slice.shared_counters:
                    dropped_slices.add((pool.driver, pool.name, pool_slice.name))
    # Devices compare and hash by identity (eq=False): usable is a subset of devices, each converted once.
    converted: dict[Device, Device | None] = {}

    def convert(device: Device) -> Device | None:
        if (device.driver, device.pool, device.slice_name) in dropped_slices:
            return None
        changes: dict[str, object] = {}
        if not features.device_taints and device.taints:
            changes["taints"] = ()
        if not features.consumable_capacity and (device.allow_multiple_allocations or device.consumable):
            changes.update(allow_multiple_allocations=False, consumable={}, default_request_fits=True)
        return replace(device, **changes) if changes else device  # type: ignore[arg-type]

    def view(device: Device) -> Device | None:
        if device not in converted:
            converted[device] = convert(device)
        return converted[device]

    shown = tuple(d for d in map(view, devices.devices) if d is not None)
    usable = tuple(
        d
        for d in map(view, devices.usable)
        if d is not None and (features.device_binding_conditions or not d.binding_conditions)
    )
    return NodeDevices(shown, devices.pools, usable, devices.has_unusable)


def gate_failure(
    pending: Sequence[PendingClaim], classes: Mapping[str, DeviceClass], features: Features
) -> NotAllocatable | None:
    """What fails the pod on every node before any device is looked at, because a gate is off (node left "").

    As upstream, in its order: the plugin's PreFilter (dynamicresources.go) walks the requests and refuses a
    firstAvailable request while DRAPrioritizedList is off (unschedulable; a missing DeviceClass met first wins,
    reported by the search); then the allocator (allocator_experimental.go Allocate, validateDeviceRequest)
    errors on capacity requests while DRAConsumableCapacity is off (not the stable allocator, which ignores
    them: Features.stable_allocator) and on adminAccess while DRAAdminAccess is.
    """
    if not features.prioritized_list:
        for claim in pending:
            for request in claim.spec.requests:
                if request.exactly is not None:
                    if request.exactly.device_class_name not in classes:
                        return None
                    continue
                summary = (
                    f"{claim.label} request {request.name}: has subrequests, but the DRAPrioritizedList feature "
                    "is disabled"
                )
                return NotAllocatable("", CATEGORY_FEATURE_GATE, summary, summary, True, claim.label, request.name)
    for claim in pending:
        for request in claim.spec.requests:
            if features.consumable_capacity or features.stable_allocator:
                break
            for sub in request.alternatives:
                if sub.capacity_requests:
                    name = request.name if request.exactly is not None else f"subrequest {sub.name}"
                    where = f"request {name}" if request.exactly is not None else name
                    summary = (
                        f"{claim.label} {where}: has capacity requests, but the DRAConsumableCapacity feature is "
                        "disabled"
                    )
                    return NotAllocatable(
                        "", CATEGORY_FEATURE_GATE, summary, summary, True, claim.label, request.name, fatal=True
                    )
        for request in claim.spec.requests:
            if features.admin_access:
                break
            for sub in request.alternatives:
                if sub.admin_access:
                    name = request.name if request.exactly is not None else f"{request.name}/{sub.name}"
                    summary = f"{claim.label} request {name}: admin access is requested, but the feature is disabled"
                    return NotAllocatable(
                        "", CATEGORY_FEATURE_GATE, summary, summary, True, claim.label, request.name, fatal=True
                    )
    return None


assert {f.name for f in fields(Features)} == {field_name for field_name, _ in GATES.values()}
assert all(getattr(DEFAULT_FEATURES, field_name) == on for field_name, on in GATES.values())
