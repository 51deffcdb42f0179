"""A gang's scheduling attempt as the extender follows it: one hold for the whole group, in every flavor a
placement of the attempt was judged in, until the placement kube-scheduler keeps shows.

kube-scheduler's pod-group cycle (pkg/scheduler/schedule_one_podgroup.go) filters the gang's pods back to back,
assumes each, and when fewer than minCount fit reverts them all, writes PodGroupInitiallyScheduled=False
(reason Unschedulable) on the PodGroup and requeues the group with backoff. With TopologyAwareWorkloadScheduling
(podGroupSchedulingPlacementAlgorithm) it runs that once per candidate placement (the nodes of one value of a
topology label), every member through our filter each time, reverts every placement, keeps the best successful
one by its PlacementScore plugins (ties at random) and binds it. The extender is told of none of it: not which
placement won, not what was reverted.

So the service keeps, per PodGroup in an attempt, one **branch** per set of flavors the group was judged in
(a placement's nodes are in one flavor per resource group, as Kueue admits a pod set): the group's whole charge
there (its latest decision: the pod asked about and the rest of minCount, decisions/gang/quota.py), each
member's own charge there, and the nodes the members passed. The attempt holds one reservation, the most of
every branch per flavor and resource (`podgroup:<namespace>/<name>`): whichever placement kube-scheduler keeps,
its whole charge is held, and no flavor's quota is given twice. Members hold no reservation of their own while
their group's attempt holds them. Placed members (bound or nominated, kube-scheduler writes nominatedNodeName
before DRA's PreBind since 1.35) leave the hold as usage takes them over; the first one placed names the winning
branch (the one whose nodes hold it), and the others are let go at once.

The attempt ends:

- won: minCount members are placed (the condition turning True says only that they are about to be: it is
  written before any is bound): what is left of the hold goes;
- lost: every branch refused for the group's quota, fewer members than minCount, the PodGroup's condition
  newly False, the PodGroup gone, or no call for the group within the attempt window while it is not placed:
  the hold and any member's reservation of the attempt go at once, not after the TTL.

Restart-safe: the hold is an ordinary reservation (the journal keeps it), adopted into an attempt before the
first reconcile after a restart (service/reconciliation.py leaves holds to the attempts), so the window applies
to it as well.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from extender.decisions.gang.claims import group_claims_demand, pending_group_claims
from extender.decisions.gang.quota import GangNeed, charges_nothing
from extender.decisions.pod_decision import PodDecision
from extender.decisions.quota.attribution import cluster_queue_of
from extender.decisions.quota.context import QuotaContext
from extender.decisions.quota.ledger import QuotaLedger
from extender.service.gang_tree import (
    COMPOSITE_PREFIX,
    GangTree,
    composite_of_key,
    tree_levels,
    tree_of,
)
from extender.service.history import DecisionRecord
from extender.service.quota_view import QuotaView
from extender.service.reconciliation import GROUP_HOLD_PREFIX
from extender.state.core import Pod
from extender.state.kueue.local_queue import pod_queue_name
from extender.state.podgroups.podgroup import INITIALLY_SCHEDULED, GroupCondition, PodGroup
from extender.state.reservations import QuotaKey, Reservation, ReservationLedger
from extender.state.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

HOLD_PREFIX = GROUP_HOLD_PREFIX
RELEASE_LOST = "gang-attempt-lost"
RELEASE_WON = "gang-attempt-won"
ENDED_KEPT = 1024  # groups whose last attempt diagnostics remember
WON_PATIENCE = 5  # windows a complete attempt (minCount members passed) may wait for its bindings to show

Amounts = dict[QuotaKey, Fraction]
FlavorSet = frozenset[tuple[str, str]]  # (ClusterQueue, flavor) pairs a branch's charge is in


def hold_id(group_key: str) -> str:
    """The ledger identity of a group's hold (never a pod uid: those have no colon)."""
    return f"{HOLD_PREFIX}{group_key}"


def is_hold(reservation_id: str) -> bool:
    return reservation_id.startswith(HOLD_PREFIX)


def placed(pod: Pod) -> bool:
    return not pod.is_terminal and bool(pod.node_name or pod.nominated_node_name)


def gang_group(view: QuotaView, pod: Pod, admitted_workload: str) -> PodGroup | None:
    """The pod's PodGroup when the extender decides for the group: a gang, the pod governed by a queue, and no
    Workload Kueue admitted for it (Kueue's admission was the group's decision: its hold already covers the
    gang, decisions/quota/workload_holds.py, so it is neither refused again nor charged twice)."""
    if not view.governed or not pod_queue_name(pod.labels) or admitted_workload:
        return None
    group = view.snapshot.pod_groups.get(pod.group_key)
    return group if group is not None and group.is_gang else None


def _condition(snapshot: ClusterSnapshot, group_key: str) -> GroupCondition | None:
    group = snapshot.pod_groups.get(group_key)
    return group.conditions.get(INITIALLY_SCHEDULED) if group is not None else None


def _max_into(into: Amounts, amounts: Mapping[QuotaKey, Fraction]) -> None:
    for key, amount in amounts.items():
        if amount > into.get(key, Fraction(0)):
            into[key] = amount


@dataclass
class Branch:
    """The group judged in one set of flavors: what the whole group takes there, and who was asked there."""

    flavors: FlavorSet
    whole: Amounts  # the group's charge: the latest decision's pod and the rest of minCount
    placed_then: frozenset[str]  # pod uids placed when `whole` was decided (it leaves them out)
    own: dict[str, Amounts] = field(default_factory=dict)  # pod uid -> its own charge here (the most asked)
    nodes: set[str] = field(default_factory=set)  # nodes members passed here

    def held(self, placed_now: Iterable[str]) -> Amounts:
        """`whole` less the own charge of members placed since it was decided (usage covers them now)."""
        left = dict(self.whole)
        for uid in placed_now:
            if uid in self.placed_then:
                continue
            for key, amount in self.own.get(uid, {}).items():
                if key in left:
                    left[key] -= amount
        return {key: amount for key, amount in left.items() if amount > 0}


@dataclass
class Attempt:
    group_key: str  # the PodGroup's key, or its tree's (service/gang_tree.py GangTree.key)
    min_count: int  # members placed that make the group (or tree) whole
    started: float
    last_call: float
    # PodGroup key -> its PodGroupInitiallyScheduled when the attempt started, for every PodGroup of the attempt
    conditions: dict[str, GroupCondition | None]
    cluster_queue: str = ""
    binding: bool = False  # kube-scheduler wrote PodGroupInitiallyScheduled=True: the members are being bound
    booked: set[str] = field(default_factory=set)  # members whose placement was handed to the service to book
    branches: dict[FlavorSet, Branch] = field(default_factory=dict)
    # pod uid -> pod key: members asked about in the attempt (and reservations of members a previous process held)
    members: dict[str, str] = field(default_factory=dict)
    last_refusal: str = ""

    def hold(self, placed_now: Iterable[str]) -> Amounts:
        """The most of every branch per flavor and resource: whichever branch wins, its charge is held."""
        placed_uids = frozenset(placed_now)
        hold: Amounts = {}
        for branch in self.branches.values():
            _max_into(hold, branch.held(placed_uids))
        return hold

    def complete(self, placed_count: int, free: int) -> bool:
        """minCount members passed in one branch (with those placed and those charging nothing)."""
        return any(len(branch.own) + placed_count + free >= self.min_count for branch in self.branches.values())


@dataclass(frozen=True, slots=True)
class BranchView:
    flavors: tuple[str, ...]
    whole: Mapping[QuotaKey, Fraction]
    members: int  # members asked about in these flavors
    nodes: int  # nodes they passed


@dataclass(frozen=True, slots=True)
class AttemptView:
    """What diagnostics show of an attempt (a copy)."""

    group_key: str
    min_count: int
    age_seconds: float
    idle_seconds: float
    members: tuple[str, ...]
    hold: Mapping[QuotaKey, Fraction]
    claims: Mapping[QuotaKey, Fraction]
    last_refusal: str
    outcome: str  # "in progress", "won" or "lost: <why>"
    branches: tuple[BranchView, ...] = ()


@dataclass(frozen=True, slots=True)
class _Census:
    """A PodGroup's members as one snapshot has them, for every member's need: the group's side of
    kube-scheduler's pod-group cycle (pkg/scheduler/schedule_one_podgroup.go), which asks about each member in
    turn against the same cluster."""

    live: frozenset[str]  # uids of the members not finished
    placed: tuple[Pod, ...]  # of those, the ones bound or nominated, in members_of's order
    placed_uids: frozenset[str]
    pending: tuple[Pod, ...]  # the rest, in members_of's order
    pending_index: dict[str, int]  # uid -> its place in `pending`


class GangAttempts:
    """Owned by the service; every method is called under the reservation ledger's lock."""

    def __init__(self, window_seconds: float, *, composites: bool = False) -> None:
        self.window_seconds = window_seconds
        self.composites = composites  # CompositePodGroup: a tree of groups is one attempt
        self._attempts: dict[str, Attempt] = {}
        self._adopted = False
        self._ended: dict[str, AttemptView] = {}  # group key -> its last attempt, as it ended (bounded below)
        # members seen placed with the branch their node is in: (pod uid, pod key, ClusterQueue, own charge), for
        # the service to book (state/bookings.py: their usage stays in the flavor of the placement that won)
        self._placed_bookings: list[tuple[str, str, str, Amounts]] = []
        self.lost = 0
        self.won = 0
        # The census of each PodGroup (_census), for the snapshot it was counted in
        self._census_snapshot: ClusterSnapshot | None = None
        self._census_of: dict[str, _Census] = {}

    def _census(self, snapshot: ClusterSnapshot, group_key: str) -> _Census:
        """The group's members as `snapshot` has them: counted once per snapshot (a member's filter asks several
        times, and every member of a gang asks)."""
        if self._census_snapshot is not snapshot:
            self._census_snapshot, self._census_of = snapshot, {}
        found = self._census_of.get(group_key)
        if found is None:
            live = [member for member in snapshot.members_of(group_key) if not member.is_terminal]
            placed_members = tuple(member for member in live if placed(member))
            placed_uids = frozenset(member.uid for member in placed_members)
            pending = tuple(member for member in live if member.uid not in placed_uids)
            found = self._census_of[group_key] = _Census(
                frozenset(member.uid for member in live),
                placed_members,
                placed_uids,
                pending,
                {member.uid: index for index, member in enumerate(pending)},
            )
        return found

    def _placed_members(self, snapshot: ClusterSnapshot, leaves: tuple[str, ...]) -> tuple[Pod, ...]:
        """The placed pods of these PodGroups, in members_of's order, from their censuses."""
        if len(leaves) == 1:
            return self._census(snapshot, leaves[0]).placed
        return tuple(member for leaf in leaves for member in self._census(snapshot, leaf).placed)

    def _placed_uids(self, snapshot: ClusterSnapshot, leaves: tuple[str, ...]) -> frozenset[str]:
        if len(leaves) == 1:
            return self._census(snapshot, leaves[0]).placed_uids
        return frozenset().union(*(self._census(snapshot, leaf).placed_uids for leaf in leaves))

    def need(
        self,
        snapshot: ClusterSnapshot,
        pod: Pod,
        group: PodGroup,
        context: QuotaContext,
        *,
        group_claims: bool,
    ) -> GangNeed:
        # The members as this snapshot has them, counted once for every member's call (a gang may have a
        # thousand, and each of them is asked about), then the pod itself taken out
        census = self._census(snapshot, group.key)
        uid = pod.uid
        pod_live = uid in census.live
        placed_count = len(census.placed) - (uid in census.placed_uids)
        present = len(census.live) + (0 if pod_live else 1)
        index = census.pending_index.get(uid)
        pending = census.pending if index is None else census.pending[:index] + census.pending[index + 1 :]
        demand = (
            group_claims_demand(pending_group_claims(snapshot, pod), context.resource_for_class) if group_claims else {}
        )
        return GangNeed(
            group.key,
            group.min_count,
            placed_count,
            present,
            pending,
            group.claims if group_claims else (),
            demand,
            tree_levels(snapshot, group, pod, group_claims) if self.composites and group.parent else (),
        )

    def tree(self, snapshot: ClusterSnapshot, group: PodGroup) -> GangTree:
        """The attempt unit of a member of `group` (its PodGroup, or the composite tree above it)."""
        return tree_of(snapshot, group, self.composites)

    def need_and_ledger(
        self,
        view: QuotaView,
        pod: Pod,
        group: PodGroup,
        reservations: ReservationLedger,
        ledger: QuotaLedger,
        *,
        group_claims: bool,
    ) -> tuple[GangNeed, QuotaLedger]:
        """The member's need, and `ledger` (already without the pod's own charge) without what the ledger holds
        for its group: the group is judged whole, against everything but itself."""
        need = self.need(view.snapshot, pod, group, view.context, group_claims=group_claims)
        tree = self.tree(view.snapshot, group)
        held = self.held_for(tree.key, reservations)
        attempt = self._attempts.get(tree.key)
        asked: dict[FlavorSet, dict[str, Amounts]] = {}
        if attempt is not None:
            # placed members are usage's now: only those still waiting are part of the group's charge as asked
            placed_uids = self._placed_uids(view.snapshot, tree.leaves)
            asked = {
                flavors: {uid: own for uid, own in branch.own.items() if uid not in placed_uids}
                for flavors, branch in attempt.branches.items()
            }
        need = replace(need, held=held, asked=asked)
        known = view.context.cluster_queues
        return need, ledger.with_usage_deltas((q, f, r, -amount) for (q, f, r), amount in held.items() if q in known)

    @staticmethod
    def held_for(group_key: str, reservations: ReservationLedger) -> Mapping[QuotaKey, Fraction]:
        """What the ledger holds for the group's attempt: read from the ledger itself, so a member is credited
        exactly what the quota view counts for its group, never a hold that expired or was let go."""
        hold = reservations.get(hold_id(group_key))
        return hold.charges if hold is not None else {}

    def record(
        self,
        snapshot: ClusterSnapshot,
        pod: Pod,
        group: PodGroup,
        decision: PodDecision,
        node_names: Iterable[str],
        reservations: ReservationLedger,
    ) -> list[tuple[Reservation, str]]:
        """After the filter of a gang member: the branch of the flavors it was judged in takes the group's whole
        charge (the attempt's hold grows to cover it), or a refusal ends the branches of the nodes asked about."""
        gang = decision.gang
        if gang is None:
            return []
        now = reservations.now()
        tree = self.tree(snapshot, group)
        attempt = self._attempts.get(tree.key)
        if attempt is None:
            attempt = self._start(snapshot, tree, now)
        attempt.last_call = now
        attempt.min_count = tree.min_members
        attempt.cluster_queue = decision.quota.cluster_queue or attempt.cluster_queue
        released: list[tuple[Reservation, str]] = []
        placed_uids = self._placed_uids(snapshot, tree.leaves)
        if gang.waiting:
            attempt.last_refusal = gang.waiting
            released += self._lose(attempt, reservations, snapshot, "fewer members than minCount")
            return released
        if gang.refused and gang.extra:
            # a member beyond minCount refused on its own: the members asked before it still make the group
            attempt.last_refusal = gang.refused
        elif gang.refused:
            attempt.last_refusal = gang.refused
            asked = set(node_names)
            ended = [key for key, branch in attempt.branches.items() if branch.nodes & asked or not branch.nodes]
            for flavors in ended:
                del attempt.branches[flavors]
            if not attempt.branches:
                released += self._lose(attempt, reservations, snapshot, "refused for the group's quota")
                return released
        elif decision.reservation:
            branch = self._branch(attempt, gang.whole, placed_uids)
            _max_into(branch.own.setdefault(pod.uid, {}), gang.own)
            branch.nodes.update(decision.passed)
            attempt.members[pod.uid] = pod.key
        self._hold(attempt, placed_uids, reservations)
        return released

    @staticmethod
    def _branch(attempt: Attempt, whole: Mapping[QuotaKey, Fraction], placed_uids: frozenset[str]) -> Branch:
        """The branch of the flavors `whole` is in, now covering it: the most of the group's charges decided
        there while the same members were placed; the newest alone once more are placed (an older one still
        counts the members that usage now covers)."""
        flavors: FlavorSet = frozenset((queue, flavor) for queue, flavor, _ in whole)
        branch = attempt.branches.get(flavors)
        if branch is not None and branch.placed_then == placed_uids:
            _max_into(branch.whole, whole)
            return branch
        own = dict(branch.own) if branch is not None else {}
        nodes = set(branch.nodes) if branch is not None else set()
        branch = attempt.branches[flavors] = Branch(flavors, dict(whole), placed_uids, own, nodes)
        return branch

    def _hold(self, attempt: Attempt, placed_uids: Iterable[str], reservations: ReservationLedger) -> None:
        """Bring the attempt's one reservation to what its branches need now (a fresh TTL with every call)."""
        hold = attempt.hold(placed_uids)
        if hold:
            reservations.reserve(
                hold_id(attempt.group_key),
                hold_id(attempt.group_key),
                attempt.cluster_queue,
                hold,
                # longer than the attempt can live without a call (WON_PATIENCE windows): the attempt, not the
                # TTL, ends the hold, so what the ledger holds and what the attempt credits its members agree
                ttl_seconds=(WON_PATIENCE + 1) * self.window_seconds,
            )
        else:
            reservations.release(hold_id(attempt.group_key))

    def _start(self, snapshot: ClusterSnapshot, tree: GangTree, now: float) -> Attempt:
        conditions = {leaf: _condition(snapshot, leaf) for leaf in tree.leaves}
        attempt = Attempt(tree.key, tree.min_members, now, now, conditions)
        self._attempts[tree.key] = attempt
        return attempt

    def adopt(self, snapshot: ClusterSnapshot, reservations: ReservationLedger) -> None:
        """Once, when the view is first complete and before any reconcile: the holds and member reservations a
        previous process kept (the journal) join attempts that start now, so a lost attempt's quota goes after
        the window, and a live one's stays held between its members."""
        if self._adopted or not snapshot.synced:
            return
        self._adopted = True
        now = reservations.now()
        for reservation in reservations.all():
            if is_hold(reservation.pod_uid):
                group_key = reservation.pod_uid[len(HOLD_PREFIX) :]
                pod_uid = ""
            else:
                pod = snapshot.pods.get(reservation.pod_key)
                group_key = pod.group_key if pod is not None else ""
                pod_uid = reservation.pod_uid
            tree = self._tree_of_key(snapshot, group_key)
            if tree is None:
                continue
            attempt = self._attempts.get(tree.key) or self._start(snapshot, tree, now)
            attempt.cluster_queue = attempt.cluster_queue or reservation.cluster_queue
            if pod_uid:
                attempt.members[pod_uid] = reservation.pod_key
            else:
                # The branches are not known: one that holds what the journal held, until the attempt ends.
                flavors: FlavorSet = frozenset((queue, flavor) for queue, flavor, _ in reservation.charges)
                attempt.branches[flavors] = Branch(flavors, dict(reservation.charges), frozenset())

    def _tree_of_key(self, snapshot: ClusterSnapshot, key: str) -> GangTree | None:
        """The attempt unit a journal's key names: a gang PodGroup's (its tree's), or a composite's tree."""
        composite = composite_of_key(snapshot, key)
        if composite is not None:
            leaf = next((g for g in snapshot.pod_groups.values() if g.parent_key == composite.key), None)
            return self.tree(snapshot, leaf) if leaf is not None else None
        group = snapshot.pod_groups.get(key) if key else None
        return self.tree(snapshot, group) if group is not None and group.is_gang else None

    def settle(self, snapshot: ClusterSnapshot, reservations: ReservationLedger) -> list[tuple[Reservation, str]]:
        """End the attempts the view shows won or lost, and bring the others' holds to their members' placement:
        the winning branch kept, placed members' charges left to usage. The reservations let go, with the
        reason."""
        released: list[tuple[Reservation, str]] = []
        self.adopt(snapshot, reservations)
        now = reservations.now()
        for attempt in list(self._attempts.values()):
            gone = self._gone(snapshot, attempt)
            now_conditions = {leaf: _condition(snapshot, leaf) for leaf in attempt.conditions}
            changed = {
                leaf: condition
                for leaf, condition in now_conditions.items()
                if condition is not None and condition != attempt.conditions[leaf]
            }
            placed_members = self._placed_members(snapshot, tuple(attempt.conditions))
            # PodGroupInitiallyScheduled=True is written when the cycle ends, before any member is bound or even
            # nominated (submitPodGroupAlgorithmResult): the group is placed, but where is not known yet, and its
            # members' quota is still the hold's to keep. So it only gives the attempt the patience of one that
            # is binding; the members placed end it.
            scheduled = bool(changed) and all(
                condition is not None and condition.status == "True" for condition in now_conditions.values()
            )
            attempt.binding = attempt.binding or scheduled
            if len(placed_members) >= attempt.min_count:
                self._keep_winner(attempt, placed_members)
                self._book_placed(attempt, placed_members)
                self.won += 1
                released += self._end(attempt, reservations)
            elif gone or any(condition.status == "False" for condition in changed.values()):
                released += self._lose(attempt, reservations, snapshot, "kube-scheduler gave the attempt up")
            elif now - attempt.last_call > self.window_seconds and now - attempt.last_call > self._window(
                attempt, snapshot, len(placed_members)
            ):  # the shortest window first: _window walks every member
                released += self._lose(attempt, reservations, snapshot, "no call for the group in the window")
            elif placed_members:
                self._keep_winner(attempt, placed_members)
                self._book_placed(attempt, placed_members)
                before = reservations.get(hold_id(attempt.group_key))
                hold = attempt.hold(member.uid for member in placed_members)
                if before is not None and dict(before.charges) != hold:
                    self._hold(attempt, (member.uid for member in placed_members), reservations)
        return released

    def _book_placed(self, attempt: Attempt, placed_members: Sequence[Pod]) -> None:
        """Each placed member's charge in the branch its node is in, once, for the service to book."""
        for member in placed_members:
            node = member.node_name or member.nominated_node_name
            for branch in attempt.branches.values():
                own = branch.own.get(member.uid)
                if own and node in branch.nodes and member.uid not in attempt.booked:
                    attempt.booked.add(member.uid)
                    self._placed_bookings.append((member.uid, member.key, attempt.cluster_queue, dict(own)))

    def take_bookings(self) -> list[tuple[str, str, str, Amounts]]:
        taken, self._placed_bookings = self._placed_bookings, []
        return taken

    @staticmethod
    def _keep_winner(attempt: Attempt, placed_members: Sequence[Pod]) -> None:
        """The branches whose nodes hold a placed member: the placement kube-scheduler kept. The others go (when
        no branch holds one, as for branches adopted from the journal, all stay)."""
        nodes = {member.node_name or member.nominated_node_name for member in placed_members}
        winners = {flavors for flavors, branch in attempt.branches.items() if branch.nodes & nodes}
        if winners:
            for flavors in list(attempt.branches):
                if flavors not in winners:
                    del attempt.branches[flavors]

    @staticmethod
    def _gone(snapshot: ClusterSnapshot, attempt: Attempt) -> bool:
        """The attempt's PodGroup (or its tree's root composite) is no longer in the view."""
        if attempt.group_key.startswith(COMPOSITE_PREFIX):
            return composite_of_key(snapshot, attempt.group_key) is None
        return attempt.group_key not in snapshot.pod_groups

    def _window(self, attempt: Attempt, snapshot: ClusterSnapshot, placed_count: int) -> float:
        """How long the attempt may go without a call. Once minCount members passed our filter in one branch,
        kube-scheduler has likely placed the group and is binding it (Permit, PreBind): those pods show as
        nominated or bound soon, and letting their quota go before would open a window for another pod to take
        it. Such an attempt gets WON_PATIENCE windows; one still short of minCount, one."""
        groups = snapshot.pod_groups
        free = sum(
            1
            for leaf in attempt.conditions
            for member in snapshot.members_of(leaf)
            if not member.is_terminal
            and charges_nothing(member, group.claims if (group := groups.get(member.group_key)) is not None else ())
        )
        complete = attempt.binding or attempt.complete(placed_count, free)
        return self.window_seconds * (WON_PATIENCE if complete else 1)

    def _end(self, attempt: Attempt, reservations: ReservationLedger) -> list[tuple[Reservation, str]]:
        hold = reservations.release(hold_id(attempt.group_key))
        self._close(attempt, reservations.now(), "won")
        return [(hold, RELEASE_WON)] if hold is not None else []

    def _lose(
        self, attempt: Attempt, reservations: ReservationLedger, snapshot: ClusterSnapshot | None, why: str
    ) -> list[tuple[Reservation, str]]:
        """Let go of the hold and of the members' reservations, except members already placed."""
        released: list[tuple[Reservation, str]] = []
        self.lost += 1
        members = dict(attempt.members)
        if snapshot is not None:
            for leaf in attempt.conditions:
                for member in snapshot.members_of(leaf):
                    members.setdefault(member.uid, member.key)
        pods = snapshot.pods if snapshot is not None else {}
        for uid, key in members.items():
            pod = pods.get(key)
            if pod is not None and placed(pod):
                continue
            reservation = reservations.release(uid)
            if reservation is not None:
                released.append((reservation, RELEASE_LOST))
        hold = reservations.release(hold_id(attempt.group_key))
        if hold is not None:
            released.append((hold, RELEASE_LOST))
        log.info("gang %s: attempt lost (%s); released %d reservations", attempt.group_key, why, len(released))
        self._close(attempt, reservations.now(), f"lost: {why}")
        return released

    def _close(self, attempt: Attempt, now: float, outcome: str) -> None:
        self._attempts.pop(attempt.group_key, None)
        self._ended.pop(attempt.group_key, None)
        self._ended[attempt.group_key] = self._view_of(attempt, now, outcome)
        while len(self._ended) > ENDED_KEPT:
            del self._ended[next(iter(self._ended))]

    def own_charge(self, group_key: str, pod_uid: str) -> Amounts:
        """What the attempt holds for one member (the most of its own charge over the branches)."""
        attempt = self._attempts.get(group_key)
        held: Amounts = {}
        if attempt is not None:
            for branch in attempt.branches.values():
                _max_into(held, branch.own.get(pod_uid, {}))
        return held

    def views(self, now: float) -> list[AttemptView]:
        return [self._view_of(attempt, now) for attempt in self._attempts.values()]

    def view(self, group_key: str, now: float) -> AttemptView | None:
        """The group's attempt in progress, else how its last one ended (kept for diagnostics)."""
        attempt = self._attempts.get(group_key)
        return self._view_of(attempt, now) if attempt is not None else self._ended.get(group_key)

    def _view_of(self, attempt: Attempt, now: float, outcome: str = "in progress") -> AttemptView:
        return AttemptView(
            attempt.group_key,
            attempt.min_count,
            now - attempt.started,
            now - attempt.last_call,
            tuple(sorted(attempt.members.values())),
            attempt.hold(()),
            {},
            attempt.last_refusal,
            outcome,
            tuple(
                BranchView(
                    tuple(sorted(flavor for _, flavor in branch.flavors)),
                    dict(branch.whole),
                    len(branch.own),
                    len(branch.nodes),
                )
                for branch in attempt.branches.values()
            ),
        )


@dataclass(frozen=True, slots=True)
class MemberStatus:
    pod_key: str
    state: str  # bound, nominated, pending, finished
    node: str  # bound or nominated node
    reserved: Mapping[QuotaKey, Fraction]  # its own reservation, or what its group's attempt holds for it
    last_verb: str  # the verb of its last decision ("" when none is remembered)
    passed_nodes: int
    best_node: str  # the first node its last decision passed
    refusal: str  # why its last decision refused every node ("" when some passed)


@dataclass(frozen=True, slots=True)
class GangStatus:
    """What the PodGroup page and /diagnostics/podgroups show: the group, its members, what it holds."""

    group: PodGroup | None  # None: pods name the group but the PodGroup object is not (yet) in the view
    group_key: str
    members: tuple[MemberStatus, ...]
    placed: int
    hold: Mapping[QuotaKey, Fraction]
    attempt: AttemptView | None
    # the ClusterQueues the members' LocalQueues point to, sorted: the queue the group's quota is decided against
    # (one, normally); empty when Kueue is off or no member names a known LocalQueue
    cluster_queues: tuple[str, ...]
    # the CompositePodGroup tree the group is scheduled in, all or nothing (None: the group on its own); its one
    # attempt and hold are the `attempt` and `hold` above
    tree: GangTree | None = None


def _member_status(
    pod: Pod,
    reservations: ReservationLedger,
    last: Callable[[str], DecisionRecord | None],
    held_in_attempt: Mapping[QuotaKey, Fraction],
) -> MemberStatus:
    state = (
        "finished"
        if pod.is_terminal
        else "bound"
        if pod.node_name
        else "nominated"
        if pod.nominated_node_name
        else "pending"
    )
    reservation = reservations.get(pod.uid)
    reserved = dict(reservation.charges) if reservation is not None else dict(held_in_attempt)
    record = last(pod.key)
    passed: list[str] = []
    refusal = ""
    verb = ""
    if record is not None:
        verb = record.verb
        decision = record.ranking.decision
        passed = decision.passed
        if not passed:
            refusal = next((verdict.reason for _, verdict in decision.failures.items()), "")
    return MemberStatus(
        pod.key,
        state,
        pod.node_name or pod.nominated_node_name,
        reserved,
        verb,
        len(passed),
        passed[0] if passed else "",
        refusal,
    )


def gang_status(
    snapshot: ClusterSnapshot,
    group_key: str,
    attempts: GangAttempts,
    reservations: ReservationLedger,
    last: Callable[[str], DecisionRecord | None],
    context: QuotaContext,
) -> GangStatus | None:
    group = snapshot.pod_groups.get(group_key)
    members = snapshot.members_of(group_key)
    if group is None and not members:
        return None
    tree = attempts.tree(snapshot, group) if group is not None else GangTree(group_key, (group_key,), 0)
    hold = reservations.get(hold_id(tree.key))
    return GangStatus(
        group,
        group_key,
        tuple(
            _member_status(pod, reservations, last, attempts.own_charge(tree.key, pod.uid) if not placed(pod) else {})
            for pod in members
        ),
        sum(1 for pod in members if placed(pod)),
        dict(hold.charges) if hold is not None else {},
        attempts.view(tree.key, reservations.now()),
        _cluster_queues(members, context),
        tree if tree.composite else None,
    )


def _cluster_queues(members: Sequence[Pod], context: QuotaContext) -> tuple[str, ...]:
    """The ClusterQueues the members' LocalQueues name (what the group's quota is decided against)."""
    if not context.enabled:
        return ()
    return tuple(sorted({queue for pod in members if (queue := cluster_queue_of(pod, context))}))
