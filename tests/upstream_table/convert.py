"""One exported case of upstream's allocator table -> a differential-harness case, and its upstream verdicts.

The harness (tests/differential/harness.py) already turns a scenario in the oracle's input format (nodes,
resourceSlices, deviceClasses, allocatedClaims, claims, nodeNames; tests/oracle/README.md) plus a pod into our
objects and runs our allocator on it. A table case is nearly that scenario already; what differs:

- The table gives the devices other claims hold as bare DeviceIDs (`allocatedDevices`) and, with consumable
  capacity, as shared device IDs and consumed capacity per device. Our model learns about held devices only from
  allocated ResourceClaims, so they become one allocated claim in another namespace, the way
  dynamicresources' allocated-devices tracker would have seen them (a result with `shareID` and
  `consumedCapacity` for the shared ones).
- The table's claims carry no namespace; the pod and its claims get `default`.
- The table reuses slice names across pools, and claim names across the claims of one call (upstream's
  allocator never looks either up by name); a cluster cannot, and our store keys objects by name, so a
  repeated name gets a `~N` suffix (slice names only order slices within a pool, and renamed slices keep
  their relative order).
- The table calls Allocate directly; the scheduler's DynamicResources plugin first checks each request's
  DeviceClass in PreFilter (dynamicresources.go, as tests/oracle/scenario.go `prepare` emulates), so a missing
  class is "unschedulable: device class does not exist", never Allocate's "could not retrieve device class"
  error. `plugin_verdict` applies that check before the table's answer; our extender mirrors the plugin.
- The table's answer is Allocate's return value (AllocationResults or an error), which becomes the oracle's
  per-node result shape so that `harness.upstream_verdict` reads it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

NAMESPACE = "default"
HOLDER_NAMESPACE = "table-holders"


def _holder_claim(name: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    requests = sorted({result["request"] for result in results})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": HOLDER_NAMESPACE, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": r, "exactly": {"deviceClassName": "held"}} for r in requests]}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def held_claims(case: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The devices the table says are in use, as allocated claims of someone else."""
    claims = []
    exclusive = [
        {"request": "held", "driver": d["driver"], "pool": d["pool"], "device": d["device"]}
        for d in case["allocatedDevices"]
    ]
    if exclusive:
        claims.append(_holder_claim("held-exclusive", exclusive))
    capacity = {(c["driver"], c["pool"], c["device"]): c["capacity"] for c in case["allocatedCapacity"]}
    shared = []
    for index, d in enumerate(case["allocatedSharedDeviceIDs"]):
        result: dict[str, Any] = {
            "request": "held",
            "driver": d["driver"],
            "pool": d["pool"],
            "device": d["device"],
            "shareID": d.get("shareID") or f"share-{index}",
        }
        consumed = capacity.pop((d["driver"], d["pool"], d["device"]), None)
        if consumed:
            result["consumedCapacity"] = consumed
        shared.append(result)
    # Consumed capacity of devices without a shared ID listed: still capacity someone else holds.
    for index, ((driver, pool, device), consumed) in enumerate(sorted(capacity.items())):
        shared.append(
            {
                "request": "held",
                "driver": driver,
                "pool": pool,
                "device": device,
                "shareID": f"capacity-{index}",
                "consumedCapacity": consumed,
            }
        )
    if shared:
        claims.append(_holder_claim("held-shared", shared))
    return claims


def harness_case(case: Mapping[str, Any]) -> dict[str, Any]:
    """The table case in tests/differential/harness.py's case format (one node, one pod with every claim)."""
    claims = []
    claim_names: dict[str, int] = {}
    for claim in case["claims"]:
        claim = copy.deepcopy(claim)
        claim.setdefault("metadata", {})["namespace"] = NAMESPACE
        name = claim["metadata"]["name"]
        claim_names[name] = claim_names.get(name, 0) + 1
        if claim_names[name] > 1:
            claim["metadata"]["name"] = f"{name}~{claim_names[name]}"
        claim["metadata"].setdefault("uid", f"uid-{claim['metadata']['name']}")
        claims.append(claim)
    slices = []
    seen: dict[str, int] = {}
    for resource_slice in case["slices"] or []:
        resource_slice = copy.deepcopy(resource_slice)
        name = resource_slice["metadata"]["name"]
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            resource_slice["metadata"]["name"] = f"{name}~{seen[name]}"
        slices.append(resource_slice)
    node = case["node"]
    return {
        "name": case["name"],
        "scenario": {
            "nodes": [node],
            "resourceSlices": slices,
            "deviceClasses": case["classes"] or [],
            "allocatedClaims": held_claims(case),
            "claims": claims,
            "nodeNames": [node["metadata"]["name"]],
        },
        "pod": {
            "namespace": NAMESPACE,
            "claims": [
                {"name": f"claim{index}", "claim": claim["metadata"]["name"], "template": False}
                for index, claim in enumerate(claims)
            ],
        },
    }


def prefilter_result(case: Mapping[str, Any], features: Sequence[str]) -> dict[str, Any] | None:
    """What the plugin's PreFilter decides before any Allocate call, or None (tests/oracle/scenario.go)."""
    classes = {c["metadata"]["name"] for c in case["classes"] or []}

    def verdict(error: str = "", reason: str = "") -> dict[str, Any]:
        return {"feasible": False, "allocation": [], "error": error, "reason": reason}

    def check(class_name: str, request: str) -> dict[str, Any] | None:
        if not class_name:
            return verdict(error=f"request {request}: unsupported request type")
        if class_name not in classes:
            return verdict(reason=f"request {request}: device class {class_name} does not exist")
        return None

    for claim in case["claims"]:
        if (claim.get("status") or {}).get("allocation"):
            continue
        name = claim["metadata"]["name"]
        for request in (claim["spec"].get("devices") or {}).get("requests") or []:
            if request.get("exactly") is not None:
                found = check(request["exactly"].get("deviceClassName", ""), request["name"])
            elif request.get("firstAvailable"):
                if "DRAPrioritizedList" not in features:
                    return verdict(
                        reason=f"resource claim {name}, request {request['name']}: has subrequests, "
                        "but the DRAPrioritizedList feature is disabled"
                    )
                found = None
                for sub in request["firstAvailable"]:
                    found = found or check(sub.get("deviceClassName", ""), f"{request['name']}/{sub['name']}")
            else:
                found = verdict(reason=f"resource claim {name}, request {request['name']}: unknown request type")
            if found is not None:
                return found
    return None


def node_result(
    run: Mapping[str, Any], case: Mapping[str, Any], features: Sequence[str] | None = None
) -> dict[str, Any]:
    """One exported Allocate call, behind the plugin's PreFilter, in the oracle's NodeResult shape
    (tests/oracle/scenario.go `decide`). `features`: the gates of that run (default: the case's own)."""
    claims = case["claims"]
    early = prefilter_result(case, case["features"] if features is None else features)
    if early is not None:
        return early
    out: dict[str, Any] = {"feasible": False, "allocation": [], "error": "", "reason": ""}
    if run["error"]:
        out["reason" if run["failedOnNode"] else "error"] = run["error"]
        return out
    results = run["results"] or []
    if len(results) != len(claims):
        return out  # nil, nil: no solution
    out["feasible"] = True
    for claim, result in zip(claims, results, strict=True):
        out["allocation"].append(
            {
                "claim": f"{NAMESPACE}/{claim['metadata']['name']}",
                "results": [
                    {
                        "request": r["request"],
                        "driver": r["driver"],
                        "pool": r["pool"],
                        "device": r["device"],
                        "adminAccess": bool(r.get("adminAccess")),
                        # a share (the oracle's `shared`) and what it consumes, compared as the differential does
                        "shared": bool(r.get("shareID")),
                        "consumedCapacity": r.get("consumedCapacity") or {},
                    }
                    for r in result["devices"].get("results") or []
                ],
            }
        )
    return out


def canonical(allocation: Sequence[Sequence[Sequence[Any]]]) -> list[list[tuple[Any, ...]]]:
    """Per claim, its results as a sorted list: upstream's matchers compare them with ConsistOf."""
    return [sorted(tuple(result) for result in claim) for claim in allocation]
