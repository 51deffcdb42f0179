"""ResourceClaim and ResourceClaimTemplate: device requests, constraints and the allocation result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from extender.state.core import NodeSelector, Toleration, parse_metadata, parse_node_selector
from extender.state.dra.device_class import parse_selectors
from extender.state.dra.devices import TAINT_EFFECTS, DeviceKey, parse_quantity_field
from extender.state.errors import ObjectError
from extender.state.fields import child_path, get_bool, get_int, get_map, get_str, get_str_list, map_items

MAX_DEVICES_PER_ALLOCATION = 32
MAX_SUBREQUESTS = 8
ALLOCATION_MODE_EXACT = "ExactCount"
ALLOCATION_MODE_ALL = "All"


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
class AllocationResult:
    """A claim's status.allocation (k8s.io/api resource/v1 AllocationResult): the devices and where they are."""

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
    allocation: AllocationResult | None
    reserved_for: tuple[ConsumerRef, ...]
    owner_uids: tuple[str, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    # The name of the Pod among its owners (a claim generated for a pod's template entry, or kube-scheduler's claim
    # for its extended resources), "" when a Pod owns none
    owner_pod: str = ""
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


def _parse_capacity_requests(raw: Mapping[str, Any], path: str) -> tuple[tuple[str, Fraction], ...]:
    capacity = get_map(raw, "capacity", path)
    if not capacity:
        return ()
    capacity_path = child_path(path, "capacity")
    requests = get_map(capacity, "requests", capacity_path)
    requests_path = child_path(capacity_path, "requests")
    parsed = [(name, parse_quantity_field(value, child_path(requests_path, name))) for name, value in requests.items()]
    return tuple(sorted(parsed))


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
        selectors=parse_selectors(raw, path),
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


def _parse_allocation(status: Mapping[str, Any]) -> AllocationResult | None:
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
                    (name, parse_quantity_field(value, child_path(child_path(path, "consumedCapacity"), name)))
                    for name, value in get_map(item, "consumedCapacity", path).items()
                )
            ),
        )
        for path, item in map_items(devices, "results", "status.allocation.devices")
    )
    selector_raw = get_map(raw, "nodeSelector", "status.allocation")
    selector = parse_node_selector(selector_raw, "status.allocation.nodeSelector") if selector_raw else None
    return AllocationResult(results, selector)


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
        owner_pod=_owner_pod_name(obj),
        resource_version=meta.resource_version,
    )


def _owner_pod_name(obj: Mapping[str, Any]) -> str:
    for _path, owner in map_items(get_map(obj, "metadata", ""), "ownerReferences", "metadata"):
        if owner.get("kind") == "Pod" and isinstance(owner.get("name"), str):
            return str(owner["name"])
    return ""


def parse_resource_claim_template(obj: Mapping[str, Any]) -> ResourceClaimTemplate:
    meta = parse_metadata(obj, namespaced=True)
    spec = get_map(obj, "spec", "", required=True)
    return ResourceClaimTemplate(
        namespace=meta.namespace,
        name=meta.name,
        spec=parse_claim_spec(get_map(spec, "spec", "spec", required=True), "spec.spec"),
    )
