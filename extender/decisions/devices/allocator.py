"""Can a pod's pending ResourceClaims be allocated on one node? The structured allocator's rules, in Python.

Follows k8s.io/dynamic-resource-allocation structured (allocator.go, Allocate; internal/experimental
allocator_experimental.go): depth-first search with backtracking over claims -> requests -> device slots,
only devices of complete and valid pools as the node sees them (state/inventory.node_view). The pieces: the
candidates per subrequest (candidates.py), the search (search.py) with constraints (constraints.py), shared
counters (counters.py) and consumable capacity (consumable_capacity.py), and, where the search finds nothing,
the reason (explain.py). Where upstream's Allocate returns an error instead of "no solution" (a selector
failing on a device the search reaches, allocationMode All over a pool being updated or against a constraint,
more than 32 devices) the NotAllocatable is `fatal`. tests/differential checks all this against the real
allocator. Unlike upstream it says *why not*, and a search that would run away ends with a reason instead of
a hang.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.decisions.devices.candidates import can_end_in_error, collect_alternatives
from extender.decisions.devices.consumable_capacity import SharedCapacity
from extender.decisions.devices.explain import FailureExplainer, Holders
from extender.decisions.devices.features import DEFAULT_FEATURES, Features
from extender.decisions.devices.results import (
    CATEGORY_BUDGET,
    CATEGORY_CLAIM_NODE,
    CATEGORY_SELECTOR,
    AllocatedClaim,
    Allocation,
    AllocationOutcome,
    ClaimAllocation,
    NodeQuestion,
    NotAllocatable,
    PendingClaim,
    not_allocatable,
)
from extender.decisions.devices.search import BudgetExhaustedError, DeviceCheckError, FatalError, Search
from extender.decisions.devices.selection import DeviceMatcher
from extender.state.core import Node

# Devices tried before the search gives up on one node. Upstream has no limit; a pathological claim (many
# matchAttribute requests over many devices) must cost a reason, not the scheduler's httpTimeout.
DEFAULT_SEARCH_BUDGET = 20_000


def check_allocated_claims(node: Node, claims: Sequence[AllocatedClaim]) -> NotAllocatable | None:
    """An allocated claim takes nothing new, but pins the pod to the nodes its allocation reaches."""
    for allocated in claims:
        allocation = allocated.claim.allocation
        if allocation is None or allocation.node_selector is None:
            continue
        if not allocation.node_selector.matches(node):
            return NotAllocatable(
                node=node.name,
                category=CATEGORY_CLAIM_NODE,
                summary=f"{allocated.label} is already allocated to devices not reachable from this node",
                detail=f"{allocated.label} is already allocated to devices not reachable from this node",
                unresolvable=True,
                claim=allocated.label,
            )
    return None


def allocate(
    question: NodeQuestion,
    pending: Sequence[PendingClaim],
    allocated_claims: Sequence[AllocatedClaim],
    matcher: DeviceMatcher,
    *,
    budget: int = DEFAULT_SEARCH_BUDGET,
    features: Features = DEFAULT_FEATURES,
    holders: Holders | None = None,
) -> AllocationOutcome:
    """Allocate all of a pod's pending claims together on one node, or say why that cannot be done.

    `features`: the gates (see decisions/devices/features.py); the question's devices must already be the gated view."""
    node = question.node
    blocked = check_allocated_claims(node, allocated_claims)
    if not pending:
        return blocked or Allocation(node.name, ())
    # kube-scheduler runs the allocator even where an allocated claim cannot be used: its error still wins.
    outcome = _search(
        question, pending, matcher, budget, errors_only=blocked is not None, features=features, holders=holders
    )
    if blocked is not None and not (isinstance(outcome, NotAllocatable) and outcome.fatal):
        return blocked
    assert outcome is not None
    return outcome


def _search(
    question: NodeQuestion,
    pending: Sequence[PendingClaim],
    matcher: DeviceMatcher,
    budget: int,
    *,
    errors_only: bool = False,
    features: Features = DEFAULT_FEATURES,
    holders: Holders | None = None,
) -> AllocationOutcome | None:
    """The search proper. `errors_only`: the caller only needs to know whether it would fail with an error,
    so a search that cannot end in one (no failing selector met, no All request under a constraint) is skipped
    and None returned."""
    node_name = question.node.name
    # With DRAConsumableCapacity off a share held by another claim blocks the whole device.
    shared = question.shared if features.consumable_capacity else {}
    capacity = SharedCapacity(question.allocated, shared, features.fractional_capacity_range)
    alternatives = collect_alternatives(question, pending, matcher, features, capacity)
    if isinstance(alternatives, NotAllocatable):
        return alternatives
    if errors_only and not can_end_in_error(pending, alternatives):
        return None
    search = Search(question, pending, alternatives, budget, features, capacity)
    try:
        found = search.run()
    except BudgetExhaustedError:
        return not_allocatable(
            node_name,
            CATEGORY_BUDGET,
            "the device search gave up after trying too many combinations",
            f"the device search gave up after {budget} device tries; simplify the claims' constraints",
            unresolvable=False,
        )
    except DeviceCheckError as error:
        return not_allocatable(
            node_name,
            getattr(error.failure, "category", CATEGORY_SELECTOR),
            f"{error.claim} request {error.request}: {error.failure.describe()}",
            unresolvable=True,
            request=error.request,
            fatal=True,
        )
    except FatalError as error:
        return not_allocatable(
            node_name, error.category, error.summary, unresolvable=True, request=error.request, fatal=True
        )
    if not found:
        return FailureExplainer(question, pending, alternatives, matcher, features, capacity, holders).explain()
    return Allocation(
        node_name,
        tuple(
            ClaimAllocation(claim, tuple(search.chosen[index]), dict(search.alternatives_chosen[index]))
            for index, claim in enumerate(pending)
        ),
    )
