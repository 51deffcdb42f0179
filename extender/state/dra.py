"""resource.k8s.io objects: ResourceSlice, DeviceClass, ResourceClaim, ResourceClaimTemplate.

v1 and v1beta2 share one shape; v1beta1 (requests without the `exactly` wrapper, devices under `basic`) is
converted here so that every layer above sees one model, whatever Kubernetes release the cluster runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, cast

from extender.state.capacity import (
    CapacityPolicy,
    CapacityRange,
    DeviceCapacity,
    default_request_fits,
)
from extender.state.core import NodeSelector, Taint, Toleration, parse_metadata, parse_node_selector
from extender.state.errors import ObjectError
from extender.state.fields import (
    child_path,
    get_bool,
    get_int,
    get_map,
    get_str,
    get_str_list,
    map_items,
    type_name,
)
from extender.state.quantity import QuantityError, parse_quantity

DeviceKey = tuple[str, str, str]
"""(driver, pool, device): how the allocator and claim results name a device."""

MAX_DEVICES_PER_ALLOCATION = 32
MAX_SUBREQUESTS = 8
# List-valued attributes exist only with DRAListTypeAttributes (alpha, off in 1.37); not modelled.
LIST_ATTRIBUTE_KINDS = ("ints", "bools", "strings", "versions")
ALLOCATION_MODE_EXACT = "ExactCount"
ALLOCATION_MODE_ALL = "All"
TAINT_EFFECTS = frozenset({"None", "NoSchedule", "NoExecute"})
BLOCKING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class Attribute:
    """A device attribute value with its declared type: matchAttribute compares type and value."""

    kind: str  # "int" | "bool" | "string" | "version" | "unknown" (no value of a type we know)
    value: int | bool | str


@dataclass(frozen=True, slots=True)
class CounterSet:
    name: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    counter_set: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True, eq=False)
class Device:
    """One published device. Compared and hashed by identity: a slice update replaces its devices, which is
    exactly when cached selector verdicts about them must stop applying."""

    key: DeviceKey
    name: str
    driver: str
    pool: str
    slice_name: str
    attributes: Mapping[str, Attribute]  # fully qualified names
    capacity: Mapping[str, Fraction]  # fully qualified names
    consumes_counters: tuple[CounterConsumption, ...] = ()
    taints: tuple[Taint, ...] = ()
    allow_multiple_allocations: bool = False
    # The capacities under their names as the slice spells them: capacity requests and requestPolicy match
    # those names as written (upstream compares the raw map keys), unlike CEL, which sees qualified names.
    consumable: Mapping[str, DeviceCapacity] = field(default_factory=dict)
    # Whether a request without capacity requests can take the device at all: what it would consume (each
    # policy's default, else the whole value) satisfies every requestPolicy. Intrinsic to the device, so the
    # allocator's shortcut can tell, without evaluating policies per pod, whether it may use the device.
    default_request_fits: bool = True
    # DRADeviceBindingConditions (beta, on by default since 1.36): the scheduler waits in PreBind until the
    # conditions are true on the claim (and retries when a failure condition is). `binding_conditions` is None
    # when the field is absent: upstream orders pools by whether any device sets it at all.
    binding_conditions: tuple[str, ...] | None = None
    binding_failure_conditions: tuple[str, ...] = ()
    binds_to_node: bool = False
    # Only with the slice's perDeviceNodeSelection: where this device is reachable.
    node_name: str = ""
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    # Why the allocator must never use this device ("" when it may): a capacity requestPolicy that upstream's
    # API validation refuses and its allocator cannot compute with. Names the slice, the device and the field.
    unusable_reason: str = ""


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    pool_generation: int
    pool_slice_count: int
    node_name: str
    node_selector: NodeSelector | None
    all_nodes: bool
    per_device_node_selection: bool
    devices: tuple[Device, ...]
    shared_counters: tuple[CounterSet, ...]
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]  # CEL expressions, all must be true
    extended_resource_name: str = ""
    resource_version: str = ""
    # metadata.creationTimestamp (RFC 3339, so text order is time order): the scheduler resolves an explicit
    # extendedResourceName shared by two classes to the newest one.
    created: str = ""


@dataclass(frozen=True, slots=True)
class DeviceSubRequest:
    """The part of a request that picks devices: `exactly` or one `firstAvailable` entry."""

    name: str
    device_class_name: str
    selectors: tuple[str, ...]
    allocation_mode: str
    count: int
    admin_access: bool
    tolerations: tuple[Toleration, ...]
    # capacity.requests (DRAConsumableCapacity): capacity name as written -> amount. A tuple of pairs, sorted,
    # so that the subrequest stays hashable.
    capacity_requests: tuple[tuple[str, Fraction], ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    exactly: DeviceSubRequest | None
    first_available: tuple[DeviceSubRequest, ...]

    @property
    def alternatives(self) -> tuple[DeviceSubRequest, ...]:
        return (self.exactly,) if self.exactly is not None else self.first_available


@dataclass(frozen=True, slots=True)
class DeviceConstraint:
    requests: tuple[str, ...]  # empty: every request of the claim
    match_attribute: str = ""
    distinct_attribute: str = ""


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[DeviceConstraint, ...]


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    request: str  # "<request>" or "<request>/<subrequest>"
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    # A share of a device that allows multiple allocations (DRAConsumableCapacity): its shareID, and the
    # capacity this share consumes (name as written -> amount, sorted pairs).
    share_id: str = ""
    consumed_capacity: tuple[tuple[str, Fraction], ...] = ()

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class Allocation:
    results: tuple[AllocatedDevice, ...]
    node_selector: NodeSelector | None


@dataclass(frozen=True, slots=True)
class ConsumerRef:
    resource: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str
    spec: ClaimSpec
    allocation: Allocation | None
    reserved_for: tuple[ConsumerRef, ...]
    owner_uids: tuple[str, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    # Not compared: a finalizer added or removed is no change to the view (ClusterStore._upsert)
    resource_version: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplate:
    namespace: str
    name: str
    spec: ClaimSpec

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


# --- parsing --------------------------------------------------------------------------------------------------


def qualify(name: str, driver: str) -> str:
    """Attribute and capacity names without a domain belong to the driver's domain."""
    return name if "/" in name else f"{driver}/{name}"


def consumed_by_name(consumed: Sequence[tuple[str, Fraction]], driver: str) -> dict[str, Fraction]:
    """A share's consumed capacity (pairs as the result writes them) by qualified capacity name, as
    Device.capacity is keyed."""
    return {qualify(name, driver): amount for name, amount in consumed}


def _parse_attribute(raw: object, path: str) -> Attribute:
    if not isinstance(raw, Mapping):
        raise ObjectError(path, f"must be an object, got {type_name(raw)}")
    present = [kind for kind in ("int", "bool", "string", "version") if raw.get(kind) is not None]
    if not present and not any(raw.get(kind) is not None for kind in LIST_ATTRIBUTE_KINDS):
        # A value of a type this client does not know (a newer API's): the device stays, and every CEL
        # selector evaluated on it fails, as upstream's getAttributeValue ("unsupported attribute value").
        return Attribute("unknown", "")
    if len(present) != 1:
        raise ObjectError(path, "must have exactly one of int, bool, string, version")
    kind = present[0]
    value = raw[kind]
    expected = {"int": int, "bool": bool, "string": str, "version": str}[kind]
    if not isinstance(value, expected) or (kind == "int" and isinstance(value, bool)):
        raise ObjectError(child_path(path, kind), f"must be a {kind}, got {type_name(value)}")
    return Attribute(kind, cast("int | bool | str", value))  # checked just above


def _parse_quantity_field(raw: object, path: str) -> Fraction:
    try:
        return parse_quantity(raw)
    except QuantityError as error:
        raise ObjectError(path, str(error)) from None


def _parse_counters(raw: Mapping[str, Any], path: str) -> dict[str, Fraction]:
    counters: dict[str, Fraction] = {}
    for name, counter in get_map(raw, "counters", path).items():
        counter_path = child_path(child_path(path, "counters"), name)
        if not isinstance(counter, Mapping):
            raise ObjectError(counter_path, f"must be an object, got {type_name(counter)}")
        counters[name] = _parse_quantity_field(counter.get("value"), child_path(counter_path, "value"))
    return counters


def _parse_taints(raw: Mapping[str, Any], path: str) -> tuple[Taint, ...]:
    taints = []
    for taint_path, taint in map_items(raw, "taints", path):
        effect = get_str(taint, "effect", taint_path, required=True)
        if effect not in TAINT_EFFECTS:
            raise ObjectError(child_path(taint_path, "effect"), f"unknown effect {effect!r}")
        taints.append(
            Taint(
                key=get_str(taint, "key", taint_path, required=True),
                value=get_str(taint, "value", taint_path),
                effect=effect,
            )
        )
    return tuple(taints)


def _optional_quantity(raw: Mapping[str, Any], key: str, path: str) -> Fraction | None:
    value = raw.get(key)
    return None if value is None else _parse_quantity_field(value, child_path(path, key))


def _parse_capacity_policy(raw: Mapping[str, Any], path: str) -> CapacityPolicy | None:
    """A capacity's requestPolicy, or ObjectError when it is malformed in a way upstream's allocator cannot
    compute with: a field that is not an object, list or quantity (the API server cannot even decode it), a
    validRange step that is not positive (upstream's roundUpRange / violateValidRange divide by it) or a step
    without min (violateValidRange reads min). kube-apiserver refuses all of these (pkg/apis/resource/validation,
    validateRequestPolicyRange), but only on create and on a changed capacity, so a stored slice can still carry
    one. Other policies that validation refuses (unsorted validValues, a default outside them, min above max)
    are kept: upstream's allocator computes with them as they are, and so does capacity.py."""
    policy = get_map(raw, "requestPolicy", path)
    if not policy:
        return None
    policy_path = child_path(path, "requestPolicy")
    valid_values = None
    if policy.get("validValues") is not None:
        values = policy["validValues"]
        if not isinstance(values, list):
            raise ObjectError(child_path(policy_path, "validValues"), f"must be a list, got {type_name(values)}")
        valid_values = tuple(
            _parse_quantity_field(v, child_path(policy_path, f"validValues[{i}]")) for i, v in enumerate(values)
        )
    valid_range = None
    range_raw = get_map(policy, "validRange", policy_path)
    if range_raw or policy.get("validRange") is not None:
        range_path = child_path(policy_path, "validRange")
        valid_range = CapacityRange(
            _optional_quantity(range_raw, "min", range_path),
            _optional_quantity(range_raw, "max", range_path),
            _optional_quantity(range_raw, "step", range_path),
        )
        if valid_range.step is not None and valid_range.step <= 0:
            raise ObjectError(child_path(range_path, "step"), "must be greater than zero")
        if valid_range.step is not None and valid_range.min is None:
            raise ObjectError(child_path(range_path, "min"), "required when validRange is defined")
    return CapacityPolicy(_optional_quantity(policy, "default", policy_path), valid_values, valid_range)


def _parse_capacity_requests(raw: Mapping[str, Any], path: str) -> tuple[tuple[str, Fraction], ...]:
    capacity = get_map(raw, "capacity", path)
    if not capacity:
        return ()
    capacity_path = child_path(path, "capacity")
    requests = get_map(capacity, "requests", capacity_path)
    requests_path = child_path(capacity_path, "requests")
    parsed = [(name, _parse_quantity_field(value, child_path(requests_path, name))) for name, value in requests.items()]
    return tuple(sorted(parsed))


def _parse_device(raw: Mapping[str, Any], path: str, slice_name: str, driver: str, pool: str) -> Device:
    name = get_str(raw, "name", path, required=True)
    body = raw
    body_path = path
    if "basic" in raw:  # v1beta1 wraps the device's fields in `basic`
        body = get_map(raw, "basic", path)
        body_path = child_path(path, "basic")
    attributes = {
        qualify(attr_name, driver): _parse_attribute(value, child_path(child_path(body_path, "attributes"), attr_name))
        for attr_name, value in get_map(body, "attributes", body_path).items()
    }
    capacity: dict[str, Fraction] = {}
    consumable: dict[str, DeviceCapacity] = {}
    unusable_reason = ""
    for cap_name, value in get_map(body, "capacity", body_path).items():
        cap_path = child_path(child_path(body_path, "capacity"), cap_name)
        if not isinstance(value, Mapping):
            raise ObjectError(cap_path, f"must be an object, got {type_name(value)}")
        amount = _parse_quantity_field(value.get("value"), child_path(cap_path, "value"))
        capacity[qualify(cap_name, driver)] = amount
        try:
            policy = _parse_capacity_policy(value, cap_path)
        except ObjectError as error:
            # One device's malformed requestPolicy makes that device unusable, not its whole slice.
            unusable_reason = unusable_reason or (
                f"ResourceSlice {slice_name}, device {name}: malformed requestPolicy, {error.describe()}"
            )
            policy = None
        consumable[cap_name] = DeviceCapacity(amount, policy)
    consumes = tuple(
        CounterConsumption(get_str(item, "counterSet", item_path, required=True), _parse_counters(item, item_path))
        for item_path, item in map_items(body, "consumesCounters", body_path)
    )
    node_selector_raw = get_map(body, "nodeSelector", body_path)
    return Device(
        key=(driver, pool, name),
        name=name,
        driver=driver,
        pool=pool,
        slice_name=slice_name,
        attributes=attributes,
        capacity=capacity,
        consumes_counters=consumes,
        taints=_parse_taints(body, body_path),
        allow_multiple_allocations=get_bool(body, "allowMultipleAllocations", body_path),
        consumable=consumable,
        default_request_fits=default_request_fits(consumable),
        binding_conditions=get_str_list(body, "bindingConditions", body_path) if "bindingConditions" in body else None,
        binding_failure_conditions=get_str_list(body, "bindingFailureConditions", body_path),
        binds_to_node=get_bool(body, "bindsToNode", body_path),
        node_name=get_str(body, "nodeName", body_path),
        node_selector=parse_node_selector(node_selector_raw, child_path(body_path, "nodeSelector"))
        if node_selector_raw
        else None,
        all_nodes=get_bool(body, "allNodes", body_path),
        unusable_reason=unusable_reason,
    )


def parse_resource_slice(obj: Mapping[str, Any]) -> ResourceSlice:
    meta = parse_metadata(obj, namespaced=False)
    spec = get_map(obj, "spec", "", required=True)
    driver = get_str(spec, "driver", "spec", required=True)
    pool_raw = get_map(spec, "pool", "spec", required=True)
    pool = get_str(pool_raw, "name", "spec.pool", required=True)
    node_selector_raw = get_map(spec, "nodeSelector", "spec")
    node_name = get_str(spec, "nodeName", "spec")
    all_nodes = get_bool(spec, "allNodes", "spec")
    per_device = get_bool(spec, "perDeviceNodeSelection", "spec")
    chosen = sum(bool(x) for x in (node_name, node_selector_raw, all_nodes, per_device))
    if chosen != 1:
        raise ObjectError("spec", "exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection is required")
    devices = tuple(
        _parse_device(raw, path, meta.name, driver, pool) for path, raw in map_items(spec, "devices", "spec")
    )
    shared = tuple(
        CounterSet(get_str(raw, "name", path, required=True), _parse_counters(raw, path))
        for path, raw in map_items(spec, "sharedCounters", "spec")
    )
    return ResourceSlice(
        name=meta.name,
        driver=driver,
        pool=pool,
        pool_generation=get_int(pool_raw, "generation", "spec.pool", minimum=0),
        pool_slice_count=get_int(pool_raw, "resourceSliceCount", "spec.pool", default=1, minimum=1),
        node_name=node_name,
        node_selector=parse_node_selector(node_selector_raw, "spec.nodeSelector") if node_selector_raw else None,
        all_nodes=all_nodes,
        per_device_node_selection=per_device,
        devices=devices,
        shared_counters=shared,
        resource_version=meta.resource_version,
    )


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    """A cluster-level taint on the devices its selector names (DRADeviceTaints); the scheduler treats it like
    a taint the driver published on the device itself. Empty selector fields match everything."""

    name: str
    driver: str
    pool: str
    device: str
    taint: Taint
    # Older API versions could also select by DeviceClass or CEL; such rules are not applied (logged by callers).
    unsupported_selector: bool = False

    def matches(self, device: Device) -> bool:
        if self.unsupported_selector:
            return False
        return (
            (not self.driver or self.driver == device.driver)
            and (not self.pool or self.pool == device.pool)
            and (not self.device or self.device == device.name)
        )


def parse_device_taint_rule(obj: Mapping[str, Any]) -> DeviceTaintRule:
    meta = parse_metadata(obj, namespaced=False)
    spec = get_map(obj, "spec", "", required=True)
    selector = get_map(spec, "deviceSelector", "spec")
    taint_raw = get_map(spec, "taint", "spec", required=True)
    effect = get_str(taint_raw, "effect", "spec.taint", required=True)
    if effect not in TAINT_EFFECTS:
        raise ObjectError("spec.taint.effect", f"unknown effect {effect!r}")
    taint = Taint(
        key=get_str(taint_raw, "key", "spec.taint", required=True),
        value=get_str(taint_raw, "value", "spec.taint"),
        effect=effect,
    )
    return DeviceTaintRule(
        name=meta.name,
        driver=get_str(selector, "driver", "spec.deviceSelector"),
        pool=get_str(selector, "pool", "spec.deviceSelector"),
        device=get_str(selector, "device", "spec.deviceSelector"),
        taint=taint,
        unsupported_selector=bool(selector.get("deviceClassName") or selector.get("selectors")),
    )


def apply_taint_rules(resource_slice: ResourceSlice, rules: Sequence[DeviceTaintRule]) -> ResourceSlice:
    """The slice with the rules' taints added to the devices they select (the same object when none match)."""
    relevant = [rule for rule in rules if not rule.driver or rule.driver == resource_slice.driver]
    if not relevant:
        return resource_slice
    changed = False
    devices = []
    for device in resource_slice.devices:
        extra = tuple(rule.taint for rule in relevant if rule.matches(device) and rule.taint not in device.taints)
        if extra:
            changed = True
            device = replace(device, taints=device.taints + extra)
        devices.append(device)
    return replace(resource_slice, devices=tuple(devices)) if changed else resource_slice


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    meta = parse_metadata(obj, namespaced=False)
    spec = get_map(obj, "spec", "")
    return DeviceClass(
        name=meta.name,
        selectors=_parse_selectors(spec, "spec"),
        extended_resource_name=get_str(spec, "extendedResourceName", "spec"),
        resource_version=meta.resource_version,
        created=get_str(get_map(obj, "metadata", ""), "creationTimestamp", "metadata"),
    )


def _parse_selectors(raw: Mapping[str, Any], path: str) -> tuple[str, ...]:
    """CEL expressions; a selector without one (a selector type this client does not know) is kept as "",
    which fails to compile when the allocator reaches a device, as upstream's "CEL expression empty
    (unsupported selector type?)" error does (structured/internal/incubating selectorsMatch)."""
    expressions = []
    for selector_path, selector in map_items(raw, "selectors", path):
        cel = get_map(selector, "cel", selector_path)
        expressions.append(get_str(cel, "expression", child_path(selector_path, "cel")))
    return tuple(expressions)


def _parse_tolerations(raw: Mapping[str, Any], path: str) -> tuple[Toleration, ...]:
    tolerations = []
    for tol_path, tol in map_items(raw, "tolerations", path):
        operator = get_str(tol, "operator", tol_path, default="Equal")
        if operator not in ("Equal", "Exists"):
            raise ObjectError(child_path(tol_path, "operator"), f"unknown operator {operator!r}")
        effect = get_str(tol, "effect", tol_path)
        if effect and effect not in TAINT_EFFECTS:
            raise ObjectError(child_path(tol_path, "effect"), f"unknown effect {effect!r}")
        tolerations.append(
            Toleration(
                key=get_str(tol, "key", tol_path),
                operator=operator,
                value=get_str(tol, "value", tol_path),
                effect=effect,
            )
        )
    return tuple(tolerations)


def _parse_subrequest(raw: Mapping[str, Any], path: str, name: str, *, allow_admin: bool) -> DeviceSubRequest:
    # An allocationMode this client does not know (a newer API's) and an empty deviceClassName are kept: the
    # allocator reports them for the pod, as upstream's does ("unsupported count mode", "unsupported request
    # type"), instead of the claim seeming not to exist.
    mode = get_str(raw, "allocationMode", path, default=ALLOCATION_MODE_EXACT)
    # No upper bound here: the API server accepts any positive count, and upstream's allocator, not
    # validation, refuses a claim over AllocationResultsMaxSize (32) devices, or skips a firstAvailable
    # subrequest over it (structured/internal/incubating validateDeviceRequest and allocateOne).
    count = get_int(raw, "count", path, default=1, minimum=1)
    admin = get_bool(raw, "adminAccess", path)
    if admin and not allow_admin:
        raise ObjectError(child_path(path, "adminAccess"), "is not allowed in a firstAvailable subrequest")
    return DeviceSubRequest(
        name=name,
        device_class_name=get_str(raw, "deviceClassName", path),
        selectors=_parse_selectors(raw, path),
        allocation_mode=mode,
        count=count if mode == ALLOCATION_MODE_EXACT else 0,
        admin_access=admin,
        tolerations=_parse_tolerations(raw, path),
        capacity_requests=_parse_capacity_requests(raw, path),
    )


def _parse_request(raw: Mapping[str, Any], path: str) -> DeviceRequest:
    name = get_str(raw, "name", path, required=True)
    if "/" in name:
        raise ObjectError(child_path(path, "name"), "must not contain '/'")
    first_available = []
    for sub_path, sub in map_items(raw, "firstAvailable", path):
        sub_name = get_str(sub, "name", sub_path, required=True)
        first_available.append(_parse_subrequest(sub, sub_path, sub_name, allow_admin=False))
    if len(first_available) > MAX_SUBREQUESTS:
        raise ObjectError(child_path(path, "firstAvailable"), f"must have at most {MAX_SUBREQUESTS} entries")
    exactly_raw = get_map(raw, "exactly", path)
    if exactly_raw:
        exactly = _parse_subrequest(exactly_raw, child_path(path, "exactly"), name, allow_admin=True)
    elif not first_available and "deviceClassName" in raw:  # v1beta1: the fields sit on the request itself
        exactly = _parse_subrequest(raw, path, name, allow_admin=True)
    else:
        exactly = None
    if (exactly is None) == (not first_available):
        raise ObjectError(path, "exactly one of exactly and firstAvailable is required")
    return DeviceRequest(name, exactly, tuple(first_available))


def parse_claim_spec(spec: Mapping[str, Any], path: str) -> ClaimSpec:
    devices = get_map(spec, "devices", path)
    devices_path = child_path(path, "devices")
    requests = tuple(_parse_request(raw, req_path) for req_path, raw in map_items(devices, "requests", devices_path))
    names = [request.name for request in requests]
    if len(set(names)) != len(names):
        raise ObjectError(child_path(devices_path, "requests"), "request names must be unique")
    constraints = []
    for con_path, raw in map_items(devices, "constraints", devices_path):
        constraint = DeviceConstraint(
            requests=get_str_list(raw, "requests", con_path),
            match_attribute=get_str(raw, "matchAttribute", con_path),
            distinct_attribute=get_str(raw, "distinctAttribute", con_path),
        )
        # Neither set (a constraint type this client does not know) is kept for the allocator to report, as
        # upstream's "empty constraint (unsupported constraint type?)"; with both, matchAttribute wins, as in
        # upstream's switch.
        for request_name in constraint.requests:
            if request_name.split("/", 1)[0] not in names:
                raise ObjectError(child_path(con_path, "requests"), f"unknown request {request_name!r}")
        constraints.append(constraint)
    return ClaimSpec(requests, tuple(constraints))


def _parse_allocation(status: Mapping[str, Any]) -> Allocation | None:
    raw = get_map(status, "allocation", "status")
    if not raw:
        return None
    devices = get_map(raw, "devices", "status.allocation")
    results = tuple(
        AllocatedDevice(
            request=get_str(item, "request", path, required=True),
            driver=get_str(item, "driver", path, required=True),
            pool=get_str(item, "pool", path, required=True),
            device=get_str(item, "device", path, required=True),
            admin_access=get_bool(item, "adminAccess", path),
            share_id=get_str(item, "shareID", path),
            consumed_capacity=tuple(
                sorted(
                    (name, _parse_quantity_field(value, child_path(child_path(path, "consumedCapacity"), name)))
                    for name, value in get_map(item, "consumedCapacity", path).items()
                )
            ),
        )
        for path, item in map_items(devices, "results", "status.allocation.devices")
    )
    selector_raw = get_map(raw, "nodeSelector", "status.allocation")
    selector = parse_node_selector(selector_raw, "status.allocation.nodeSelector") if selector_raw else None
    return Allocation(results, selector)


def parse_resource_claim(obj: Mapping[str, Any]) -> ResourceClaim:
    meta = parse_metadata(obj, namespaced=True)
    status = get_map(obj, "status", "")
    reserved = tuple(
        ConsumerRef(get_str(ref, "resource", path), get_str(ref, "name", path), get_str(ref, "uid", path))
        for path, ref in map_items(status, "reservedFor", "status")
    )
    return ResourceClaim(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        spec=parse_claim_spec(get_map(obj, "spec", "", required=True), "spec"),
        allocation=_parse_allocation(status),
        reserved_for=reserved,
        owner_uids=meta.owner_uids,
        annotations=meta.annotations,
        resource_version=meta.resource_version,
    )


def parse_resource_claim_template(obj: Mapping[str, Any]) -> ResourceClaimTemplate:
    meta = parse_metadata(obj, namespaced=True)
    spec = get_map(obj, "spec", "", required=True)
    return ResourceClaimTemplate(
        namespace=meta.namespace,
        name=meta.name,
        spec=parse_claim_spec(get_map(spec, "spec", "spec", required=True), "spec.spec"),
    )
