"""One pod's claims, prepared once and asked about many nodes: the shortcut for the commonest pod and the
per-shape memo of its answers, the full search for everything else.

Upstream's scheduler plugin runs the structured allocator per node (pkg/scheduler/framework/plugins/
dynamicresources, Filter calling structured.Allocator.Allocate). Most pods ask for N devices of a class with no
constraints: for those, taking the first free devices of the node's free list (free_devices.py) gives exactly
the allocator's first solution (structured/internal/experimental/allocator_experimental.go walks devices in
the same order and takes the first that fit), so the search (allocator.py) only runs for what the shortcut
cannot settle. The answers of the commonest shape are kept per node in its free-list entry and per shape in
DecisionCaches.settled (settled.py), so a burst of pods of one shape costs little per node.
"""

from __future__ import annotations

from collections.abc import Iterable, KeysView, Mapping, Sequence
from dataclasses import dataclass, replace

from extender.decisions.devices.allocator import DEFAULT_SEARCH_BUDGET, allocate, check_allocated_claims
from extender.decisions.devices.explain import count_shortfall
from extender.decisions.devices.features import DEFAULT_FEATURES, Features, gate_failure, gated_devices
from extender.decisions.devices.free_devices import FreeView, free_selectable
from extender.decisions.devices.free_entries import SearchedEntry
from extender.decisions.devices.results import (
    AllocatedClaim,
    Allocation,
    AllocationOutcome,
    ChosenDevice,
    ClaimAllocation,
    NodeQuestion,
    NotAllocatable,
    PendingClaim,
    new_allocation,
    new_chosen,
    new_claim_allocation,
    new_not_allocatable,
)
from extender.decisions.devices.selection import DeviceMatcher
from extender.decisions.devices.settled import SettledNodes, Shortfall
from extender.state.core import Node
from extender.state.dra.claims import ALLOCATION_MODE_EXACT, MAX_DEVICES_PER_ALLOCATION, DeviceSubRequest
from extender.state.dra.device_class import DeviceClass
from extender.state.dra.devices import DeviceKey
from extender.state.inventory import NodeDevices
from extender.state.snapshot import ClusterSnapshot

# The label of the claim the full search runs for when its answer is kept for every pod of a shape
# (PodAllocator._searched_outcome): a text no claim's own label contains, replaced by the pod's claim in refusals.
SHAPE_LABEL = "claim \x00shape\x00"


def _relabelled(refusal: NotAllocatable, label: str) -> NotAllocatable:
    """A refusal made for the shape's claim, told of the pod's own claim."""
    return refusal._replace(
        summary=refusal.summary.replace(SHAPE_LABEL, label),
        detail=refusal.detail.replace(SHAPE_LABEL, label),
        claim=refusal.claim.replace(SHAPE_LABEL, label),
    )


class _Unfit(tuple[ChosenDevice, ...]):
    """Memo marker: the shortcut does not apply to this free list (empty, so the hit path tests nothing)."""


_UNFIT = _Unfit()


@dataclass(frozen=True, slots=True)
class _ShortcutRequest:
    """An ExactCount request the shortcut serves: its claim's position, its name and its class resolved."""

    claim_index: int
    request_name: str
    sub: DeviceSubRequest
    device_class: DeviceClass


def _in_order(names: set[str], asked: list[str]) -> list[str]:
    """`names` (some of `asked`) in the order asked: by position for a few (a search in C each), else one pass."""
    if len(names) <= 8:
        return sorted(names, key=asked.index)
    return [name for name in asked if name in names]


class PodAllocator:
    """One pod's claims, prepared once and asked about many nodes.

    Most pods ask for N devices of a class with no constraints: for those, taking the first free devices of
    the node's cached free list gives exactly the upstream allocator's first solution. Anything that shortcut
    cannot settle (constraints, firstAvailable, All, adminAccess, taints, counters, selector errors, a
    shortfall across several requests) goes to the full search in `allocate`.
    """

    def __init__(
        self,
        pending: Sequence[PendingClaim],
        allocated_claims: Sequence[AllocatedClaim],
        classes: Mapping[str, DeviceClass],
        matcher: DeviceMatcher,
        snapshot: ClusterSnapshot,
        *,
        budget: int = DEFAULT_SEARCH_BUDGET,
        features: Features = DEFAULT_FEATURES,
    ) -> None:
        self.pending = tuple(pending)
        self.allocated_claims = tuple(allocated_claims)
        self.matcher = matcher
        self.snapshot = snapshot
        self.budget = budget
        self.features = features
        # The gates that change devices get a per-(NodeDevices, Features) view; with every gate on, none.
        self._gated = matcher.caches.gated.table(features) if features.changes_devices else None
        self._gate_refusal = gate_failure(self.pending, classes, features)
        self._holders: dict[DeviceKey, list[str]] | None = None
        self._shortcut_plan = self._shortcut_requests(classes)
        self.chosen_alternatives = [{request.name: 0 for request in claim.spec.requests} for claim in self.pending]
        # With only ExactCount requests, what a node takes per class is the same on every node that fits.
        counts: dict[str, int] = {}
        for step in self._shortcut_plan or ():
            counts[step.sub.device_class_name] = counts.get(step.sub.device_class_name, 0) + step.sub.count
        self.class_counts = tuple(sorted(counts.items()))
        self._single_claim_request = (
            self._shortcut_plan is not None and len(self._shortcut_plan) == 1 and len(self.pending) == 1
        )
        # decide's shortcut for the commonest pod (and settle_remembered's): nothing else to check per node
        self._takes_shortcut = (
            self._single_claim_request and not self.allocated_claims and self._gated is None and not self._gate_refusal
        )
        if self._single_claim_request:
            step = self._shortcut_plan[0]  # type: ignore[index]
            self._memo_key = (step.request_name, step.sub.device_class_name, step.sub.count)
            self._free_view = FreeView(matcher, snapshot, step.device_class, step.sub.selectors)
            # The node's answer is shared by every pod whose claim asks the same (the allocation names its
            # claim by the pod's claim entry; a claim that exists is told apart by nothing else, so such pods
            # share it: PodDecision.claim_labels says whose claim it is).
            claim = self.pending[0]
            self._shared_claim = claim if not claim.claim_key else replace(claim, label="", claim_key="")
            # The gates and the budget too: where the shortcut gives way to the full search (counters, shared
            # devices), the search's allocations join the same remembered answers (_look_up_entries).
            shape = (claim.pod_claim_name, self._shared_claim.label, claim.spec, features, budget)
            self._shared_key = matcher.caches.request_shape(shape)
            self._alternatives = self.chosen_alternatives[0]
            self._refusals: dict[tuple[int, int], NotAllocatable] = {}  # (selectable, free) -> refusal on node ""
            self._settled_key = (self._free_view.signature, self._shared_key)
        # One claim and no allocated claim to check: the full search's answer on a node depends on nothing of
        # this pod but its claim's shape, so the allocations it finds are kept per node (caches.searched) for
        # every pod of the shape, as the shortcut's are (the claim they carry stands for the shape: SHAPE_LABEL;
        # PodDecision.claim_labels says whose claim it is).
        self._search_claims: tuple[PendingClaim, ...] = ()
        self._searched: Mapping[NodeDevices, SearchedEntry] | None = None
        if len(self.pending) == 1 and not self.allocated_claims and self._gated is None and not self._gate_refusal:
            claim = self.pending[0]
            referenced = tuple(
                classes.get(sub.device_class_name) for request in claim.spec.requests for sub in request.alternatives
            )
            self._search_token = matcher.caches.request_shape(
                ("search", claim.pod_claim_name, claim.spec, referenced, features, budget)
            )
            self._search_claims = (replace(claim, label=SHAPE_LABEL, claim_key=""),)
            self._searched = matcher.caches.searched.table(self._search_token)
        # What settle_remembered found in the memo, and what of it holds for this snapshot plus what it added
        # (`remember` publishes the latter when it differs).
        self._memo: SettledNodes | None = None
        self._settled: SettledNodes | None = None

    def _shortcut_requests(self, classes: Mapping[str, DeviceClass]) -> tuple[_ShortcutRequest, ...] | None:
        plan = []
        for claim_index, claim in enumerate(self.pending):
            if claim.spec.constraints:
                return None
            if sum(r.exactly.count if r.exactly is not None else 0 for r in claim.spec.requests) > (
                MAX_DEVICES_PER_ALLOCATION
            ):
                return None  # the search reports the claim limit (an error), not a shortfall
            for request in claim.spec.requests:
                sub = request.exactly
                if sub is None or sub.allocation_mode != ALLOCATION_MODE_EXACT or sub.admin_access:
                    return None
                if sub.capacity_requests:
                    return None  # consumable capacity: the search checks policies and what is left
                device_class = classes.get(sub.device_class_name)
                if device_class is None:
                    return None
                plan.append(_ShortcutRequest(claim_index, request.name, sub, device_class))
        return tuple(plan)

    def on_node(self, question: NodeQuestion) -> AllocationOutcome:
        if self._gate_refusal is not None:
            return self._gate_refusal._replace(node=question.node.name)
        if self._gated is not None:
            question = question._replace(devices=self.gated(question.devices))
        if self._shortcut_plan is not None:
            fast = self._first_free(question)
            if fast is not None:  # never an error: the shortcut gives up on failing selectors
                if self.allocated_claims:
                    return check_allocated_claims(question.node, self.allocated_claims) or fast
                return fast
        if self._searched is not None:
            return self._searched_outcome(question)
        return allocate(
            question,
            self.pending,
            self.allocated_claims,
            self.matcher,
            budget=self.budget,
            features=self.features,
            holders=self.holders,
        )

    def _searched_outcome(self, question: NodeQuestion) -> AllocationOutcome:
        """The full search's answer for this pod's shape on the node, remembered while the node's devices and
        allocation versions stay as they were. The search runs for the shape's claim, labelled SHAPE_LABEL; a
        refusal's texts get the pod's own claim in its place. A refusal that names who holds a device is not
        kept: a claim's reservedFor changes no allocation version."""
        assert self._searched is not None
        node_name = question.node.name
        local_version = self.snapshot.alloc_versions.get(node_name, 0)
        shared_version = self.snapshot.shared_alloc_version
        entry = self._searched.get(question.devices)
        if (
            entry is not None
            and entry.local_version == local_version
            and entry.shared_version == shared_version
            and entry.outcome.node == node_name
        ):
            outcome = entry.outcome
        else:
            named_holders = False

            def holders(key: DeviceKey) -> Sequence[str]:
                nonlocal named_holders
                named_holders = True
                return self.holders(key)

            outcome = allocate(
                question,
                self._search_claims,
                (),
                self.matcher,
                budget=self.budget,
                features=self.features,
                holders=holders,
            )
            if type(outcome) is Allocation:  # its class counts once, for quota's charge on every later pod
                outcome = outcome._replace(known_class_counts=outcome.class_counts())
            if not named_holders:
                self.matcher.caches.searched.put(
                    question.devices, SearchedEntry(local_version, shared_version, outcome), self._search_token
                )
        if type(outcome) is NotAllocatable:
            return _relabelled(outcome, self.pending[0].label)
        return outcome

    def holders(self, key: DeviceKey) -> Sequence[str]:
        """The claims holding a device and the pods they are reserved for: one pass over the snapshot's claims,
        made the first time a reason needs it (a capacity shortfall) and kept for this pod's nodes only."""
        if self._holders is None:
            index: dict[DeviceKey, list[str]] = {}
            for claim in self.snapshot.claims.values():
                if claim.allocation is None:
                    continue
                pods = [f"{claim.namespace}/{c.name}" for c in claim.reserved_for if c.resource == "pods"]
                label = f"claim {claim.key}" + (f" (pod {', '.join(pods)})" if pods else "")
                for result in claim.allocation.results:
                    index.setdefault(result.key, []).append(label)
            self._holders = index
        return self._holders.get(key, ())

    def gated(self, devices: NodeDevices) -> NodeDevices:
        """The node's devices under this allocator's gates, remembered per NodeDevices object (stable identities
        for the selector and free-list memos)."""
        assert self._gated is not None
        found = self._gated.get(devices)
        if found is None:
            found = self.matcher.caches.gated.put(devices, gated_devices(devices, self.features), self.features)
        return found

    def decide(
        self, node: Node, devices: NodeDevices, allocated: Mapping[DeviceKey, int], classes: Mapping[str, DeviceClass]
    ) -> AllocationOutcome:
        """on_node without building a NodeQuestion on the common path (it is built only when needed)."""
        if self._takes_shortcut:
            fast = self._one_request(node.name, devices)
            if fast is not None:
                return fast
        question = NodeQuestion(node, devices, allocated, classes, self.snapshot.shared_allocated)
        if self._takes_shortcut and self._searched is not None:  # on_node's next step, the shortcut not asked again
            return self._searched_outcome(question)
        return self.on_node(question)

    def _one_request(self, node_name: str, devices: NodeDevices) -> AllocationOutcome | None:
        """The commonest pod: one claim, one ExactCount request. Its devices on a node are remembered with the
        node's free list, so the next pod of the same shape costs two lookups and one result per node."""
        step = self._shortcut_plan[0]  # type: ignore[index]
        found = self._free_view.get(node_name, devices)
        if found is None:
            return None
        chosen_devices = found.derived.get(self._memo_key)
        if chosen_devices is None:
            # A free device whose requestPolicy refuses the default consumption is one upstream skips.
            if not found.default_requests_fit:
                chosen_devices = _UNFIT  # remembered too: the check costs nothing on the next pod
            else:
                class_name = step.sub.device_class_name
                chosen_devices = tuple(
                    new_chosen((step.request_name, device, class_name, False, False, ()))
                    for device in found.free[: step.sub.count]
                )
            found.derived[self._memo_key] = chosen_devices
        if len(chosen_devices) < step.sub.count:
            if chosen_devices is _UNFIT or devices.has_unusable:
                return None  # the full search says it, with the unusable devices named
            shortfall = Shortfall(node_name, found.selectable, len(chosen_devices))
            found.allocations[self._shared_key] = shortfall
            return new_not_allocatable((node_name, *self._refusal((shortfall.selectable, shortfall.free))[1:]))
        allocation = found.allocations.get(self._shared_key)
        if not isinstance(allocation, Allocation) or allocation.node != node_name:
            claim_allocation = new_claim_allocation((self._shared_claim, chosen_devices, self._alternatives))
            allocation = new_allocation((node_name, (claim_allocation,), self.class_counts))
            found.allocations[self._shared_key] = allocation
        return allocation

    def settle_remembered(
        self, node_names: Iterable[str], asked_keys: KeysView[str] | None = None
    ) -> tuple[dict[str, Allocation], list[tuple[NotAllocatable, list[str]]], list[str]]:
        """The commonest pod on every node whose answer is remembered from an earlier pod of its shape: its
        allocations, and its refusals on full nodes as groups (one refusal with no node, and the nodes full
        the same way: the texts name the pod's claim and the numbers, never the node). Returns those and the
        other nodes, in the order asked, for `decide`; the caller hands them to `remember` afterwards. The
        allocations follow the memo's order, not the order asked (every reader looks nodes up, or goes by the
        order asked itself).

        Where the answers come from: a node's answer lives in its free-list entry, valid while the node's
        allocations stay as they were (on a full node it is the numbers of the pod's refusal). Checking that
        per node costs a burst more than all the rest of its device step, so the answers are also kept per
        shape in `caches.settled` (SettledNodes) with the snapshot version they hold at: a later snapshot
        drops the nodes its change list names and keeps the others. When most remembered nodes are asked about
        (kube-scheduler's filter), the allocations are one dict copy less the nodes not asked, and only the
        nodes not remembered are looked at; otherwise (explain or a test asking about a few nodes) a node costs
        one lookup. Without a usable memo
        (the first pod, pools spanning nodes changed, the change history ran out, an older snapshot than the
        memo's), each node's entry is checked instead. `asked_keys`: the same nodes as a dict's keys, when the
        caller has them (decide_pod does: one pass over the nodes less)."""
        allocations: dict[str, Allocation] = {}
        full_nodes: dict[tuple[int, int], list[str]] = {}  # (selectable, free) -> the nodes full that way
        if not self._takes_shortcut:
            return allocations, [], list(node_names)
        memo = self._memo = self.matcher.caches.settled.get(self._settled_key)
        if memo is None:
            shared = (self.snapshot.shared_alloc_version, self.snapshot.topology.shared_version)
            known = SettledNodes.empty(self.snapshot.version, shared)
        else:
            known = memo.brought_to(self.snapshot)
        names = node_names if isinstance(node_names, list) else list(node_names)
        asked = asked_keys if asked_keys is not None else dict.fromkeys(names).keys()
        remembered, full = known.allocations, known.shortfalls
        unknown: list[str] = []
        if 2 * len(asked) >= len(remembered) + len(full):
            # Most remembered nodes are asked about (kube-scheduler asks about every node its own plugins let
            # through): the allocations are one copy less the nodes not asked, and only the nodes not
            # remembered (the ones the last bindings changed) are looked at.
            allocations = dict(remembered)
            if not all(map(asked.__contains__, remembered)):  # a look per remembered node (usually: all asked)
                for name in [name for name in remembered if name not in asked]:
                    del allocations[name]
            for name, shortfall in full.items():
                if name in asked:
                    full_nodes.setdefault((shortfall.selectable, shortfall.free), []).append(name)
            if len(allocations) + sum(map(len, full_nodes.values())) < len(asked):
                unknown = _in_order((asked - remembered.keys()).difference(full.keys()), names)
        else:
            answer_of, full_of = remembered.get, full.get
            for name in names:  # once per node: a lookup and a store
                answer = answer_of(name)
                if answer is not None:
                    allocations[name] = answer
                elif (full_answer := full_of(name)) is not None:
                    full_nodes.setdefault((full_answer.selectable, full_answer.free), []).append(name)
                else:
                    unknown.append(name)
        hits: dict[str, Allocation | Shortfall] = {}
        rest = self._look_up_entries(unknown, hits)
        self._settled = known.with_answers(hits)
        for name, found in hits.items():
            if type(found) is Shortfall:
                full_nodes.setdefault((found.selectable, found.free), []).append(name)
            else:
                allocations[name] = found  # type: ignore[assignment]  # the other kind of answer
        return allocations, [(self._refusal(numbers), group) for numbers, group in full_nodes.items()], rest

    def remember(self, decided: Sequence[str]) -> SettledNodes | None:
        """After `decide` ran on these nodes: what it left in their free-list entries joins the answers, and
        the memo gets them if they differ from what it held (a new SettledNodes, never a change to one).
        Returns the answers as they now stand (None for a pod the shortcut does not serve)."""
        if not self._takes_shortcut or self._settled is None:
            return None
        hits: dict[str, Allocation | Shortfall] = {}
        self._look_up_entries(decided, hits)
        settled = self._settled = self._settled.with_answers(hits)
        if settled is not self._memo:
            self.matcher.caches.settled.put(self._settled_key, settled)
        return settled

    def _look_up_entries(self, node_names: Sequence[str], hits: dict[str, Allocation | Shortfall]) -> list[str]:
        """Each node's remembered answer in its free-list entry, or the full search's allocation where the
        shortcut gives way to it (caches.searched), if it holds for this snapshot, into `hits`; returns the
        nodes without one (FreeView.get's hit test inlined: no calls, no new objects)."""
        resolved = self.snapshot.resolved_node_devices
        entries = self._free_view.entries
        searched = self._searched
        versions = self.snapshot.alloc_versions
        shared_version = self.snapshot.shared_alloc_version
        key = self._shared_key
        rest: list[str] = []
        for name in node_names:
            devices = resolved.get(name)
            entry = entries.get(devices)  # type: ignore[arg-type]
            if (
                entry is not None
                and entry.shared_version == shared_version
                and entry.local_version == versions.get(name, 0)
                and entry.result is not None
                and (remembered := entry.result.allocations.get(key)) is not None
                and remembered.node == name
            ):
                hits[name] = remembered
            elif (
                searched is not None
                and (found := searched.get(devices)) is not None  # type: ignore[arg-type]
                and found.shared_version == shared_version
                and found.local_version == versions.get(name, 0)
                and type(outcome := found.outcome) is Allocation
                and outcome.node == name
            ):
                hits[name] = outcome
            else:
                rest.append(name)
        return rest

    def _refusal(self, numbers: tuple[int, int]) -> NotAllocatable:
        """The pod's own refusal on the nodes full the same way, with no node: built once per pod and numbers
        (the texts name the pod's claim and the numbers, not the node)."""
        refusal = self._refusals.get(numbers)
        if refusal is None:
            step = self._shortcut_plan[0]  # type: ignore[index]
            refusal = self._refusals[numbers] = count_shortfall(
                "", self.pending[0].label, step.request_name, step.sub, numbers[0], numbers[1]
            )
        return refusal

    def _first_free(self, question: NodeQuestion) -> AllocationOutcome | None:
        assert self._shortcut_plan is not None
        if self._single_claim_request:
            return self._one_request(question.node.name, question.devices)
        node_name = question.node.name
        taken: set[DeviceKey] = set()
        chosen: list[list[ChosenDevice]] = [[] for _ in self.pending]
        only_request = len(self._shortcut_plan) == 1
        for step in self._shortcut_plan:
            found = free_selectable(
                self.matcher, self.snapshot, node_name, question.devices, step.device_class, step.sub.selectors
            )
            if found is None or not found.default_requests_fit:
                return None
            needed = step.sub.count
            class_name = step.sub.device_class_name
            if only_request:
                memo_key = (step.request_name, class_name, needed)
                chosen_devices = found.derived.get(memo_key)
                if chosen_devices is None:
                    chosen_devices = tuple(
                        new_chosen((step.request_name, device, class_name, False, False, ()))
                        for device in found.free[:needed]
                    )
                    found.derived[memo_key] = chosen_devices
            else:
                chosen_devices = tuple(
                    new_chosen((step.request_name, device, class_name, False, False, ()))
                    for device in found.free
                    if device.key not in taken
                )[:needed]
                taken.update(chosen.device.key for chosen in chosen_devices)
            if len(chosen_devices) < needed:
                if only_request and not question.devices.has_unusable:
                    claim = self.pending[step.claim_index]
                    return count_shortfall(
                        node_name, claim.label, step.request_name, step.sub, found.selectable, len(chosen_devices)
                    )
                return None
            picks = chosen[step.claim_index]
            picks.extend(chosen_devices)
            if len(picks) > MAX_DEVICES_PER_ALLOCATION:
                return None
        return Allocation(
            node_name,
            tuple(
                ClaimAllocation(claim, tuple(chosen[index]), self.chosen_alternatives[index])
                for index, claim in enumerate(self.pending)
            ),
            self.class_counts,
        )
