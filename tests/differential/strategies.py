"""Random small DRA clusters and pods for differential testing against the upstream allocator.

One generator, two sources of randomness: `generate_case(chooser)` asks a `Chooser` for every decision, and the
chooser is either a seeded `random.Random` (the bulk run: thousands of cases, deterministic, cheap) or Hypothesis'
`draw` (`diff_cases()`: fewer cases, but a failing one shrinks to a minimal cluster). Every option list starts with
its simplest entry and every `chance` is False when shrunk, so Hypothesis shrinks towards one node, one GPU, one
claim asking for one device.

A case is plain JSON (it is also the fixture format):

    {"name": ..., "scenario": {nodes, resourceSlices, deviceClasses, allocatedClaims, claims, nodeNames},
     "pod": {"namespace": ..., "claims": [{"name": pod-claim-name, "claim": claim name, "template": bool}]}}

`scenario` is the oracle's input without `features` (the test adds the feature profile); `pod` says how the pod
references `scenario.claims`: by resourceClaimName, or (template=True, only for unallocated claims) through a
ResourceClaimTemplate with the same spec, which our side resolves itself and upstream sees as the generated claim.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")

GPU = "gpu.example.com"
NIC = "nic.example.com"
POD_NAMESPACE = "ns"
OTHER_NAMESPACE = "other"

# --- feature coverage tables ------------------------------------------------------------------------------------

MODELS = ("A100", "H100", "a100-sxm", "LATEST-GPU-MODEL")
VERSIONS = ("1.0.0", "1.2.3", "2.0.0", "0.9.1")
MEMORIES = ("40Gi", "80Gi", "24Gi")
NIC_SPEEDS = (100, 25, 200)
TAINT_KEYS = ("maintenance", "degraded")
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")

# DeviceClasses: every case carries all of them; "ghost" is referenced sometimes but never exists.
CLASSES: dict[str, tuple[str, ...]] = {
    "gpu.example.com": (f"device.driver == '{GPU}'",),
    "nic.example.com": (f"device.driver == '{NIC}'",),
    # capacity quantity compareTo; a GPU without `memory` makes it a CEL runtime error
    "big-gpu": (f"device.driver == '{GPU}'", f"device.capacity['{GPU}'].memory.compareTo(quantity('40Gi')) >= 0"),
    "any": (),  # no selectors: every device
    # optional field access: never an error
    "numa0": (f"device.driver == '{GPU}' && device.attributes['{GPU}'].?numa.orValue(-1) == 0",),
    # missing attribute (or a NIC: unknown domain) is `no such key`: a runtime error upstream must also report
    "fragile": (f"device.attributes['{GPU}'].numa == 0",),
}
MISSING_CLASS = "ghost"

# Request selectors. Safe ones first (they are what shrinking lands on); the last ones can raise on devices
# missing the attribute or capacity.
REQUEST_SELECTORS = (
    f"device.attributes['{GPU}'].model == 'H100'",
    f"device.attributes['{GPU}'].?model.orValue('').startsWith('A')",
    f"device.attributes['{GPU}'].?model.orValue('').lowerAscii().matches('^.*a100.*$')",
    f"'numa' in device.attributes['{GPU}'] && device.attributes['{GPU}'].numa == 1",
    "device.driver.startsWith('gpu')",
    f"device.attributes['{GPU}'].?driverVersion.orValue(semver('0.0.0')).isGreaterThan(semver('1.0.0'))",
    f"device.capacity['{GPU}'].memory.compareTo(quantity('40Gi')) >= 0",
    f"device.capacity['{GPU}'].memory.isGreaterThan(quantity('30Gi'))",
    f"device.attributes['{GPU}'].driverVersion.isGreaterThan(semver('1.0.0'))",
    f"device.attributes['{GPU}'].driverVersion.compareTo(semver('2.0.0')) < 0",
    f"device.attributes['{GPU}'].model.lowerAscii().startsWith('a')",
    f"device.attributes['{GPU}'].numa == 1",
    f"device.attributes['{GPU}'].index % 2 == 0",
    f"device.attributes['{NIC}'].speed >= 100",
)
NIC_SELECTORS = (f"device.attributes['{NIC}'].speed >= 100", f"device.attributes['{NIC}'].?numa.orValue(0) == 0")

CONSTRAINT_ATTRIBUTES = (
    f"{GPU}/numa",
    f"{GPU}/model",
    f"{GPU}/driverVersion",
    f"{GPU}/index",
    f"{GPU}/rail",
    f"{NIC}/numa",
)

PROJECT_FEATURES: dict[str, bool] = {
    "adminAccess": True,
    "prioritizedList": True,
    "partitionableDevices": True,
    "deviceTaints": True,
    "consumableCapacity": False,
    "deviceBindingAndStatus": False,
    "fractionalCapacityRange": False,
}
"""DRAConsumableCapacity and DRADeviceBindingConditions off (a cluster that turned them off, or 1.35):
upstream picks its `stable` allocator (pools in map order, permutation search), and our side runs with the
same gates off (`our_features`). distinctAttribute does not exist there (the API server drops the field with
DRAConsumableCapacity off), so cases with it are not run under this profile. Capacity requests,
allowMultipleAllocations and binding conditions are in the objects all the same, as in a stored object: the
stable allocator ignores the device fields and refuses a device with bindingConditions as we do."""

KUBERNETES_DEFAULT_FEATURES: dict[str, bool] = {
    **PROJECT_FEATURES,
    "consumableCapacity": True,
    "deviceBindingAndStatus": True,
    "fractionalCapacityRange": True,
}
"""Kubernetes 1.37's default gates (DRAFractionalCapacityRange on, as at compatibility version 1.37):
upstream picks its `incubating` allocator, which sorts pools and slices by name and searches combinations,
the same order as ours, so its first solution must equal ours exactly, the capacity each share consumes
included. distinctAttribute is supported."""

# Oracle feature name -> our Features field (extender/decisions/devices/features.py GATES): each profile runs our
# allocator with the gates upstream's allocator gets, not with the 1.37 defaults for both.
OUR_FEATURE_FIELDS: dict[str, str] = {
    "adminAccess": "admin_access",
    "prioritizedList": "prioritized_list",
    "partitionableDevices": "partitionable_devices",
    "deviceTaints": "device_taints",
    "consumableCapacity": "consumable_capacity",
    "deviceBindingAndStatus": "device_binding_conditions",
    "fractionalCapacityRange": "fractional_capacity_range",
}

PROFILES: dict[str, dict[str, bool]] = {"incubating": KUBERNETES_DEFAULT_FEATURES, "stable": PROJECT_FEATURES}


# --- randomness ---------------------------------------------------------------------------------------------------


class Chooser(Protocol):
    """Every random decision of the generator goes through one of these three calls."""

    def integer(self, low: int, high: int) -> int: ...

    def chance(self, probability: float) -> bool: ...

    def pick(self, options: Sequence[T]) -> T: ...


class RandomChooser:
    """Seeded bulk generation: fast and reproducible from (seed, index)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def chance(self, probability: float) -> bool:
        return self.rng.random() < probability

    def pick(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]


class HypothesisChooser:
    """Hypothesis draws: shrinking moves integers down, chances to False and picks to the first option."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self.draw = draw

    def integer(self, low: int, high: int) -> int:
        return int(self.draw(st.integers(low, high)))

    def chance(self, probability: float) -> bool:
        # 0 (the shrink target) is False; the top `probability` share of the range is True.
        return bool(self.draw(st.integers(0, 999)) >= 1000 - round(probability * 1000))

    def pick(self, options: Sequence[T]) -> T:
        return options[int(self.draw(st.integers(0, len(options) - 1)))]


def _subset(c: Chooser, options: Sequence[T], most: int) -> list[T]:
    """Up to `most` distinct options, in their original order."""
    chosen = {c.integer(0, len(options) - 1) for _ in range(c.integer(0, most))}
    return [options[i] for i in sorted(chosen)]


# --- devices and slices -----------------------------------------------------------------------------------------


def _taints(c: Chooser) -> list[dict[str, Any]]:
    if not c.chance(0.12):
        return []
    taint: dict[str, Any] = {"key": c.pick(TAINT_KEYS), "effect": c.pick(TAINT_EFFECTS)}
    if c.chance(0.5):
        taint["value"] = "true"
    return [taint]


# requestPolicy of a shared GPU's memory (capacity 24Gi, 40Gi or 80Gi): every one passes API validation for
# each of those values (default valid, validValues sorted and within the capacity, validRange min+step within
# it, max and default on a step from min).
MEMORY_POLICIES: tuple[dict[str, Any] | None, ...] = (
    None,
    {"default": "8Gi"},
    {"default": "8Gi", "validValues": ["8Gi", "12Gi", "24Gi"]},
    {"default": "8Gi", "validRange": {"min": "8Gi", "step": "8Gi"}},
    {"default": "8Gi", "validRange": {"min": "4Gi", "max": "24Gi", "step": "4Gi"}},
    {"default": "4Gi", "validRange": {"min": "4Gi"}},
)
# requestPolicy of a shared GPU's `compute` (value 100): without a policy a share that does not ask for compute
# consumes all of it; the fractional range uses milli-units (DRAFractionalCapacityRange).
COMPUTE_POLICIES: tuple[dict[str, Any] | None, ...] = (
    {"default": "10"},
    None,
    {"default": "0.5", "validRange": {"min": "0.5", "max": "10", "step": "0.5"}},
    {"default": "25", "validValues": ["25", "50", "100"]},
)
MEMORY_REQUESTS = ("4Gi", "8Gi", "10Gi", "16Gi", "20Gi", "30Gi", "50Gi")
COMPUTE_REQUESTS = ("0.7", "10", "30", "60")
BINDING_CONDITIONS = ("attached", "fabric-ready")
BINDING_FAILURE_CONDITIONS = ("attach-failed",)


def _share_id(c: Chooser) -> str:
    """A shareID as the API server requires it (an RFC 4122 UUID in normalized form)."""
    return f"{c.integer(0, 0xFFFFFFFF):08x}-0000-4000-8000-{c.integer(0, 0xFFFFFFFFFFFF):012x}"


def _consumable(c: Chooser, device: dict[str, Any]) -> None:
    """Make a GPU allow multiple allocations, maybe with requestPolicies (DRAConsumableCapacity)."""
    device["allowMultipleAllocations"] = True
    capacity = device.get("capacity")
    if capacity is None:
        return
    memory_policy = c.pick(MEMORY_POLICIES)
    if memory_policy is not None:
        capacity["memory"]["requestPolicy"] = memory_policy
    compute_policy = c.pick(COMPUTE_POLICIES)
    if compute_policy is not None:
        capacity["compute"]["requestPolicy"] = compute_policy


def _binding(c: Chooser, device: dict[str, Any]) -> None:
    """Binding conditions (DRADeviceBindingConditions): the scheduler waits in PreBind for them."""
    device["bindingConditions"] = [c.pick(BINDING_CONDITIONS)]
    if c.chance(0.7):
        device["bindingFailureConditions"] = list(BINDING_FAILURE_CONDITIONS)
    if c.chance(0.4):
        device["bindsToNode"] = True


def _gpu_device(
    c: Chooser, name: str, index: int, counter_sets: Sequence[str], profile: frozenset[str] = frozenset()
) -> dict[str, Any]:
    attributes: dict[str, Any] = {"index": {"int": index}}
    if c.chance(0.95):
        attributes["model"] = {"string": c.pick(MODELS)}
    if c.chance(0.9):
        attributes["driverVersion"] = {"version": c.pick(VERSIONS)}
    if c.chance(0.85):
        attributes["numa"] = {"int": c.integer(0, 1)}
    if c.chance(0.3):
        attributes["rail"] = {"string": c.pick(("x", "y"))}
    if c.chance(0.1):  # same name, other type: matchAttribute must compare types too
        attributes["rail"] = {"int": c.integer(0, 1)}
    device: dict[str, Any] = {"name": name, "attributes": attributes}
    if c.chance(0.95):
        device["capacity"] = {"memory": {"value": c.pick(MEMORIES)}, "compute": {"value": "100"}}
    taints = _taints(c)
    if taints:
        device["taints"] = taints
    if "consumable" in profile and c.chance(0.6):
        _consumable(c, device)
    if "binding" in profile and c.chance(0.35):
        _binding(c, device)
    if counter_sets:
        counter_set = c.pick(counter_sets)
        device["consumesCounters"] = [
            {
                "counterSet": counter_set,
                "counters": {"memory": {"value": c.pick(("40Gi", "20Gi", "80Gi"))}, "slots": {"value": "1"}},
            }
        ]
    return device


def _nic_device(c: Chooser, name: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {"speed": {"int": c.pick(NIC_SPEEDS)}}
    if c.chance(0.7):
        attributes["numa"] = {"int": c.integer(0, 1)}
    device: dict[str, Any] = {"name": name, "attributes": attributes}
    taints = _taints(c)
    if taints:
        device["taints"] = taints
    return device


def _slice(
    name: str,
    driver: str,
    pool: str,
    generation: int,
    count: int,
    placement: dict[str, Any],
    devices: list[dict[str, Any]] | None = None,
    shared_counters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        **placement,
    }
    if shared_counters is not None:
        spec["sharedCounters"] = shared_counters
    else:
        spec["devices"] = devices or []
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def _pool(
    c: Chooser,
    driver: str,
    pool: str,
    placement: dict[str, Any],
    max_devices: int,
    other_placements: Sequence[dict[str, Any]],
    *,
    partitionable: bool,
    profile: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """The slices of one pool: current generation (1-2 device slices, maybe a counters slice), maybe an older
    generation, maybe fewer slices than resourceSliceCount, maybe a duplicate device name."""
    short = "gpu" if driver == GPU else "nic"
    counter_sets: list[str] = []
    counters_slice: list[dict[str, Any]] = []
    if partitionable:
        counter_sets = [f"{pool}-cs{i}" for i in range(c.integer(1, 2))]
        counters_slice = [
            {"name": name, "counters": {"memory": {"value": "80Gi"}, "slots": {"value": c.pick(("2", "4"))}}}
            for name in counter_sets
        ]
    if max_devices > 2:
        count = 0 if c.chance(0.03) else c.pick((4, 2, 3, 4, 5, 6, 6, 8, 8, 1))
    else:
        count = c.pick((1, 2, 2, 0))
    devices = [
        _gpu_device(c, f"{short}-{i}", i, counter_sets, profile) if driver == GPU else _nic_device(c, f"{short}-{i}")
        for i in range(count)
    ]
    if count >= 2 and c.chance(0.02):
        devices[-1]["name"] = devices[0]["name"]  # duplicate device name: an invalid pool
    split = c.integer(1, count - 1) if count >= 2 and c.chance(0.25) else count
    parts = [devices[:split], devices[split:]] if split < count else [devices]
    generation = c.integer(1, 2)
    slice_count = len(parts) + len(counters_slice and [1])
    if c.chance(0.04):
        slice_count += 1  # a slice of this generation has not arrived: the pool is incomplete
    slices = [
        _slice(f"{pool}-{short}-{i}", driver, pool, generation, slice_count, placement, part)
        for i, part in enumerate(parts)
    ]
    if counters_slice:
        slices.append(
            _slice(f"{pool}-{short}-counters", driver, pool, generation, slice_count, placement, None, counters_slice)
        )
    if generation > 1 and c.chance(0.4):
        # A stale slice of the previous generation, usually where the pool is now, sometimes elsewhere.
        old_placement = placement if not other_placements or not c.chance(0.3) else c.pick(other_placements)
        old_devices = [
            _gpu_device(c, f"{short}-{i}", i, []) if driver == GPU else _nic_device(c, f"{short}-{i}")
            for i in range(c.integer(1, 3))
        ]
        slices.append(
            _slice(f"{pool}-{short}-old", driver, pool, generation - 1, c.integer(1, 2), old_placement, old_devices)
        )
    return slices


def _node(name: str, rack: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "rack": rack}},
    }


# --- claims --------------------------------------------------------------------------------------------------------


def _tolerations(c: Chooser) -> list[dict[str, Any]]:
    if not c.chance(0.25):
        return []
    key = c.pick(("", *TAINT_KEYS))
    operator = "Exists" if not key else c.pick(("Exists", "Equal", ""))
    toleration: dict[str, Any] = {}
    if key:
        toleration["key"] = key
    if operator:
        toleration["operator"] = operator
    if operator != "Exists":
        toleration["value"] = c.pick(("true", ""))
    effect = c.pick(("", "NoSchedule", "NoExecute"))
    if effect:
        toleration["effect"] = effect
    return [toleration]


def _class_name(c: Chooser) -> str:
    roll = c.integer(0, 399)
    if roll < 290:
        return "gpu.example.com"
    if roll < 320:
        return "nic.example.com"
    if roll < 346:
        return "big-gpu"
    if roll < 368:
        return "numa0"
    if roll < 390:
        return "any"
    if roll < 398:
        return "fragile"
    return MISSING_CLASS


def _selectors(c: Chooser, class_name: str) -> list[dict[str, Any]]:
    if not c.chance(0.2):
        return []
    pool = NIC_SELECTORS if class_name == "nic.example.com" else REQUEST_SELECTORS
    chosen = [c.pick(pool)]
    if c.chance(0.2):
        chosen.append(c.pick(pool))
    return [{"cel": {"expression": expression}} for expression in chosen]


def _device_choice(c: Chooser, *, allow_admin: bool, profile: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The body of `exactly` or of one firstAvailable entry."""
    class_name = _class_name(c)
    body: dict[str, Any] = {"deviceClassName": class_name}
    if c.chance(0.08):
        body["allocationMode"] = "All"
    else:
        count = c.pick((1, 1, 1, 1, 1, 2, 2, 3, 4))
        if count != 1 or c.chance(0.5):
            body["count"] = count
        if c.chance(0.5):
            body["allocationMode"] = "ExactCount"
    selectors = _selectors(c, class_name)
    if selectors:
        body["selectors"] = selectors
    tolerations = _tolerations(c)
    if tolerations:
        body["tolerations"] = tolerations
    if allow_admin and c.chance(0.08):
        body["adminAccess"] = True
    if "consumable" in profile and c.chance(0.45):
        # capacity.requests: a share of a multi-allocatable device, rounded by its requestPolicy
        requests = {"memory": c.pick(MEMORY_REQUESTS)}
        if c.chance(0.3):
            requests["compute"] = c.pick(COMPUTE_REQUESTS)
        if c.chance(0.1):
            requests = {"compute": c.pick(COMPUTE_REQUESTS)}
        body["capacity"] = {"requests": requests}
    return body


def _claim_spec(c: Chooser, profile: frozenset[str] = frozenset()) -> dict[str, Any]:
    requests: list[dict[str, Any]] = []
    constraint_targets: list[str] = []
    for r in range(c.pick((1, 1, 1, 1, 1, 2, 2, 3))):
        name = f"r{r}"
        constraint_targets.append(name)
        if c.chance(0.25):
            subs = []
            for s in range(c.integer(2, 3)):
                subs.append({"name": f"s{s}", **_device_choice(c, allow_admin=False, profile=profile)})
                constraint_targets.append(f"{name}/s{s}")
            requests.append({"name": name, "firstAvailable": subs})
        else:
            requests.append({"name": name, "exactly": _device_choice(c, allow_admin=True, profile=profile)})
    devices: dict[str, Any] = {"requests": requests}
    if c.chance(0.2):
        constraints = []
        for _ in range(c.integer(1, 2)):
            constraint: dict[str, Any] = {}
            if c.chance(0.5):
                constraint["requests"] = _subset(c, constraint_targets, 3) or [constraint_targets[0]]
            attribute = c.pick(CONSTRAINT_ATTRIBUTES)
            constraint["distinctAttribute" if c.chance(0.35) else "matchAttribute"] = attribute
            constraints.append(constraint)
        devices["constraints"] = constraints
    return {"devices": devices}


def _claim(namespace: str, name: str, spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
        "spec": spec,
    }
    if status:
        obj["status"] = status
    return obj


def _allocation(
    results: list[tuple[str, str, str]], node_selector: dict[str, Any] | None, admin: Sequence[bool] = ()
) -> dict[str, Any]:
    allocation: dict[str, Any] = {
        "devices": {
            "results": [
                {
                    "request": "r0",
                    "driver": driver,
                    "pool": pool,
                    "device": device,
                    **({"adminAccess": True} if i < len(admin) and admin[i] else {}),
                }
                for i, (driver, pool, device) in enumerate(results)
            ]
        }
    }
    if node_selector is not None:
        allocation["nodeSelector"] = node_selector
    return allocation


def _simple_spec(count: int) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "r0", "exactly": {"deviceClassName": "any", "count": max(1, count)}}]}}


# --- the case --------------------------------------------------------------------------------------------------------


def generate_case(c: Chooser, name: str = "") -> dict[str, Any]:
    """One cluster (1-4 nodes, 0-10 devices per node) and one pod with 1-3 claims; see the module docstring."""
    node_names = [f"n{i + 1}" for i in range(c.integer(1, 4))]
    racks = {node: c.pick(("a", "b")) for node in node_names}
    nodes = [_node(node, racks[node]) for node in node_names]
    by_node = [{"nodeName": node} for node in node_names]
    # Two optional profiles: shared GPUs by capacity (DRAConsumableCapacity) and binding conditions.
    profile = frozenset(name for name, chance in (("consumable", 0.3), ("binding", 0.15)) if c.chance(chance))

    slices: list[dict[str, Any]] = []
    for node, placement in zip(node_names, by_node, strict=True):
        others = [p for p in by_node if p is not placement]
        slices += _pool(c, GPU, node, placement, 8, others, partitionable=c.chance(0.15), profile=profile)
        if c.chance(0.4):
            slices += _pool(c, NIC, node, placement, 2, others, partitionable=False)
    if c.chance(0.25):  # a pool reaching the nodes of one rack through a slice node selector
        rack = c.pick(("a", "b"))
        selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": [rack]}]}]}
        slices += _pool(c, GPU, f"rack-{rack}", {"nodeSelector": selector}, 2, [], partitionable=False)
    if c.chance(0.2):  # a pool every node sees
        slices += _pool(c, c.pick((NIC, GPU)), "fabric", {"allNodes": True}, 2, [], partitionable=False)

    known_devices = sorted(
        {
            (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
            for s in slices
            for d in s["spec"].get("devices", [])
        }
    )
    shareable = {
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
        for s in slices
        for d in s["spec"].get("devices", [])
        if d.get("allowMultipleAllocations")
    }
    classes = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": class_name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
        }
        for class_name, expressions in CLASSES.items()
    ]

    allocated_claims = []
    for i in range(c.pick((0, 0, 0, 1, 1, 2, 3))):
        if not known_devices:
            break
        taken = [c.pick(known_devices) for _ in range(c.integer(1, 3))]
        admin = [c.chance(0.1) for _ in taken]
        status = {
            "allocation": _allocation(taken, None, admin),
            "reservedFor": [{"resource": "pods", "name": f"holder-{i}", "uid": f"uid-holder-{i}"}],
        }
        for result in status["allocation"]["devices"]["results"]:
            if (result["driver"], result["pool"], result["device"]) in shareable and c.chance(0.75):
                # a share (shareID) and what it consumes; without a shareID the device is held whole
                result["shareID"] = _share_id(c)
                consumed = {"memory": c.pick(("8Gi", "12Gi", "16Gi", "24Gi"))}
                if c.chance(0.5):
                    consumed["compute"] = c.pick(("10", "25", "0.5"))
                result["consumedCapacity"] = consumed
        allocated_claims.append(_claim(OTHER_NAMESPACE, f"held-{i}", _simple_spec(len(taken)), status))

    claims: list[dict[str, Any]] = []
    pod_claims: list[dict[str, Any]] = []
    for i in range(c.pick((1, 1, 1, 1, 1, 2, 2, 3))):
        claim_name = f"c{i}"
        template = c.chance(0.4)
        claims.append(_claim(POD_NAMESPACE, f"pod-{claim_name}" if template else claim_name, _claim_spec(c, profile)))
        pod_claims.append({"name": claim_name, "claim": claims[-1]["metadata"]["name"], "template": template})
    if known_devices and c.chance(0.12):
        # An already allocated claim of the pod (shared with another pod half of the time): it takes nothing new
        # but pins the pod to the nodes its allocation.nodeSelector reaches.
        node = c.pick(node_names)
        taken = [c.pick(known_devices) for _ in range(c.integer(1, 2))]
        how = c.integer(0, 2)
        if how == 0:
            selector: dict[str, Any] | None = {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            }
        elif how == 1:
            selector = {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "rack", "operator": "In", "values": [racks[node]]}]}
                ]
            }
        else:
            selector = None
        status = {"allocation": _allocation(taken, selector)}
        if c.chance(0.5):
            status["reservedFor"] = [{"resource": "pods", "name": "sharer", "uid": "uid-sharer"}]
        position = c.integer(0, len(claims))
        claims.insert(position, _claim(POD_NAMESPACE, "shared", _simple_spec(len(taken)), status))
        pod_claims.insert(position, {"name": "shared", "claim": "shared", "template": False})

    return {
        "name": name,
        "scenario": {
            "nodes": nodes,
            "resourceSlices": slices,
            "deviceClasses": classes,
            "allocatedClaims": allocated_claims,
            "claims": claims,
            "nodeNames": node_names,
        },
        "pod": {"namespace": POD_NAMESPACE, "claims": pod_claims},
    }


def random_cases(seed: int, count: int) -> list[dict[str, Any]]:
    """`count` cases from one seed; case i can be regenerated alone with `random_case(seed, i)`."""
    return [random_case(seed, index) for index in range(count)]


def random_case(seed: int, index: int) -> dict[str, Any]:
    return generate_case(RandomChooser(random.Random(f"{seed}/{index}")), name=f"seed{seed}-{index}")


@st.composite
def diff_cases(draw: Callable[[st.SearchStrategy[Any]], Any]) -> dict[str, Any]:
    """Hypothesis strategy over the same cases; shrinks towards one node, one device, one simple claim."""
    return generate_case(HypothesisChooser(draw), name="hypothesis")


def stable_reference(case: dict[str, Any]) -> dict[str, Any]:
    """The case as the stable allocator reads it, for the incubating allocator: no capacity requests, no
    allowMultipleAllocations (or requestPolicy), no shareIDs (a share then blocks the whole device), and no
    device with bindingConditions (not selectable with the gate off: never chosen, never part of All, its
    selectors never evaluated). Upstream's two allocators then differ only where the stable one is known to
    differ (see PROFILES), which is how a stable-profile difference is told apart from one of ours."""
    reference = copy.deepcopy(case)
    scenario = reference["scenario"]
    for resource_slice in scenario["resourceSlices"]:
        spec = resource_slice["spec"]
        if "devices" not in spec:
            continue
        spec["devices"] = [device for device in spec["devices"] if not device.get("bindingConditions")]
        for device in spec["devices"]:
            device.pop("allowMultipleAllocations", None)
            device.pop("bindingFailureConditions", None)
            device.pop("bindsToNode", None)
            for capacity in device.get("capacity", {}).values():
                capacity.pop("requestPolicy", None)
    for claim in (*scenario["claims"], *scenario["allocatedClaims"]):
        for request in claim["spec"]["devices"]["requests"]:
            for body in [request["exactly"]] if "exactly" in request else request["firstAvailable"]:
                body.pop("capacity", None)
        allocation = claim.get("status", {}).get("allocation")
        for result in allocation["devices"]["results"] if allocation else ():
            result.pop("shareID", None)
            result.pop("consumedCapacity", None)
    return reference


def uses_distinct_attribute(case: dict[str, Any]) -> bool:
    return any(
        "distinctAttribute" in constraint
        for claim in case["scenario"]["claims"]
        for constraint in claim["spec"]["devices"].get("constraints", [])
    )


def profiles_for(case: dict[str, Any]) -> list[str]:
    """Feature profiles a case is compared under (see PROJECT_FEATURES for why distinctAttribute skips stable)."""
    return ["incubating"] if uses_distinct_attribute(case) else ["incubating", "stable"]


# --- coverage ---------------------------------------------------------------------------------------------------

FEATURES = (
    "ExactCount",
    "All",
    "firstAvailable",
    "class selectors",
    "request selectors",
    "quantity compareTo",
    "semver",
    "string functions",
    "optional access",
    "matchAttribute",
    "distinctAttribute",
    "adminAccess",
    "taint NoSchedule",
    "taint NoExecute",
    "taint None",
    "tolerations",
    "partitionable devices",
    "several claims",
    "allocated pod claim",
    "shared claim",
    "claim from template",
    "other pods' allocations",
    "nodeSelector slices",
    "allNodes slices",
    "older generation",
    "incomplete pool",
    "invalid pool",
    "missing class",
    "several nodes",
    "allowMultipleAllocations",
    "capacity requests",
    "requestPolicy default",
    "requestPolicy validValues",
    "requestPolicy validRange step",
    "fractional validRange",
    "shares held by others",
    "device held whole by another claim",
    "bindingConditions",
    "bindingFailureConditions",
    "bindsToNode",
)


def coverage(case: dict[str, Any]) -> set[str]:
    """Which of FEATURES a case exercises (the test checks the generator still reaches all of them)."""
    scenario = case["scenario"]
    found: set[str] = set()
    bodies: list[dict[str, Any]] = []
    pending = [claim for claim in scenario["claims"] if "status" not in claim]
    for claim in pending:
        for request in claim["spec"]["devices"]["requests"]:
            if "firstAvailable" in request:
                found.add("firstAvailable")
                bodies += request["firstAvailable"]
            else:
                bodies.append(request["exactly"])
        for constraint in claim["spec"]["devices"].get("constraints", []):
            found.add("matchAttribute" if "matchAttribute" in constraint else "distinctAttribute")
    for body in bodies:
        found.add("All" if body.get("allocationMode") == "All" else "ExactCount")
        if body.get("adminAccess"):
            found.add("adminAccess")
        if body.get("tolerations"):
            found.add("tolerations")
        if body["deviceClassName"] == MISSING_CLASS:
            found.add("missing class")
        elif body["deviceClassName"] != "any":
            found.add("class selectors")
        expressions = [selector["cel"]["expression"] for selector in body.get("selectors", [])]
        expressions += list(CLASSES.get(body["deviceClassName"], ()))
        if body.get("selectors"):
            found.add("request selectors")
        if body.get("capacity"):
            found.add("capacity requests")
        text = " ".join(expressions)
        if "quantity(" in text:
            found.add("quantity compareTo")
        if "semver(" in text:
            found.add("semver")
        if any(f in text for f in ("startsWith", "lowerAscii", "matches(")):
            found.add("string functions")
        if ".?" in text:
            found.add("optional access")
    if len(pending) > 1 or len(scenario["claims"]) > 1:
        found.add("several claims")
    for claim in scenario["claims"]:
        if "status" in claim:
            found.add("allocated pod claim")
            if claim["status"].get("reservedFor"):
                found.add("shared claim")
    if any(ref["template"] for ref in case["pod"]["claims"]):
        found.add("claim from template")
    if scenario["allocatedClaims"]:
        found.add("other pods' allocations")
    shareable = {
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
        for s in scenario["resourceSlices"]
        for d in s["spec"].get("devices", [])
        if d.get("allowMultipleAllocations")
    }
    for claim in scenario["allocatedClaims"]:
        for result in claim["status"]["allocation"]["devices"]["results"]:
            if (result["driver"], result["pool"], result["device"]) in shareable:
                found.add("shares held by others" if "shareID" in result else "device held whole by another claim")
    generations: dict[tuple[str, str], set[int]] = {}
    present: dict[tuple[str, str, int], int] = {}
    declared: dict[tuple[str, str, int], int] = {}
    for resource_slice in scenario["resourceSlices"]:
        spec = resource_slice["spec"]
        if "nodeSelector" in spec:
            found.add("nodeSelector slices")
        if spec.get("allNodes"):
            found.add("allNodes slices")
        if "sharedCounters" in spec:
            found.add("partitionable devices")
        names = [device["name"] for device in spec.get("devices", [])]
        if len(set(names)) != len(names):
            found.add("invalid pool")
        for device in spec.get("devices", []):
            for taint in device.get("taints", []):
                found.add(f"taint {taint['effect']}")
            if device.get("allowMultipleAllocations"):
                found.add("allowMultipleAllocations")
            for capacity in device.get("capacity", {}).values():
                policy = capacity.get("requestPolicy") or {}
                if "default" in policy:
                    found.add("requestPolicy default")
                if "validValues" in policy:
                    found.add("requestPolicy validValues")
                if policy.get("validRange", {}).get("step"):
                    found.add("requestPolicy validRange step")
                    if "." in policy["validRange"]["step"]:
                        found.add("fractional validRange")
            for key in ("bindingConditions", "bindingFailureConditions", "bindsToNode"):
                if device.get(key):
                    found.add(key)
        pool = (spec["driver"], spec["pool"]["name"])
        generation = spec["pool"]["generation"]
        generations.setdefault(pool, set()).add(generation)
        present[(*pool, generation)] = present.get((*pool, generation), 0) + 1
        declared[(*pool, generation)] = spec["pool"]["resourceSliceCount"]
    if any(len(g) > 1 for g in generations.values()):
        found.add("older generation")
    if any(present[key] < declared[key] for key in present if key[2] == max(generations[key[:2]])):
        found.add("incomplete pool")
    if len(scenario["nodeNames"]) > 1:
        found.add("several nodes")
    return found
