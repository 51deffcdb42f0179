"""Run one generated case through our allocator and through the upstream oracle, and compare the verdicts.

A verdict per node is one of three kinds, the distinction the scheduler itself makes:
- "feasible" (with the allocation: per pending claim, the (request, driver, pool, device, adminAccess) results),
- "infeasible" (upstream: no solution, or an ErrFailedAllocationOnNode reason; ours: a NotAllocatable),
- "error" (upstream: Allocate returned another error, which fails the whole pod; ours: a NotAllocatable whose
  category is in ERROR_CATEGORIES, e.g. a CEL runtime error).

Our allocator is also checked on its own: every feasible answer must be a valid allocation (see
`validate_allocation`), whatever upstream says.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from extender.decisions.devices.cel import SelectorError, compile_selector
from extender.decisions.devices.feasibility import device_outcomes
from extender.decisions.devices.features import DEFAULT_FEATURES, Features
from extender.decisions.devices.pod_claims import resolve_pod_claims
from extender.decisions.devices.results import (
    CATEGORY_BUDGET,
    CATEGORY_SELECTOR,
    Allocation,
    AllocationOutcome,
    NotAllocatable,
)
from extender.decisions.devices.selection import DeviceMatcher
from extender.state.capacity import CapacityError, request_fits
from extender.state.core import parse_pod
from extender.state.dra.claims import MAX_DEVICES_PER_ALLOCATION, ClaimSpec
from extender.state.dra.devices import BLOCKING_TAINT_EFFECTS, Device
from extender.state.errors import ObjectError
from extender.state.quantity import parse_quantity
from extender.state.snapshot import ClusterSnapshot
from extender.state.store import ClusterStore
from testkit.builds.oracle import ensure_oracle_binary
from tests.differential.strategies import OUR_FEATURE_FIELDS, PROFILES
from tests.oracle.oracle import run_scenarios

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Ours says "upstream's Allocate would fail here" with NotAllocatable.fatal; a selector error always is one.
ERROR_CATEGORIES = frozenset({CATEGORY_SELECTOR})
# Our search gives up where upstream would go on: no verdict to compare (counted, never expected in small cases).
UNDECIDED_CATEGORIES = frozenset({CATEGORY_BUDGET})

Result = list[Any]  # [request, driver, pool, device, adminAccess]
Verdict = dict[str, Any]  # {"kind": "feasible" | "infeasible" | "error" | "undecided", "allocation": [[Result]]}


# --- our side ------------------------------------------------------------------------------------------------------


@dataclass
class OurRun:
    snapshot: ClusterSnapshot
    pod_claims: Any
    outcomes: dict[str, AllocationOutcome]
    features: Features = DEFAULT_FEATURES


def pod_object(case: Mapping[str, Any]) -> dict[str, Any]:
    pod = case["pod"]
    refs = []
    for ref in pod["claims"]:
        if ref["template"]:
            refs.append({"name": ref["name"], "resourceClaimTemplateName": f"t-{ref['name']}"})
        else:
            refs.append({"name": ref["name"], "resourceClaimName": ref["claim"]})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pod", "namespace": pod["namespace"], "uid": "uid-pod"},
        "spec": {
            "containers": [
                {"name": "ctr", "image": "busybox", "resources": {"claims": [{"name": r["name"]} for r in refs]}}
            ],
            "resourceClaims": refs,
        },
        "status": {},
    }


def build_store(case: Mapping[str, Any], *, drop_malformed: bool = False) -> ClusterStore:
    """The case's objects as the extender would see them: templated claims exist only as their template.

    `drop_malformed`: an object our parser refuses is left out, as the live watch does (ClusterStore.replace
    skips it), instead of raising ObjectError; upstream's own allocator table has such objects on purpose."""
    scenario = case["scenario"]
    store = ClusterStore()

    def apply(kind: str, raw: Mapping[str, Any]) -> None:
        try:
            store.apply(kind, "ADDED", raw)
        except ObjectError:
            if not drop_malformed:
                raise

    for node in scenario["nodes"]:
        apply("Node", node)
    for resource_slice in scenario["resourceSlices"]:
        apply("ResourceSlice", resource_slice)
    for device_class in scenario["deviceClasses"]:
        apply("DeviceClass", device_class)
    for claim in scenario["allocatedClaims"]:
        apply("ResourceClaim", claim)
    templated = {ref["claim"]: ref["name"] for ref in case["pod"]["claims"] if ref["template"]}
    for claim in scenario["claims"]:
        name = claim["metadata"]["name"]
        if name in templated:
            template = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"t-{templated[name]}", "namespace": claim["metadata"]["namespace"]},
                "spec": {"spec": claim["spec"]},
            }
            apply("ResourceClaimTemplate", template)
        else:
            apply("ResourceClaim", claim)
    apply("Pod", pod_object(case))
    return store


def run_ours(case: Mapping[str, Any], *, drop_malformed: bool = False, features: Features = DEFAULT_FEATURES) -> OurRun:
    snapshot = build_store(case, drop_malformed=drop_malformed).snapshot()
    return _run_on(snapshot, case, features)


def _run_on(snapshot: ClusterSnapshot, case: Mapping[str, Any], features: Features) -> OurRun:
    pod = parse_pod(pod_object(case))
    pod_claims = resolve_pod_claims(snapshot, pod)
    matcher = DeviceMatcher()
    node_names = case["scenario"]["nodeNames"]
    outcomes = device_outcomes(snapshot, pod_claims, node_names, matcher, features=features).by_node(node_names)
    return OurRun(snapshot, pod_claims, outcomes, features)


def features_for(oracle_features: Mapping[str, bool]) -> Features:
    """Our gates for an oracle feature set: the same switches upstream's allocator is given. A fixture stored
    before a switch existed leaves it at our default."""
    return replace(DEFAULT_FEATURES, **{OUR_FEATURE_FIELDS[name]: on for name, on in oracle_features.items()})


def our_features(profile: str) -> Features:
    return features_for(PROFILES[profile])


def run_profiles(case: Mapping[str, Any], profiles: Iterable[str]) -> dict[str, OurRun]:
    """Our verdicts under each profile's gates, from one snapshot of the case."""
    snapshot = build_store(case).snapshot()
    return {profile: _run_on(snapshot, case, our_features(profile)) for profile in profiles}


def _share(consumed: Iterable[tuple[str, Fraction]]) -> list[list[str]]:
    """A share's consumed capacity, comparable across both sides: sorted [name, exact amount] pairs."""
    return sorted([name, str(amount)] for name, amount in consumed)


def our_verdict(outcome: AllocationOutcome) -> Verdict:
    """Results are [request, driver, pool, device, adminAccess], and for a share of a device that allows
    multiple allocations also what it consumes (upstream's result has a shareID then)."""
    if isinstance(outcome, Allocation):
        return {
            "kind": "feasible",
            "allocation": [
                [
                    [chosen.request, chosen.device.driver, chosen.device.pool, chosen.device.name, chosen.admin_access]
                    + ([_share(chosen.consumed_capacity)] if chosen.shared else [])
                    for chosen in claim.devices
                ]
                for claim in outcome.claims
            ],
        }
    assert isinstance(outcome, NotAllocatable)
    if outcome.category in UNDECIDED_CATEGORIES:
        kind = "undecided"
    elif outcome.fatal or outcome.category in ERROR_CATEGORIES:
        kind = "error"
    else:
        kind = "infeasible"
    return {"kind": kind, "allocation": [], "category": outcome.category, "why": outcome.summary}


# --- upstream side ---------------------------------------------------------------------------------------------------


def scenario_for(case: Mapping[str, Any], profile: str) -> dict[str, Any]:
    return {"name": case.get("name", ""), "features": dict(PROFILES[profile]), **case["scenario"]}


def upstream_verdict(node_result: Mapping[str, Any]) -> Verdict:
    if node_result.get("error"):
        return {"kind": "error", "allocation": [], "why": node_result["error"]}
    if not node_result.get("feasible"):
        return {"kind": "infeasible", "allocation": [], "why": node_result.get("reason", "")}
    return {
        "kind": "feasible",
        "allocation": [
            [
                [r["request"], r["driver"], r["pool"], r["device"], bool(r.get("adminAccess"))]
                + (
                    [_share((name, parse_quantity(value)) for name, value in r.get("consumedCapacity", {}).items())]
                    if r.get("shared")
                    else []
                )
                for r in claim["results"]
            ]
            for claim in node_result["allocation"]
        ],
    }


def upstream_verdicts(result: Mapping[str, Any]) -> dict[str, Verdict]:
    if result.get("error"):
        raise AssertionError(f"oracle could not evaluate scenario {result.get('name')}: {result['error']}")
    return {node: upstream_verdict(verdict) for node, verdict in result["nodes"].items()}


class OracleStream:
    """One long-lived oracle process in -jsonl mode: a scenario per line, for Hypothesis and the shrinker."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [str(ensure_oracle_binary()), "-jsonl"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def run(self, scenario: Mapping[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(scenario) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"oracle -jsonl exited with {self.proc.wait()}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)

    def __enter__(self) -> OracleStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_batches(scenarios: Sequence[Mapping[str, Any]], batch: int = 500) -> list[dict[str, Any]]:
    """Batch mode, one oracle process per `batch` scenarios (keeps stdin/stdout documents a few MB)."""
    results: list[dict[str, Any]] = []
    for start in range(0, len(scenarios), batch):
        results += run_scenarios(list(scenarios[start : start + batch]))
    return results


# --- comparison ------------------------------------------------------------------------------------------------------


def multi_pool_nodes(snapshot: ClusterSnapshot, node_names: Iterable[str]) -> set[str]:
    """Nodes drawing devices from more than one pool: upstream's stable allocator visits those pools in Go map
    order, so which device it meets first (and so whether it meets a failing selector first) varies per run."""
    return {
        name
        for name in node_names
        if len({(device.driver, device.pool) for device in snapshot.node_devices(name).usable}) > 1
    }


def disagreement(ours: Verdict, upstream: Verdict, *, exact: bool) -> str:
    """'' when the verdicts agree; else what differs. `exact`: feasible verdicts must pick the same devices."""
    if ours["kind"] == "undecided":
        return ""
    if ours["kind"] != upstream["kind"]:
        return f"ours {ours['kind']} ({ours.get('why', '')}), upstream {upstream['kind']} ({upstream.get('why', '')})"
    if exact and ours["kind"] == "feasible" and ours["allocation"] != upstream["allocation"]:
        return f"allocation differs: ours {ours['allocation']}, upstream {upstream['allocation']}"
    return ""


@dataclass(frozen=True)
class Finding:
    """Something wrong with one node's verdict of one case.

    kind: "disagree" (ours differs from upstream), "invalid" (our allocation breaks a rule), or
    "upstream-differs" (stable profile only: ours equals the incubating allocator's verdict, and upstream's two
    allocators differ; reported, not a failure of ours).
    """

    kind: str
    profile: str
    node: str
    ours: str  # our verdict kind, with our NotAllocatable category: "infeasible/pool-not-ready"
    upstream: str
    message: str

    @property
    def signature(self) -> tuple[str, str, str, str]:
        """What a shrunk case must keep showing to be the same problem."""
        return (self.kind, self.profile, self.ours, self.upstream)


Rerun = Callable[[Mapping[str, Any], int], list[dict[str, Any]]]


def stable_reruns(pools: int) -> int:
    """Reruns that see every pool order with high probability: 3 pools have 6 orders, each missed by 40 runs
    with probability (5/6)**40 < 0.1%; 4 pools have 24, missed by 200 runs with (23/24)**200 < 0.02%."""
    return 40 if pools <= 3 else 200


def stable_kinds(case: Mapping[str, Any], run: OurRun, rerun: Rerun) -> dict[str, set]:
    """Every kind upstream's stable allocator gives, over reruns, on each node drawing from several pools."""
    multi = multi_pool_nodes(run.snapshot, case["scenario"]["nodeNames"])
    kinds: dict[str, set[str]] = {node: set() for node in multi}
    if multi:
        pools = max(len({(d.driver, d.pool) for d in run.snapshot.node_devices(node).usable}) for node in multi)
        for result in rerun(scenario_for(case, "stable"), stable_reruns(pools)):
            for node, verdict in upstream_verdicts(result).items():
                if node in multi:
                    kinds[node].add(verdict["kind"])
    return kinds


def compare_case(
    case: Mapping[str, Any],
    runs: Mapping[str, OurRun],
    upstream: Mapping[str, Mapping[str, Verdict]],
    order_kinds: Callable[[], Mapping[str, Iterable[str]]],
    stable_reference: Callable[[], Mapping[str, Verdict]] | None = None,
) -> list[Finding]:
    """All findings of one case. `runs`: profile -> our run with that profile's gates; `upstream`: profile ->
    node -> verdict. `order_kinds()` (called only when needed): per node drawing from several pools, every kind
    the stable allocator gives in some pool order. `stable_reference()` (called only when needed): the
    incubating allocator's verdicts on `strategies.stable_reference(case)`, what a stable-profile verdict of
    ours is compared with to tell an upstream difference from ours (default: the incubating verdicts, which is
    the same for a case without capacity, shares or binding conditions)."""
    findings: list[Finding] = []
    known: Mapping[str, Iterable[str]] | None = None
    reference: Mapping[str, Verdict] | None = None
    for node in case["scenario"]["nodeNames"]:
        for profile, verdicts in upstream.items():
            run = runs[profile]
            outcome = run.outcomes[node]
            ours = our_verdict(outcome)
            label = f"{ours['kind']}/{ours['category']}" if "category" in ours else ours["kind"]
            if isinstance(outcome, Allocation):
                problems = validate_allocation(run, node, outcome)
                if problems:
                    findings.append(Finding("invalid", profile, node, "feasible", "-", "; ".join(problems)))
            theirs = verdicts[node]
            message = disagreement(ours, theirs, exact=profile == "incubating")
            if not message:
                continue
            if profile == "stable":
                if known is None:
                    known = order_kinds()
                if ours["kind"] in set(known.get(node, ())):
                    continue
                if reference is None:
                    reference = stable_reference() if stable_reference is not None else upstream.get("incubating", {})
                # By kind, as the stable profile is compared: pool order is not the stable allocator's to keep.
                incubating = reference.get(node)
                if incubating is not None and not disagreement(ours, incubating, exact=False):
                    findings.append(Finding("upstream-differs", profile, node, label, theirs["kind"], message))
                    continue
            findings.append(Finding("disagree", profile, node, label, theirs["kind"], message))
    return findings


# --- validity of our allocations ------------------------------------------------------------------------------------


def _selectable(device: Device, expressions: Iterable[str]) -> bool:
    for expression in expressions:
        try:
            if not compile_selector(expression).matches(device):
                return False
        except SelectorError:
            return False
    return True


def _serves_statically(device: Device, sub: Any) -> bool:
    """Whether the device could serve the subrequest's capacity request with nothing else on it."""
    try:
        return request_fits(dict(sub.capacity_requests), device.consumable, {}) is not None
    except CapacityError:
        return False


def validate_allocation(run: OurRun, node_name: str, outcome: Allocation) -> list[str]:
    """Independent checks of a feasible answer; returns the problems found (none for a valid allocation)."""
    problems: list[str] = []
    snapshot = run.snapshot
    node_devices = {device.key: device for device in snapshot.node_devices(node_name).usable}
    classes = snapshot.device_classes
    taken_by_pod: dict[tuple[str, str, str], list[tuple[int, bool, bool]]] = {}
    counters: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
    # Shares of multi-allocatable devices (DRAConsumableCapacity on): what other claims' shares hold plus what
    # this pod's shares take must fit each capacity.
    share_use: dict[tuple[str, str, str], dict[str, Fraction]] = {}
    counted_shares: set[tuple[str, str, str]] = set()
    sharing = run.features.consumable_capacity
    pending = run.pod_claims.pending
    if len(outcome.claims) != len(pending):
        return [f"{len(outcome.claims)} claim results for {len(pending)} pending claims"]
    for claim_index, (claim, result) in enumerate(zip(pending, outcome.claims, strict=True)):
        spec: ClaimSpec = claim.spec
        if len(result.devices) > MAX_DEVICES_PER_ALLOCATION:
            problems.append(f"{claim.label}: {len(result.devices)} devices")
        by_request: dict[str, list[Device]] = {}
        chosen_by_request: dict[str, list[Any]] = {}
        for chosen in result.devices:
            by_request.setdefault(chosen.request, []).append(chosen.device)
            chosen_by_request.setdefault(chosen.request, []).append(chosen)
        for request in spec.requests:
            names = [n for n in by_request if n == request.name or n.startswith(request.name + "/")]
            if len(names) != 1:
                problems.append(f"{claim.label} request {request.name}: results under {names}")
                continue
            (name,) = names
            if request.exactly is not None:
                sub = request.exactly
            else:
                sub_name = name.split("/", 1)[1] if "/" in name else ""
                subs = [s for s in request.first_available if s.name == sub_name]
                if not subs:
                    problems.append(f"{claim.label}: unknown subrequest {name}")
                    continue
                sub = subs[0]
            device_class = classes.get(sub.device_class_name)
            if device_class is None:
                problems.append(f"{claim.label} {name}: class {sub.device_class_name} missing")
                continue
            devices = by_request[name]
            if sub.allocation_mode == "ExactCount" and len(devices) != sub.count:
                problems.append(f"{claim.label} {name}: {len(devices)} devices for count {sub.count}")
            if sub.allocation_mode == "All":
                # All: every selectable device; not one with bindingConditions while the gate is off (not
                # selectable then), nor, with consumable capacity, one that could never serve the capacity request
                # (upstream validateDeviceRequest; one whose capacity others use up stays, so All fails).
                everything = [
                    d
                    for d in node_devices.values()
                    if _selectable(d, device_class.selectors)
                    and _selectable(d, sub.selectors)
                    and (
                        run.features.device_binding_conditions
                        or d.binding_conditions is None
                        or not d.binding_conditions
                    )
                    and (not sharing or _serves_statically(d, sub))
                ]
                if {d.key for d in everything} != {d.key for d in devices}:
                    problems.append(f"{claim.label} {name}: All took {len(devices)} of {len(everything)} devices")
            for device, chosen in zip(devices, chosen_by_request[name], strict=True):
                share = chosen if chosen.shared else None
                where = f"{claim.label} {name} device {'/'.join(device.key)}"
                if device.key not in node_devices:
                    problems.append(f"{where}: not reachable from the node")
                if not _selectable(device, device_class.selectors) or not _selectable(device, sub.selectors):
                    problems.append(f"{where}: not selected by the class and request selectors")
                for taint in device.taints:
                    if taint.effect in BLOCKING_TAINT_EFFECTS and not any(t.tolerates(taint) for t in sub.tolerations):
                        problems.append(f"{where}: taint {taint.key}={taint.value}:{taint.effect} not tolerated")
                if share is not None and not (sharing and device.allow_multiple_allocations):
                    problems.append(f"{where}: shared, but the device cannot be shared here")
                # Held whole by another claim: results without a shareID, and with DRAConsumableCapacity off
                # shares too (upstream's foreachAllocatedDevice); shares alone never block a device then.
                held = snapshot.allocated.get(device.key, 0)
                other_shares = snapshot.shared_allocated.get(device.key) if sharing else None
                if not sub.admin_access and held > (other_shares.shares if other_shares else 0):
                    problems.append(f"{where}: already allocated")
                for other_claim, other_admin, other_shared in taken_by_pod.get(device.key, []):
                    both_shares = share is not None and other_shared
                    if not (sub.admin_access or other_admin or both_shares) or (
                        other_claim == claim_index and not both_shares
                    ):
                        problems.append(f"{where}: taken twice")
                taken_by_pod.setdefault(device.key, []).append((claim_index, sub.admin_access, share is not None))
                if share is not None:
                    use = share_use.setdefault(device.key, dict(other_shares.consumed) if other_shares else {})
                    for capacity_name, amount in share.consumed_capacity:
                        qualified = capacity_name if "/" in capacity_name else f"{device.driver}/{capacity_name}"
                        use[qualified] = use.get(qualified, Fraction(0)) + amount
                        if use[qualified] > device.capacity.get(qualified, Fraction(0)):
                            problems.append(f"{where}: shares consume {use[qualified]} of {qualified}")
                if share is not None and (device.key in snapshot.allocated or device.key in counted_shares):
                    continue  # a shared device's counters are charged once, by its first allocation
                if share is not None:
                    counted_shares.add(device.key)
                for consumption in device.consumes_counters:
                    bucket = counters.setdefault((device.driver, device.pool), {}).setdefault(
                        consumption.counter_set, {}
                    )
                    for counter, value in consumption.counters.items():
                        bucket[counter] = bucket.get(counter, Fraction(0)) + value
        for constraint in spec.constraints:
            applicable = [
                chosen.device
                for chosen in result.devices
                if not constraint.requests
                or chosen.request in constraint.requests
                or chosen.request.split("/", 1)[0] in constraint.requests
            ]
            attribute = constraint.match_attribute or constraint.distinct_attribute
            values = [device.attributes.get(attribute) for device in applicable]
            if any(v is None for v in values):
                problems.append(f"{claim.label}: a device lacks constrained attribute {attribute}")
            elif constraint.match_attribute and len(set(values)) > 1:
                problems.append(f"{claim.label}: matchAttribute {attribute} sees {values}")
            elif constraint.distinct_attribute and len(set(values)) != len(values):
                problems.append(f"{claim.label}: distinctAttribute {attribute} sees {values}")
    for pool_key, sets in counters.items():
        pool = snapshot.pools.get(pool_key)
        if pool is None:
            problems.append(f"pool {pool_key} unknown")
            continue
        used: dict[str, dict[str, Fraction]] = {}
        for device in pool.devices:
            if device.key in snapshot.allocated:
                for consumption in device.consumes_counters:
                    for counter, value in consumption.counters.items():
                        bucket = used.setdefault(consumption.counter_set, {})
                        bucket[counter] = bucket.get(counter, Fraction(0)) + value
        for counter_set, new in sets.items():
            limits = pool.shared_counters.get(counter_set, {})
            for counter, value in new.items():
                total = value + used.get(counter_set, {}).get(counter, Fraction(0))
                if counter not in limits or total > limits[counter]:
                    problems.append(f"pool {pool_key} counter {counter_set}/{counter}: {total} > {limits.get(counter)}")
    return problems


# --- fixtures --------------------------------------------------------------------------------------------------------


def case_digest(case: Mapping[str, Any]) -> str:
    body = {"scenario": case["scenario"], "pod": case["pod"]}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]


def save_fixture(
    case: Mapping[str, Any],
    expected: Mapping[str, Mapping[str, Verdict]],
    kinds: Mapping[str, Iterable[str]],
    finding: Finding,
) -> Path:
    """Write a problem case as a regression fixture: upstream's verdicts under every profile the case runs in,
    and the stable allocator's kinds over pool orders; `test_fixtures_regress` compares ours with them."""
    FIXTURES.mkdir(parents=True, exist_ok=True)
    profile = finding.profile if finding.profile != "-" else next(iter(expected))
    path = FIXTURES / f"{case_digest(case)}.json"
    if path.exists():
        return path  # the same case, found again (e.g. under the other profile): it already holds both
    document = {
        "description": f"{finding.kind} ({profile}) on {finding.node}: {finding.message}",
        "features": {name: PROFILES[name] for name in expected},
        "case": {"name": case.get("name", ""), "scenario": case["scenario"], "pod": case["pod"]},
        "expected": {
            name: {
                node: {"kind": v["kind"], "allocation": v["allocation"], "why": v.get("why", "")}
                for node, v in by_node.items()
            }
            for name, by_node in expected.items()
        },
        "stableKinds": {node: sorted(found) for node, found in kinds.items()},
    }
    path.write_text(json.dumps(document, indent=1) + "\n")
    return path


def fixture_findings(fixture: Mapping[str, Any]) -> list[Finding]:
    """Our verdicts on a fixture's case, compared with the upstream verdicts stored in it."""
    case = fixture["case"]
    snapshot = build_store(case).snapshot()
    stored_features = fixture.get("features", {})
    runs = {
        profile: _run_on(snapshot, case, features_for(stored_features.get(profile, PROFILES[profile])))
        for profile in fixture["expected"]
    }
    stored = {node: set(found) for node, found in fixture.get("stableKinds", {}).items()}
    return compare_case(case, runs, fixture["expected"], lambda: stored)


def prune_unused_classes(case: Mapping[str, Any]) -> dict[str, Any]:
    """The case without DeviceClasses no claim names: both allocators only look classes up by name, so this
    changes no verdict and keeps fixtures readable."""
    pruned = copy.deepcopy(dict(case))
    scenario = pruned["scenario"]
    named = {
        body["deviceClassName"]
        for claim in (*scenario["claims"], *scenario["allocatedClaims"])
        for request in claim["spec"]["devices"]["requests"]
        for body in ([request["exactly"]] if "exactly" in request else request["firstAvailable"])
    }
    scenario["deviceClasses"] = [c for c in scenario["deviceClasses"] if c["metadata"]["name"] in named]
    return pruned


def load_fixtures() -> list[tuple[Path, dict[str, Any]]]:
    if not FIXTURES.is_dir():
        return []
    return [(path, json.loads(path.read_text())) for path in sorted(FIXTURES.glob("*.json"))]


# --- shrinking of bulk-found cases ------------------------------------------------------------------------------------


def _without(items: list[Any], index: int) -> list[Any]:
    return items[:index] + items[index + 1 :]


def shrink_candidates(case: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """Smaller variants of a case: one node, slice, device, allocated claim, pod claim, request, constraint,
    selector or toleration fewer. Each keeps the case well-formed."""
    scenario = case["scenario"]
    for i in range(len(scenario["nodeNames"])):
        if len(scenario["nodeNames"]) > 1:
            smaller = copy.deepcopy(case)
            smaller["scenario"]["nodeNames"] = _without(scenario["nodeNames"], i)
            yield smaller
    for key in ("resourceSlices", "allocatedClaims"):
        for i in range(len(scenario[key])):
            smaller = copy.deepcopy(case)
            smaller["scenario"][key] = _without(scenario[key], i)
            yield smaller
    for s, resource_slice in enumerate(scenario["resourceSlices"]):
        for d in range(len(resource_slice["spec"].get("devices", []))):
            smaller = copy.deepcopy(case)
            devices = smaller["scenario"]["resourceSlices"][s]["spec"]["devices"]
            smaller["scenario"]["resourceSlices"][s]["spec"]["devices"] = _without(devices, d)
            yield smaller
    for i in range(len(scenario["claims"])):
        if len(scenario["claims"]) > 1:
            smaller = copy.deepcopy(case)
            smaller["scenario"]["claims"] = _without(scenario["claims"], i)
            smaller["pod"]["claims"] = _without(case["pod"]["claims"], i)
            yield smaller
    for c, claim in enumerate(scenario["claims"]):
        devices = claim["spec"]["devices"]
        for key in ("constraints",):
            for i in range(len(devices.get(key, []))):
                smaller = copy.deepcopy(case)
                smaller["scenario"]["claims"][c]["spec"]["devices"][key] = _without(devices[key], i)
                yield smaller
        requests = devices["requests"]
        for r in range(len(requests)):
            if len(requests) > 1:
                name = requests[r]["name"]
                smaller = copy.deepcopy(case)
                target = smaller["scenario"]["claims"][c]["spec"]["devices"]
                target["requests"] = _without(requests, r)
                target["constraints"] = [
                    constraint
                    for constraint in target.get("constraints", [])
                    if not any(x == name or x.startswith(name + "/") for x in constraint.get("requests", []))
                ]
                yield smaller
            bodies = [requests[r].get("exactly")] if "exactly" in requests[r] else requests[r]["firstAvailable"]
            for b, body in enumerate(bodies):
                for key in ("selectors", "tolerations"):
                    if body.get(key):
                        smaller = copy.deepcopy(case)
                        request = smaller["scenario"]["claims"][c]["spec"]["devices"]["requests"][r]
                        target_body = request["exactly"] if "exactly" in request else request["firstAvailable"][b]
                        del target_body[key]
                        yield smaller
    for n, node in enumerate(scenario["nodes"]):
        if node["metadata"]["name"] not in scenario["nodeNames"]:
            smaller = copy.deepcopy(case)
            smaller["scenario"]["nodes"] = _without(scenario["nodes"], n)
            yield smaller


def shrink(case: dict[str, Any], still_fails: Any, budget: int = 400) -> dict[str, Any]:
    """Greedy: keep taking the first smaller variant that still fails, until none does (or the budget ends)."""
    current = case
    tries = 0
    progress = True
    while progress and tries < budget:
        progress = False
        for candidate in shrink_candidates(current):
            tries += 1
            try:
                failing = still_fails(candidate)
            except Exception:  # a variant our parser rejects is simply not smaller in a useful way
                failing = False
            if failing:
                current = candidate
                progress = True
                break
            if tries >= budget:
                break
    return current


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"
