"""A gang's scheduling attempt as the extender follows it: one hold for the group, released at once on failure.

kube-scheduler's pod-group cycle (pkg/scheduler/schedule_one_podgroup.go) filters the gang's pods back to back,
assumes each, and when fewer than minCount fit reverts them all, writes PodGroupInitiallyScheduled=False
(reason Unschedulable) on the PodGroup and requeues the group with backoff; the extender is told of none of it.
So the service keeps, per PodGroup in an attempt: the members that reserved quota in it, the hold for the rest of
the gang's minCount (one reservation in the ledger, so no other pod takes that quota between two members), who
holds the group's claims, and when the group was last asked about. The attempt ends:

- won: minCount members are placed (bound or nominated) or the condition turns True: the pods' own reservations
  turn into usage as they bind, as any pod's;
- lost: a member refused for the group's quota, the PodGroup's condition newly False, the PodGroup gone, or no
  call for the group within the attempt window while it is not placed: the hold and the reservations of the
  members not placed are let go at once, not after the TTL.

Restart-safe: the hold is an ordinary reservation (journal), and reservations of gang members a previous process
held are adopted into attempts at the first reconcile, so the window applies to them as well.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from extender.decisions.gang.claims import group_claims_demand, pending_group_claims
from extender.decisions.gang.quota import GangNeed
from extender.decisions.pod_decision import PodDecision
from extender.decisions.quota.attribution import cluster_queue_of
from extender.decisions.quota.context import QuotaContext
from extender.decisions.quota.ledger import QuotaLedger
from extender.service.history import DecisionRecord
from extender.service.quota_view import QuotaView
from extender.state.core import Pod
from extender.state.kueue.local_queue import pod_queue_name
from extender.state.podgroups.podgroup import INITIALLY_SCHEDULED, GroupCondition, PodGroup
from extender.state.reservations import QuotaKey, Reservation, ReservationLedger
from extender.state.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

HOLD_PREFIX = "podgroup:"
RELEASE_LOST = "gang-attempt-lost"
ENDED_KEPT = 1024  # groups whose last attempt diagnostics remember
WON_PATIENCE = 5  # windows a complete attempt (minCount members reserved) may wait for its bindings to show


def hold_id(group_key: str) -> str:
    """The ledger identity of a group's hold (never a pod uid: those have no colon)."""
    return f"{HOLD_PREFIX}{group_key}"


def placed(pod: Pod) -> bool:
    return not pod.is_terminal and bool(pod.node_name or pod.nominated_node_name)


def charges_nothing(member: Pod, group: PodGroup | None) -> bool:
    """A pending member with no quota charge of its own: no claim entries but its PodGroup's own claims (charged
    once for the group) and no extended resources (which DRA may back). Members with claims of devices quota
    does not govern still count as charging: the group is over-, never under-estimated."""
    if member.is_terminal or placed(member) or member.extended_requests:
        return False
    group_claims = group.claims if group is not None else ()
    return all(ref in group_claims for ref in member.claims)


def gang_group(view: QuotaView, pod: Pod, admitted_workload: str) -> PodGroup | None:
    """The pod's PodGroup when the extender decides for the group: a gang, the pod governed by a queue, and no
    Workload Kueue admitted for it (Kueue's admission was the group's decision: its hold already covers the
    gang, decisions/quota/workload_holds.py, so it is neither refused again nor charged twice)."""
    if not view.governed or not pod_queue_name(pod.labels) or admitted_workload:
        return None
    group = view.snapshot.pod_groups.get(pod.group_key)
    return group if group is not None and group.is_gang else None


@dataclass
class Attempt:
    group_key: str
    min_count: int
    started: float
    last_call: float
    condition: GroupCondition | None  # PodGroupInitiallyScheduled when the attempt started
    members: dict[str, str] = field(default_factory=dict)  # pod uid -> pod key, reserved in this attempt
    claims_holder: str = ""  # pod uid whose reservation holds the group claims' charge
    claims: dict[QuotaKey, Fraction] = field(default_factory=dict)
    hold: dict[QuotaKey, Fraction] = field(default_factory=dict)
    last_refusal: str = ""


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


class GangAttempts:
    """Owned by the service; every method is called under the reservation ledger's lock."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._attempts: dict[str, Attempt] = {}
        self._adopted = False
        self._ended: dict[str, AttemptView] = {}  # group key -> its last attempt, as it ended (bounded below)
        self.lost = 0
        self.won = 0

    def need(
        self,
        snapshot: ClusterSnapshot,
        pod: Pod,
        group: PodGroup,
        reservations: ReservationLedger,
        context: QuotaContext,
        *,
        group_claims: bool,
    ) -> GangNeed:
        members = snapshot.members_of(group.key)
        placed_count = sum(1 for member in members if placed(member))
        in_attempt = sum(
            1
            for member in members
            if member.uid != pod.uid and not placed(member) and reservations.get(member.uid) is not None
        )
        attempt = self._attempts.get(group.key)
        claims_held: Mapping[QuotaKey, Fraction] = {}
        if (
            attempt is not None
            and attempt.claims_holder
            and attempt.claims_holder != pod.uid
            and reservations.get(attempt.claims_holder) is not None
        ):
            claims_held = attempt.claims
        demand = (
            group_claims_demand(pending_group_claims(snapshot, pod), context.resource_for_class) if group_claims else {}
        )
        held_rest = attempt.hold if attempt is not None and reservations.get(hold_id(group.key)) is not None else {}
        free_others = sum(1 for member in members if member.uid != pod.uid and charges_nothing(member, group))
        return GangNeed(
            group.key,
            group.min_count,
            placed_count,
            in_attempt,
            claims_held,
            demand,
            dict(held_rest),
            free_others=free_others,
        )

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
        for its group: the hold for the rest of the attempt is for this pod, and so are the group's claims another
        member carries."""
        need = self.need(view.snapshot, pod, group, reservations, view.context, group_claims=group_claims)
        held = self.held_for(group.key, pod.uid)
        known = view.context.cluster_queues
        return need, ledger.with_usage_deltas((q, f, r, -amount) for (q, f, r), amount in held.items() if q in known)

    def held_for(self, group_key: str, pod_uid: str) -> dict[QuotaKey, Fraction]:
        """What the ledger holds for the group that a member must not be charged against: the hold for the
        rest of the attempt, and the group claims another member's reservation carries."""
        attempt = self._attempts.get(group_key)
        if attempt is None:
            return {}
        held = dict(attempt.hold)
        if attempt.claims_holder and attempt.claims_holder != pod_uid:
            for key, amount in attempt.claims.items():
                held[key] = held.get(key, Fraction(0)) + amount
        return held

    def record(
        self,
        pod: Pod,
        group: PodGroup,
        decision: PodDecision,
        reservations: ReservationLedger,
    ) -> None:
        """After the filter of a gang member: the attempt goes on (its hold resized), or is lost."""
        gang = decision.gang
        if gang is None:
            return
        cluster_queue, reserved = decision.quota.cluster_queue, bool(decision.reservation)
        now = reservations.now()
        attempt = self._attempts.get(group.key)
        if gang.refused:
            if attempt is None:
                attempt = self._start(group, now)
            attempt.last_refusal = gang.refused
            self._lose(attempt, reservations, None, "refused for the group's quota")
            return
        if attempt is None:
            attempt = self._start(group, now)
        attempt.last_call = now
        attempt.min_count = group.min_count
        if not reserved:
            return
        attempt.members[pod.uid] = pod.key
        if gang.claims and (not attempt.claims_holder or reservations.get(attempt.claims_holder) is None):
            attempt.claims_holder, attempt.claims = pod.uid, dict(gang.claims)
        attempt.hold = dict(gang.group_hold)
        if attempt.hold:
            reservations.reserve(
                hold_id(group.key),
                hold_id(group.key),
                cluster_queue,
                attempt.hold,
                ttl_seconds=2 * self.window_seconds,
            )
        else:
            reservations.release(hold_id(group.key))

    def _start(self, group: PodGroup, now: float) -> Attempt:
        attempt = Attempt(group.key, group.min_count, now, now, group.conditions.get(INITIALLY_SCHEDULED))
        self._attempts[group.key] = attempt
        return attempt

    def settle(self, snapshot: ClusterSnapshot, reservations: ReservationLedger) -> list[tuple[Reservation, str]]:
        """End the attempts the view shows won or lost; the reservations let go, with the reason."""
        released: list[tuple[Reservation, str]] = []
        if not self._adopted and snapshot.synced:
            self._adopt(snapshot, reservations)
        now = reservations.now()
        for attempt in list(self._attempts.values()):
            members = snapshot.members_of(attempt.group_key)
            group = snapshot.pod_groups.get(attempt.group_key)
            condition = group.conditions.get(INITIALLY_SCHEDULED) if group is not None else None
            changed = condition is not None and condition != attempt.condition
            if sum(1 for member in members if placed(member)) >= attempt.min_count or (
                changed and condition is not None and condition.status == "True"
            ):
                self.won += 1
                self._end(attempt, reservations, released)
            elif group is None or (changed and condition is not None and condition.status == "False"):
                released += self._lose(attempt, reservations, snapshot, "kube-scheduler gave the attempt up")
            elif now - attempt.last_call > self._window(attempt, members, group, reservations):
                released += self._lose(attempt, reservations, snapshot, "no call for the group in the window")
        return released

    def _window(
        self, attempt: Attempt, members: list[Pod], group: PodGroup | None, reservations: ReservationLedger
    ) -> float:
        """How long the attempt may go without a call. Once minCount members passed our filter and hold their
        reservations (or need none), kube-scheduler has likely placed the group and is binding it (Permit,
        PreBind): those pods show as nominated or bound soon, and letting their quota go before would open a
        window for another pod to take it. Such an attempt gets WON_PATIENCE windows; one still short of
        minCount, one."""
        reserved = sum(1 for member in members if not placed(member) and reservations.get(member.uid) is not None)
        placed_count = sum(1 for member in members if placed(member))
        free = sum(1 for member in members if charges_nothing(member, group))
        complete = reserved + placed_count + free >= attempt.min_count
        return self.window_seconds * (WON_PATIENCE if complete else 1)

    def _end(self, attempt: Attempt, reservations: ReservationLedger, released: list[tuple[Reservation, str]]) -> None:
        hold = reservations.release(hold_id(attempt.group_key))
        if hold is not None:
            released.append((hold, "gang-attempt-won"))
        self._close(attempt, reservations.now(), "won")

    def _lose(
        self, attempt: Attempt, reservations: ReservationLedger, snapshot: ClusterSnapshot | None, why: str
    ) -> list[tuple[Reservation, str]]:
        """Let go of the hold and of the members' reservations, except members already placed."""
        released: list[tuple[Reservation, str]] = []
        self.lost += 1
        members = dict(attempt.members)
        if snapshot is not None:
            for member in snapshot.members_of(attempt.group_key):
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

    def _adopt(self, snapshot: ClusterSnapshot, reservations: ReservationLedger) -> None:
        """Reservations a previous process held for gang members (and group holds) join attempts that start now,
        so a lost attempt's reservations go after the window, not after their TTL."""
        self._adopted = True
        now = reservations.now()
        for reservation in reservations.all():
            if reservation.pod_uid.startswith(HOLD_PREFIX):
                group_key = reservation.pod_uid[len(HOLD_PREFIX) :]
                pod_uid = ""
            else:
                pod = snapshot.pods.get(reservation.pod_key)
                group_key = pod.group_key if pod is not None else ""
                pod_uid = reservation.pod_uid
            group = snapshot.pod_groups.get(group_key) if group_key else None
            if group is None or not group.is_gang:
                continue
            attempt = self._attempts.get(group_key) or self._start(group, now)
            if pod_uid:
                attempt.members[pod_uid] = reservation.pod_key
            else:
                attempt.hold = dict(reservation.charges)

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
            dict(attempt.hold),
            dict(attempt.claims),
            attempt.last_refusal,
            outcome,
        )


@dataclass(frozen=True, slots=True)
class MemberStatus:
    pod_key: str
    state: str  # bound, nominated, pending, finished
    node: str  # bound or nominated node
    reserved: Mapping[QuotaKey, Fraction]
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


def _member_status(
    pod: Pod, reservations: ReservationLedger, last: Callable[[str], DecisionRecord | None]
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
        dict(reservation.charges) if reservation is not None else {},
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
    hold = reservations.get(hold_id(group_key))
    return GangStatus(
        group,
        group_key,
        tuple(_member_status(pod, reservations, last) for pod in members),
        sum(1 for pod in members if placed(pod)),
        dict(hold.charges) if hold is not None else {},
        attempts.view(group_key, reservations.now()),
        _cluster_queues(members, context),
    )


def _cluster_queues(members: list[Pod], context: QuotaContext) -> tuple[str, ...]:
    """The ClusterQueues the members' LocalQueues name (what the group's quota is decided against)."""
    if not context.enabled:
        return ()
    return tuple(sorted({queue for pod in members if (queue := cluster_queue_of(pod, context))}))
