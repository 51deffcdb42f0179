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
}
"""The extender's documented feature set: upstream picks its `stable` allocator (pools in map order,
permutation search). distinctAttribute does not exist there (the API server drops the field with
DRAConsumableCapacity off), so cases with it are not run under this profile."""

KUBERNETES_DEFAULT_FEATURES: dict[str, bool] = {
    **PROJECT_FEATURES,
    "consumableCapacity": True,
    "deviceBindingAndStatus": True,
}
"""Kubernetes 1.37's default gates: upstream picks its `incubating` allocator, which sorts pools and slices
by name and searches combinations, the same order as ours, so its first solution must equal ours exactly.
distinctAttribute is supported. No generated device allows multiple allocations and no request asks for
capacity, so consumable capacity changes nothing else."""

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
    if not c.chance(0.15):
        return []
    taint: dict[str, Any] = {"key": c.pick(TAINT_KEYS), "effect": c.pick(TAINT_EFFECTS)}
    if c.chance(0.5):
        taint["value"] = "true"
    return [taint]


def _gpu_device(c: Chooser, name: str, index: int, counter_sets: Sequence[str]) -> dict[str, Any]:
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
    count = c.pick((1, 2, 3, 4, 4, 5, 6, 0)) if max_devices > 2 else c.integer(0, max_devices)
    devices = [
        _gpu_device(c, f"{short}-{i}", i, counter_sets) if driver == GPU else _nic_device(c, f"{short}-{i}")
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
    roll = c.integer(0, 199)
    if roll < 130:
        return "gpu.example.com"
    if roll < 146:
        return "nic.example.com"
    if roll < 162:
        return "big-gpu"
    if roll < 176:
        return "numa0"
    if roll < 188:
        return "any"
    if roll < 198:
        return "fragile"
    return MISSING_CLASS


def _selectors(c: Chooser, class_name: str) -> list[dict[str, Any]]:
    if not c.chance(0.3):
        return []
    pool = NIC_SELECTORS if class_name == "nic.example.com" else REQUEST_SELECTORS
    chosen = [c.pick(pool)]
    if c.chance(0.2):
        chosen.append(c.pick(pool))
    return [{"cel": {"expression": expression}} for expression in chosen]


def _device_choice(c: Chooser, *, allow_admin: bool) -> dict[str, Any]:
    """The body of `exactly` or of one firstAvailable entry."""
    class_name = _class_name(c)
    body: dict[str, Any] = {"deviceClassName": class_name}
    if c.chance(0.1):
        body["allocationMode"] = "All"
    else:
        count = c.pick((1, 1, 1, 2, 2, 3, 4))
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
    return body


def _claim_spec(c: Chooser) -> dict[str, Any]:
    requests: list[dict[str, Any]] = []
    constraint_targets: list[str] = []
    for r in range(c.pick((1, 1, 1, 2, 2, 3))):
        name = f"r{r}"
        constraint_targets.append(name)
        if c.chance(0.25):
            subs = []
            for s in range(c.integer(2, 3)):
                subs.append({"name": f"s{s}", **_device_choice(c, allow_admin=False)})
                constraint_targets.append(f"{name}/s{s}")
            requests.append({"name": name, "firstAvailable": subs})
        else:
            requests.append({"name": name, "exactly": _device_choice(c, allow_admin=True)})
    devices: dict[str, Any] = {"requests": requests}
    if c.chance(0.3):
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
    """One cluster (1-4 nodes, 0-8 devices per node) and one pod with 1-3 claims; see the module docstring."""
    node_names = [f"n{i + 1}" for i in range(c.integer(1, 4))]
    racks = {node: c.pick(("a", "b")) for node in node_names}
    nodes = [_node(node, racks[node]) for node in node_names]
    by_node = [{"nodeName": node} for node in node_names]

    slices: list[dict[str, Any]] = []
    for node, placement in zip(node_names, by_node, strict=True):
        others = [p for p in by_node if p is not placement]
        slices += _pool(c, GPU, node, placement, 6, others, partitionable=c.chance(0.15))
        if c.chance(0.3):
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
    for i in range(c.pick((0, 0, 1, 1, 2, 3))):
        if not known_devices:
            break
        taken = [c.pick(known_devices) for _ in range(c.integer(1, 3))]
        admin = [c.chance(0.1) for _ in taken]
        status = {
            "allocation": _allocation(taken, None, admin),
            "reservedFor": [{"resource": "pods", "name": f"holder-{i}", "uid": f"uid-holder-{i}"}],
        }
        allocated_claims.append(_claim(OTHER_NAMESPACE, f"held-{i}", _simple_spec(len(taken)), status))

    claims: list[dict[str, Any]] = []
    pod_claims: list[dict[str, Any]] = []
    for i in range(c.pick((1, 1, 1, 2, 2, 3))):
        claim_name = f"c{i}"
        template = c.chance(0.4)
        claims.append(_claim(POD_NAMESPACE, f"pod-{claim_name}" if template else claim_name, _claim_spec(c)))
        pod_claims.append({"name": claim_name, "claim": claims[-1]["metadata"]["name"], "template": template})
    if known_devices and c.chance(0.2):
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
