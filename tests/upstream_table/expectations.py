"""Which cases of upstream's allocator table are out of scope, and which are known to disagree (and why).

Out of scope: cases that need an alpha gate, off by default in Kubernetes 1.37 (pkg/features/kube_features.go
at v1.37.2), or that only make sense with one (an alpha-only field present while its gate is off: the API
server drops such fields on write, so a 1.37 cluster with default gates cannot hold those objects).

Expected failures: in-scope cases where our allocator still disagrees with the table, each with its reason.
They are strict xfails: a change that makes one agree fails the suite until its entry is removed here, so
this list is always the exact set of known disagreements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# Alpha gates (off by default in 1.37) and why a case needing one is out of scope.
ALPHA_GATES: Mapping[str, str] = {
    "DRAListTypeAttributes": "DRAListTypeAttributes is alpha (off in 1.37): list-valued device attributes",
    "DRADeviceCompatibilityGroups": "DRADeviceCompatibilityGroups is alpha (off in 1.37): counter compatibility groups",
    "DRADerivedAttributes": "DRADerivedAttributes is alpha (off in 1.37): per-request derived attributes",
    "DRAOptionalNodeOperations": "DRAOptionalNodeOperations is alpha (off in 1.37): skipped node operations",
}

_LISTS_GATE_OFF = (
    "list-valued attributes with DRAListTypeAttributes off: the field exists only with the alpha gate "
    "(the API server drops it while the gate is off)"
)
_GROUPS_GATE_OFF = (
    "consumesCounters[].compatibilityGroups with DRADeviceCompatibilityGroups off: the field exists only "
    "with the alpha gate (the API server drops it while the gate is off)"
)

OUT_OF_SCOPE_CASES: Mapping[str, str] = {
    "list-attributes-disabled-distinct-constraint-with-lists": _LISTS_GATE_OFF,
    "list-attributes-disabled-match-constraint-with-lists": _LISTS_GATE_OFF,
    "compatibility-groups-disabled-skips-grouped-pool": _GROUPS_GATE_OFF,
    "compatibility-groups-disabled-skips-ungrouped-device-in-grouped-pool": _GROUPS_GATE_OFF,
}


def out_of_scope(case: Mapping[str, Any]) -> str:
    """Why the case is out of scope, or ""."""
    for gate in case["features"]:
        if gate in ALPHA_GATES:
            return ALPHA_GATES[gate]
    return OUT_OF_SCOPE_CASES.get(case["name"], "")


# Cases whose exported JSON cannot carry a quantity exactly: what a share consumes is not compared there (the
# verdict and the devices still are). The table's Go values are right; json.Marshal of those Quantities is
# lossy, so both sides would compare numbers the case does not hold.
CONSUMED_CAPACITY_NOT_COMPARED: Mapping[str, str] = {
    "consumable-capacity-requests-are-not-modified": (
        'its 10^21 request and default are exported as "1" by json.Marshal of the Quantity, so the capacity '
        "a share consumes in the export is not the case's"
    ),
}

# --- known disagreements -------------------------------------------------------------------------------------


EXPECTED_FAILURES: Mapping[str, str] = {}

# Cases that depend on a gate being off: ours against upstream under the 1.37 default gates.
DEFAULTS_EXPECTED_FAILURES: Mapping[str, str] = {}

AREAS: Sequence[tuple[str, str]] = (
    ("DRAConsumableCapacity", "consumable capacity"),
    ("DRADeviceBindingConditions+DRAResourceClaimDeviceStatus", "binding conditions"),
    ("DRAFractionalCapacityRange", "fractional capacity"),
    ("DRAPartitionableDevices", "partitionable devices"),
    ("DRAPrioritizedList", "prioritized list"),
    ("DRADeviceTaints", "device taints"),
    ("DRAAdminAccess", "admin access"),
)


def area(case: Mapping[str, Any]) -> str:
    """The feature area a case belongs to, for the summary: its most specific gate, or "core"."""
    for gate in case["features"]:
        if gate in ALPHA_GATES:
            return gate.removeprefix("DRA") + " (alpha)"
    for gate, label in AREAS:
        if gate in case["features"]:
            return label
    return "core"
