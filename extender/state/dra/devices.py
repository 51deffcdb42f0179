"""The devices drivers publish: ResourceSlice and its Device entries (k8s.io/api resource/v1 types.go)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any, NamedTuple, cast

import orjson

from extender.state.capacity import CapacityPolicy, CapacityRange, DeviceCapacity, default_request_fits
from extender.state.core import NodeSelector, Taint, parse_metadata, parse_node_selector
from extender.state.errors import ObjectError
from extender.state.fields import child_path, get_bool, get_int, get_map, get_str, get_str_list, map_items, type_name
from extender.state.quantity import QuantityError, parse_quantity

DeviceKey = tuple[str, str, str]
"""(driver, pool, device): how the allocator and claim results name a device."""

# List-valued attributes exist only with DRAListTypeAttributes (alpha, off in 1.37); not modelled.
LIST_ATTRIBUTE_KINDS = ("ints", "bools", "strings", "versions")
# DeviceTaint effects; a claim's tolerations name the same ones (DeviceTaintEffect, resource/v1 types.go).
TAINT_EFFECTS = frozenset({"None", "NoSchedule", "NoExecute"})
BLOCKING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


class Attribute(NamedTuple):
    """A device attribute value with its declared type: matchAttribute compares type and value. A named tuple,
    not a dataclass: a cluster publishes millions of them, and a tuple is made several times faster."""

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


def parse_quantity_field(raw: object, path: str) -> Fraction:
    """A resource.Quantity field (capacities, counters, capacity requests), its parse error named by `path`."""
    try:
        return parse_quantity(raw)
    except QuantityError as error:
        raise ObjectError(path, str(error)) from None


def qualify(name: str, driver: str) -> str:
    """Attribute and capacity names without a domain belong to the driver's domain."""
    return name if "/" in name else f"{driver}/{name}"


def consumed_by_name(consumed: Sequence[tuple[str, Fraction]], driver: str) -> dict[str, Fraction]:
    """A share's consumed capacity (pairs as the result writes them) by qualified capacity name, as
    Device.capacity is keyed."""
    return {qualify(name, driver): amount for name, amount in consumed}


# An attribute's value field -> the Python type a decoded JSON value of it has (DeviceAttribute, resource/v1).
_ATTRIBUTE_TYPES: Mapping[str, type] = {"int": int, "bool": bool, "string": str, "version": str}


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
    expected = _ATTRIBUTE_TYPES[kind]
    if not isinstance(value, expected) or (kind == "int" and isinstance(value, bool)):
        raise ObjectError(child_path(path, kind), f"must be a {kind}, got {type_name(value)}")
    return Attribute(kind, cast("int | bool | str", value))  # checked just above


def _parse_counters(raw: Mapping[str, Any], path: str) -> dict[str, Fraction]:
    counters: dict[str, Fraction] = {}
    for name, counter in get_map(raw, "counters", path).items():
        counter_path = child_path(child_path(path, "counters"), name)
        if not isinstance(counter, Mapping):
            raise ObjectError(counter_path, f"must be an object, got {type_name(counter)}")
        counters[name] = parse_quantity_field(counter.get("value"), child_path(counter_path, "value"))
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
    return None if value is None else parse_quantity_field(value, child_path(path, key))


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
            parse_quantity_field(v, child_path(policy_path, f"validValues[{i}]")) for i, v in enumerate(values)
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


def _parse_attributes(raw: Mapping[str, Any], body_path: str, driver: str) -> dict[str, Attribute]:
    """A device's attributes under their qualified names. The common value (one field of its declared type, as
    a decoded JSON object has it) is read without building its field path; anything else goes through
    `_parse_attribute`, which names the path of what is wrong."""
    attributes: dict[str, Attribute] = {}
    for attr_name, value in raw.items():
        attribute = None
        if type(value) is dict and len(value) == 1:
            ((kind, field_value),) = value.items()
            if type(field_value) is _ATTRIBUTE_TYPES.get(kind):
                attribute = Attribute(kind, cast("int | bool | str", field_value))  # its type, checked above
        if attribute is None:
            attribute = _parse_attribute(value, child_path(child_path(body_path, "attributes"), attr_name))
        attributes[qualify(attr_name, driver)] = attribute
    return attributes


class _ParsedCapacity(NamedTuple):
    capacity: Mapping[str, Fraction]  # qualified names
    consumable: Mapping[str, DeviceCapacity]  # names as written
    default_request_fits: bool


def _parse_capacity(
    raw: Mapping[str, Any], body_path: str, driver: str, slice_name: str, name: str
) -> tuple[_ParsedCapacity, str]:
    """A device's capacity map, and why the device is unusable ("" when it is not). A map that parses cleanly
    comes from `_clean_capacity` (the devices of one model publish the same map: parsed once); any other is
    parsed here, so that its error names the device's own field path and its reason the slice and the device."""
    if not raw:
        return _NO_CAPACITY, ""
    if type(raw) is dict:
        try:
            encoded = orjson.dumps(raw)
        except TypeError:  # not JSON (a YAML file's non-string key or date): the full parse says what is wrong
            encoded = b""
        clean = _clean_capacity(driver, encoded) if encoded else None
        if clean is not None:
            return clean, ""
    return _capacity_of(raw, body_path, driver, slice_name, name)


@lru_cache(maxsize=4096)
def _clean_capacity(driver: str, raw_json: bytes) -> _ParsedCapacity | None:
    """A capacity map (its JSON) parsed, or None when something in it is malformed. A pure parser of a string
    (extender/memo.py's policy): a cluster's few hundred thousand devices share a few parsed values, read-only
    (Device never changes them)."""
    try:
        parsed, unusable_reason = _capacity_of(orjson.loads(raw_json), "", driver, "", "")
    except ObjectError:
        return None
    return None if unusable_reason else parsed


def _capacity_of(
    raw: Mapping[str, Any], body_path: str, driver: str, slice_name: str, name: str
) -> tuple[_ParsedCapacity, str]:
    capacity: dict[str, Fraction] = {}
    consumable: dict[str, DeviceCapacity] = {}
    unusable_reason = ""
    for cap_name, value in raw.items():
        cap_path = child_path(child_path(body_path, "capacity"), cap_name)
        if not isinstance(value, Mapping):
            raise ObjectError(cap_path, f"must be an object, got {type_name(value)}")
        amount = parse_quantity_field(value.get("value"), child_path(cap_path, "value"))
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
    return _ParsedCapacity(capacity, consumable, default_request_fits(consumable)), unusable_reason


_NO_CAPACITY = _ParsedCapacity({}, {}, True)


def _parse_device(raw: Mapping[str, Any], path: str, slice_name: str, driver: str, pool: str) -> Device:
    name = get_str(raw, "name", path, required=True)
    body = raw
    body_path = path
    if "basic" in raw:  # v1beta1 wraps the device's fields in `basic`
        body = get_map(raw, "basic", path)
        body_path = child_path(path, "basic")
    attributes = _parse_attributes(get_map(body, "attributes", body_path), body_path, driver)
    parsed, unusable_reason = _parse_capacity(get_map(body, "capacity", body_path), body_path, driver, slice_name, name)
    consumes = (
        tuple(
            CounterConsumption(get_str(item, "counterSet", item_path, required=True), _parse_counters(item, item_path))
            for item_path, item in map_items(body, "consumesCounters", body_path)
        )
        if "consumesCounters" in body
        else ()
    )
    node_selector_raw = get_map(body, "nodeSelector", body_path)
    return Device(
        key=(driver, pool, name),
        name=name,
        driver=driver,
        pool=pool,
        slice_name=slice_name,
        attributes=attributes,
        capacity=parsed.capacity,
        consumes_counters=consumes,
        taints=_parse_taints(body, body_path) if "taints" in body else (),
        allow_multiple_allocations=get_bool(body, "allowMultipleAllocations", body_path),
        consumable=parsed.consumable,
        default_request_fits=parsed.default_request_fits,
        binding_conditions=get_str_list(body, "bindingConditions", body_path) if "bindingConditions" in body else None,
        binding_failure_conditions=get_str_list(body, "bindingFailureConditions", body_path)
        if "bindingFailureConditions" in body
        else (),
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
    chosen = sum(bool(choice) for choice in (node_name, node_selector_raw, all_nodes, per_device))
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
