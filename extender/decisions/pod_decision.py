"""One pod's decision: a verdict per candidate node, and what quota holds for it.

kube-scheduler's ExtenderFilterResult (k8s.io/kube-scheduler/extender/v1: NodeNames, FailedNodes,
FailedAndUnresolvableNodes) needs each failed node's reason and the names of the others. A decision covers up
to thousands of nodes per pod, so the verdicts of nodes failing alike are kept as one template and its nodes
(NodeFailures), and a passing node's verdict is built only when someone reads it (NodeVerdicts).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator, KeysView, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property, partial
from itertools import repeat
from typing import NamedTuple

from extender.decisions.devices.results import Allocation, ClaimAllocation, NotAllocatable
from extender.decisions.devices.settled import SettledNodes
from extender.decisions.gang.quota import GangQuota
from extender.decisions.quota.verdicts import NOT_GOVERNED, NodeQuota, QuotaDecision, QuotaRejection
from extender.decisions.scoring import STRATEGY_MOST
from extender.state.reservations import QuotaKey


class NodeVerdict(NamedTuple):
    """One node's verdict (a NamedTuple: one is built per candidate node of every pod)."""

    node: str
    passed: bool
    unresolvable: bool = False
    category: str = ""
    reason: str = ""  # identical text on every node failing the same way
    detail: str = ""  # this node's numbers
    allocation: Allocation | None = None
    quota: NodeQuota | None = None


_new_verdict = partial(tuple.__new__, NodeVerdict)  # the hot path skips the NamedTuple's Python-level __new__


class NodeFailures(Mapping[str, NodeVerdict]):
    """The failed nodes' verdicts: the ones built node by node (device refusals), and groups of nodes failing
    the same way (quota's refusals, a bucket of nodes of one charge and flavor at a time) whose verdicts are built
    when someone reads them. A group is one verdict with no node (its template: the same reason and category on
    every node of it) and its nodes.

    kube-scheduler's answer needs each failed node's reason, and the metrics its category: `names` (every
    failed node -> its verdict or its group's template, filled a group at a time in C) and `groups` give both
    without a verdict per node. Quota refuses every node of the flavors it did not choose: hundreds per pod in a
    cluster of several flavors, each a verdict built and thrown away."""

    __slots__ = ("_allocations", "_per_node", "built", "groups", "names")

    def __init__(
        self,
        built: dict[str, NodeVerdict],
        groups: Sequence[tuple[NodeVerdict, Sequence[str]]] = (),
        allocations: Mapping[str, Allocation] | None = None,
        per_node: Mapping[str, NodeQuota] | None = None,
    ) -> None:
        self.built = built
        self.groups = tuple(groups)
        self._allocations = allocations if allocations is not None else {}
        self._per_node = per_node if per_node is not None else {}
        names: dict[str, NodeVerdict] = built
        if self.groups:
            names = dict(built)
            for template, group_names in self.groups:
                names.update(dict.fromkeys(group_names, template))
        self.names = names

    def get(self, name: str, default: NodeVerdict | None = None) -> NodeVerdict | None:  # type: ignore[override]
        found = self.names.get(name)
        if found is None:
            return default
        if found.node:
            return found
        return _new_verdict(  # a group's template, made this node's
            (
                name,
                False,
                found.unresolvable,
                found.category,
                found.reason,
                found.detail,
                self._allocations.get(name),
                self._per_node.get(name),
            )
        )

    def __getitem__(self, name: str) -> NodeVerdict:
        found = self.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def category_counts(self) -> Counter[str]:
        """How many nodes failed per category: a look per built verdict and per group."""
        counts = Counter(verdict.category for verdict in self.built.values())
        for template, group_names in self.groups:
            counts[template.category] += len(group_names)
        return counts


NO_FAILURES = NodeFailures({})


class NodeVerdicts(Mapping[str, NodeVerdict]):
    """A pod's verdict per candidate node, in the order asked, with the passing nodes' verdicts built only when
    someone reads them. kube-scheduler's answers need the failed nodes (kept built, in `failures`) and the
    names of the others; a verdict for each passing node of each pod (hundreds to thousands per pod) would be
    built for diagnostics that read a few. A passing verdict is made from what the decision holds anyway: the
    node's allocation and its NodeQuota (neither, for a pod with nothing for us to decide: such a pod costs no
    Python work per node)."""

    __slots__ = ("_order", "allocations", "asked", "failures", "per_node")

    def __init__(
        self,
        order: dict[str, None],
        allocations: Mapping[str, Allocation],
        per_node: Mapping[str, NodeQuota],
        failures: NodeFailures,
        asked: list[str] | None = None,
    ) -> None:
        self._order = order  # every candidate node, in the order asked
        self.allocations = allocations  # the device-feasible nodes' allocations
        self.per_node = per_node
        self.failures = failures
        # The list of node names the decision was asked about, when it was one: an answer for the same list
        # (filter's) knows by its identity that it asks about the decided nodes, with no look at each.
        self.asked = asked

    def order_copy(self) -> dict[str, None]:
        """Every candidate node in the order asked, as a new dict (a copy in C, no hashing)."""
        return dict(self._order)

    def __getitem__(self, name: str) -> NodeVerdict:
        failed = self.failures.get(name)
        if failed is not None:
            return failed
        if name not in self._order:
            raise KeyError(name)
        return _new_verdict((name, True, False, "", "", "", self.allocations.get(name), self.per_node.get(name)))

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, name: object) -> bool:
        return name in self._order

    def keys(self) -> KeysView[str]:
        return self._order.keys()  # a dict's view: set comparisons run in C (prioritize checks its coverage)


@dataclass(frozen=True)
class PodDecision:
    """What decide_pod found for one pod: the verdict per node, quota's decision and the reservation to hold."""

    pod_key: str
    pod_uid: str
    snapshot_version: int
    verdicts: NodeVerdicts
    quota: QuotaDecision = NOT_GOVERNED
    fast_path: bool = False
    strategy: str = STRATEGY_MOST
    reservation: Mapping[QuotaKey, Fraction] = field(default_factory=dict)
    # The pod's claims that needed devices, as people name them, in the allocator's order: an allocation's
    # claims are told by position (the commonest pod's allocation on a node is shared by every pod of its
    # shape, so the claim it carries may be another pod's; see pod_allocator.PodAllocator._one_request).
    claim_labels: tuple[str, ...] = ()
    # The remembered answers of the pod's shape when every allocation is theirs: score_nodes scores the nodes
    # a group of equal parts at a time.
    settled: SettledNodes | None = None
    # Whether the pod takes no device (no claim, no DRA-backed extended resource; a pod of a LocalQueue with
    # cpu and memory only): its device parts are the same on every node, so score_nodes reads none.
    takes_no_devices: bool = False
    # For a pod of a gang (decisions/gang/quota.py): the group's decision, what the attempt holds besides the pod
    gang: GangQuota | None = None

    @property
    def failures(self) -> NodeFailures:
        """The verdicts of the nodes that failed: the answers read these (a group at a time where nodes fail
        alike), so a burst's answer costs a look per failed node or group, not per node."""
        return self.verdicts.failures

    def claim_label(self, index: int, claim: ClaimAllocation) -> str:
        """Who the index-th claim of one of this decision's allocations is."""
        return self.claim_labels[index] if index < len(self.claim_labels) else claim.claim.label

    @property
    def any_passed(self) -> bool:
        """Whether some node passed (without listing them)."""
        return len(self.failures) < len(self.verdicts)

    @cached_property
    def passed(self) -> list[str]:
        """The nodes that passed, in the order asked; built once, in C (never change the list). filter answers
        with it, and kube-scheduler sends prioritize the same list back when it keeps every node we passed
        (pkg/scheduler/schedule_one.go findNodesThatPassExtenders keeps our order), which prioritize then
        recognises with one comparison (SchedulingService.prioritize)."""
        order = self.verdicts.order_copy()
        deque(map(order.pop, self.failures.names, repeat(None)), maxlen=0)
        return list(order)

    def outcome_counts(self) -> Counter[str]:
        """How many nodes passed, and how many failed per category (the filter metrics)."""
        counts = self.failures.category_counts()
        passed = len(self.verdicts) - len(self.failures)
        if passed:
            counts["passed"] = passed
        return counts


def refused_verdict(
    name: str, rejection: QuotaRejection, allocation: Allocation | None, node_quota: NodeQuota | None
) -> NodeVerdict:
    """The verdict of a device-feasible node that quota refuses (positional, as in `failed_verdict`); with no node, the
    template of a group of them (NodeFailures)."""
    summary = rejection.summary
    return _new_verdict(
        (name, False, rejection.unresolvable, rejection.category, summary, summary, allocation, node_quota)
    )


def failed_verdict(outcome: NotAllocatable) -> NodeVerdict:
    """The verdict of a node the devices refuse. Positional, through `_new_verdict`: a burst refuses hundreds
    of nodes per pod, and a NamedTuple built with keywords costs several times more."""
    return _new_verdict(
        (outcome.node, False, outcome.unresolvable, outcome.category, outcome.summary, outcome.detail, None, None)
    )
