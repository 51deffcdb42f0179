from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.decisions.quota.fit import Fit, FitOutcome, worst_fit
from extender.decisions.quota.ledger import QuotaLedger
from extender.decisions.quota.tree import QuotaTree
from extender.state.kueue.cluster_queue import ClusterQueue, StopPolicy
from extender.state.kueue.cohort import Cohort
from extender.state.kueue.quotas import FlavorQuotas, ResourceGroup, ResourceQuota
from tests.support.quota import (
    cluster_queue_usage,
    cohort_available,
    cohort_local_quota,
    cohort_names,
    cohort_quota,
    cohort_subtree_quota,
    cohort_usage,
    cyclic_cohorts,
    fits_all,
    implicit_cohorts,
    with_usage_delta,
)

F = "a100"  # flavor used by most cases
R = "gpu"  # resource used by most cases


def _groups(quotas):
    """{flavor: (nominal, borrowingLimit, lendingLimit)} -> one resource group covering R."""
    if not quotas:
        return ()
    flavors = []
    for flavor, entry in quotas.items():
        nominal, borrowing, lending = (*entry, None, None)[:3]
        flavors.append(
            FlavorQuotas(
                flavor,
                (
                    ResourceQuota(
                        R,
                        Fraction(nominal),
                        None if borrowing is None else Fraction(borrowing),
                        None if lending is None else Fraction(lending),
                    ),
                ),
            )
        )
    return (ResourceGroup((R,), tuple(flavors)),)


def cq(name, cohort=None, nominal=None, borrowing=None, lending=None, *, stop=StopPolicy.NONE, quotas=None):
    if quotas is None:
        quotas = {} if nominal is None else {F: (nominal, borrowing, lending)}
    return ClusterQueue(name, cohort_name=cohort, stop_policy=stop, resource_groups=_groups(quotas))


def model_cohort(name, parent=None, nominal=None, borrowing=None, lending=None):
    """The parsed Cohort model itself (testkit.scenarios.cohort builds the manifest)."""
    quotas = {} if nominal is None else {F: (nominal, borrowing, lending)}
    return Cohort(name, parent_name=parent, resource_groups=_groups(quotas))


def usage(**amounts):
    return {(queue, F, R): Fraction(amount) for queue, amount in amounts.items()}


# --- hand-computed cases ------------------------------------------------------------------------------------
# Each case: (ClusterQueues, Cohorts, usage, {queue: (available, potentialAvailable)}).

CASES = {
    # A has no cohort: available = nominal - usage = 8 - 3 = 5; potential = nominal = 8.
    "no-cohort": ([cq("A", None, 8)], [], usage(A=3), {"A": (5, 8)}),
    # Implicit cohort c (no Cohort object), no limits so localQuota = 0 everywhere.
    # subtree(c) = (8 - 0) + (4 - 0) = 12; usage(c) = max(0, 2 - 0) + 0 = 2; available(c) = 12 - 2 = 10.
    # available(A) = max(0, 0 - 2) + available(c) = 10; available(B) = 0 + 10 = 10.
    # potential(A) = potential(B) = localQuota 0 + potential(c) 12 = 12.
    "cohort-borrowing": (
        [cq("A", "c", 8), cq("B", "c", 4)],
        [],
        usage(A=2),
        {"A": (10, 12), "B": (10, 12)},
    ),
    # A: nominal 8, borrowingLimit 2, usage 6; B: nominal 4. subtree(c) = 12, usage(c) = 6, available(c) = 6.
    # cap(A) = (subtree 8 - local 0) - max(0, 6 - 0) + 2 = 4 -> available(A) = 0 + min(6, 4) = 4 (8 + 2 - 6).
    # available(B) = 0 + 6 = 6. potential(A) = min(8 + 2, 0 + 12) = 10; potential(B) = 12.
    "borrowing-limit": (
        [cq("A", "c", 8, borrowing=2), cq("B", "c", 4)],
        [],
        usage(A=6),
        {"A": (4, 10), "B": (6, 12)},
    ),
    # A: nominal 8, lendingLimit 2 -> localQuota(A) = max(0, 8 - 2) = 6. B: nominal 4, usage 4.
    # subtree(c) = (8 - 6) + (4 - 0) = 6; usage(c) = max(0, 0 - 6) + max(0, 4 - 0) = 4; available(c) = 2.
    # available(A) = max(0, 6 - 0) + 2 = 8; available(B) = max(0, 0 - 4) + 2 = 2 (only A's lendable 2).
    # potential(A) = 6 + 6 = 12; potential(B) = 0 + 6 = 6 (4 own + 2 lent by A).
    "lending-limit": (
        [cq("A", "c", 8, lending=2), cq("B", "c", 4)],
        [],
        usage(B=4),
        {"A": (8, 12), "B": (2, 6)},
    ),
    # Same, after B borrowed all A lends: usage B = 6. usage(c) = 6, available(c) = 0.
    # available(A) = max(0, 6 - 0) + 0 = 6: the non-lendable part stays A's. available(B) = 0 + 0 = 0.
    "lending-limit-exhausted": (
        [cq("A", "c", 8, lending=2), cq("B", "c", 4)],
        [],
        usage(B=6),
        {"A": (6, 12), "B": (0, 6)},
    ),
    # Hierarchy: Cohort org (own nominal 4) <- Cohort team (parent org; own nominal 0, lendingLimit 5).
    # A (team, 6), B (team, 4), C (org, nominal 2, borrowingLimit 3). Usage A=7, C=1.
    # subtree(team) = 0 + 6 + 4 = 10; localQuota(team) = max(0, 10 - 5) = 5.
    # subtree(org) = 4 + (10 - 5) + (2 - 0) = 11.
    # usage(team) = 7 + 0 = 7; usage(org) = max(0, 7 - 5) + max(0, 1 - 0) = 3; available(org) = 11 - 3 = 8.
    # available(team) = max(0, 5 - 7) + 8 = 8 (team has no borrowingLimit) -> available(A) = available(B) = 8.
    # cap(C) = (2 - 0) - max(0, 1 - 0) + 3 = 4 -> available(C) = 0 + min(8, 4) = 4.
    # potential(team) = 5 + potential(org) 11 = 16 = every quota in the tree (4 + 6 + 4 + 2);
    # potential(A) = potential(B) = 0 + 16 = 16; potential(C) = min(2 + 3, 0 + 11) = 5.
    "hierarchical-with-cohort-quota": (
        [cq("A", "team", 6), cq("B", "team", 4), cq("C", "org", 2, borrowing=3)],
        [model_cohort("org", nominal=4), model_cohort("team", "org", nominal=0, lending=5)],
        usage(A=7, C=1),
        {"A": (8, 16), "B": (8, 16), "C": (4, 5)},
    ),
    # The team Cohort's lendingLimit protects its subtree from C (no borrowingLimit now). Usage C=1.
    # subtree(org) = 4 + (10 - 5) + 2 = 11; usage(org) = 0 + 1 = 1; available(org) = 10.
    # available(C) = 0 + 10 = 10: C can reach 11 in total, never team's 5 kept (16 - 5 = 11).
    # available(A) = max(0, 0 - 0) + available(team) = max(0, 5 - 0) + 10 = 15.
    # (Had localQuota been computed only for ClusterQueues, available(C) would be 16 - 1 = 15.)
    "cohort-lending-limit-protects-subtree": (
        [cq("A", "team", 6), cq("B", "team", 4), cq("C", "org", 2)],
        [model_cohort("org", nominal=4), model_cohort("team", "org", nominal=0, lending=5)],
        usage(C=1),
        {"A": (15, 16), "B": (15, 16), "C": (10, 11)},
    ),
    # A cohort's borrowingLimit caps what its whole subtree takes from above.
    # root (own 10) <- mid (parent root, own 0, borrowingLimit 3) <- A (mid, 2). Usage A=1.
    # subtree(mid) = 0 + 2 = 2; subtree(root) = 10 + 2 = 12. usage(mid) = 1, usage(root) = 1.
    # available(root) = 11. cap(mid) = (2 - 0) - max(0, 1 - 0) + 3 = 4 -> available(mid) = 0 + min(11, 4) = 4.
    # available(A) = 0 + 4 = 4. potential(mid) = min(2 + 3, 0 + 12) = 5; potential(A) = 0 + 5 = 5.
    "cohort-borrowing-limit": (
        [cq("A", "mid", 2)],
        [model_cohort("root", nominal=10), model_cohort("mid", "root", nominal=0, borrowing=3)],
        usage(A=1),
        {"A": (4, 5)},
    ),
    # Over-admission without cohort (quota shrank): available = max(0, 4 - 6) = 0; potential = 4.
    "usage-exceeds-nominal": ([cq("A", None, 4)], [], usage(A=6), {"A": (0, 4)}),
    # Over-admission in a cohort: A (2) uses 5, B (2, lendingLimit 0 -> localQuota 2) uses 0.
    # subtree(c) = (2 - 0) + (2 - 2) = 2; usage(c) = 5 + 0 = 5; available(c) = -3 (not clamped inside).
    # available(B) = max(0, 2 - 0) + (-3) = -1 -> clamped 0: Kueue lets the debt eat even guaranteed quota.
    # available(A) = max(0, 0 - 5) + (-3) -> 0. potential(A) = 0 + 2 = 2; potential(B) = 2 + 2 = 4.
    "usage-exceeds-nominal-in-cohort": (
        [cq("A", "c", 2), cq("B", "c", 2, lending=0)],
        [],
        usage(A=5),
        {"A": (0, 2), "B": (0, 4)},
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_available_and_potential(case):
    queues, cohorts, used, expected = case
    ledger = QuotaLedger.from_usage(QuotaTree(queues, cohorts), used)
    for queue, (available, potential) in expected.items():
        assert ledger.available(queue, F, R) == available, queue
        assert ledger.potential_available(queue, F, R) == potential, queue


def test_hierarchical_internals():
    # Same tree as "hierarchical-with-cohort-quota"; see the computation there.
    queues, cohorts, used, _ = CASES["hierarchical-with-cohort-quota"]
    tree = QuotaTree(queues, cohorts)
    ledger = QuotaLedger.from_usage(tree, used)
    assert cohort_subtree_quota(tree, "team", F, R) == 10
    assert cohort_local_quota(tree, "team", F, R) == 5
    assert cohort_subtree_quota(tree, "org", F, R) == 11
    assert cohort_usage(tree, ledger, "team", F, R) == 7
    assert cohort_usage(tree, ledger, "org", F, R) == 3
    assert cohort_available(tree, ledger, "org", F, R) == 8
    assert cohort_available(tree, ledger, "team", F, R) == 8
    assert tree.cohort_path("A") == ("team", "org")
    assert tree.parent_cohort("C") == "org"
    assert implicit_cohorts(tree) == frozenset()


# --- fits ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "outcome", "borrowing"),
    [
        # borrowing-limit case: A nominal 8, usage 6, available 4, potential 10.
        (2, FitOutcome.FITS, 0),  # 6 + 2 = 8 <= nominal 8
        (3, FitOutcome.FITS_BY_BORROWING, 1),  # 6 + 3 = 9 > 8: borrows 1
        (4, FitOutcome.FITS_BY_BORROWING, 2),  # exactly available
        (5, FitOutcome.NEEDS_PREEMPTION, 3),  # > available 4, <= potential 10
        (10, FitOutcome.NEEDS_PREEMPTION, 8),  # == potential
        (11, FitOutcome.NEVER_FITS, 9),  # > potential 10
        (0, FitOutcome.FITS, 0),
    ],
)
def test_fits_outcomes(request_, outcome, borrowing):
    queues, cohorts, used, _ = CASES["borrowing-limit"]
    fit = QuotaLedger.from_usage(QuotaTree(queues, cohorts), used).fits("A", F, R, request_)
    assert fit.outcome is outcome
    assert (fit.requested, fit.usage, fit.nominal, fit.available, fit.potential_available) == (
        request_,
        6,
        8,
        4,
        10,
    )
    assert fit.borrowing == borrowing
    assert fit.borrowing_limit == 2
    assert fit.lending_limit is None
    assert fit.cohort == "c"
    assert fit.admissible is (outcome in (FitOutcome.FITS, FitOutcome.FITS_BY_BORROWING))
    if outcome is FitOutcome.NEEDS_PREEMPTION:
        assert fit.shortfall == request_ - 4
        assert "more needed" in fit.reason
    if outcome is FitOutcome.NEVER_FITS:
        assert "maximum capacity (10)" in fit.reason


def test_fits_without_cohort_never_borrows():
    # No cohort: available = 8 - 3 = 5, potential 8.
    ledger = QuotaLedger.from_usage(QuotaTree([cq("A", None, 8)]), usage(A=3))
    assert ledger.fits("A", F, R, 5).outcome is FitOutcome.FITS
    assert ledger.fits("A", F, R, 6).outcome is FitOutcome.NEEDS_PREEMPTION
    assert ledger.fits("A", F, R, 9).outcome is FitOutcome.NEVER_FITS


def test_not_covered():
    ledger = QuotaLedger.from_usage(QuotaTree([cq("A", None, quotas={F: (8,), "h100": (2,)})]))
    fit = ledger.fits("A", "t4", R, 1)
    assert fit.outcome is FitOutcome.NOT_COVERED
    assert "not covered" in fit.reason
    assert ledger.fits("A", F, "memory", 1).outcome is FitOutcome.NOT_COVERED
    assert ledger.fits("A", "t4", R, 0).outcome is FitOutcome.FITS  # nothing to charge
    assert ledger.fits("A", "h100", R, 2).outcome is FitOutcome.FITS


def test_stopped_queue_is_inactive_but_still_lends():
    # A is held; its nominal 4 still sits in cohort c: available(B) = 0 + (4 + 0 - 0) = 4.
    tree = QuotaTree([cq("A", "c", 4, stop=StopPolicy.HOLD), cq("B", "c", 0)])
    ledger = QuotaLedger.from_usage(tree)
    assert ledger.fits("A", F, R, 1).outcome is FitOutcome.INACTIVE
    assert "stopPolicy Hold" in ledger.fits("A", F, R, 1).reason
    assert ledger.fits("B", F, R, 4).outcome is FitOutcome.FITS_BY_BORROWING
    assert tree.inactive_reason("B") is None


def test_unknown_queue():
    tree = QuotaTree([cq("A", None, 1)])
    fit = QuotaLedger.from_usage(tree).fits("nope", F, R, 1)
    assert fit.outcome is FitOutcome.INACTIVE
    assert "not found" in fit.reason
    with pytest.raises(KeyError):
        QuotaLedger.from_usage(tree).available("nope", F, R)


def test_implicit_cohort_has_no_quota_of_its_own():
    # Cohorts "ghost" (named by A) and "ghost-parent" (named by Cohort mid) have no objects.
    tree = QuotaTree([cq("A", "ghost", 3), cq("B", "mid", 1)], [model_cohort("mid", "ghost-parent")])
    assert implicit_cohorts(tree) == {"ghost", "ghost-parent"}
    assert cohort_subtree_quota(tree, "ghost", F, R) == 3
    assert cohort_quota(tree, "ghost", F, R) is None
    assert cohort_subtree_quota(tree, "ghost-parent", F, R) == 1
    assert QuotaLedger.from_usage(tree).available("B", F, R) == 1


def test_cohort_cycles_make_queues_inactive_without_hanging():
    # x -> y -> x is a cycle; z -> x leads into it (Kueue's HasCycle is true for z too); s -> s loops.
    tree = QuotaTree(
        [cq("A", "x", 2), cq("B", "z", 2), cq("S", "s", 2), cq("OK", "root", 2)],
        [
            model_cohort("x", "y"),
            model_cohort("y", "x"),
            model_cohort("z", "x"),
            model_cohort("s", "s"),
            model_cohort("root"),
        ],
    )
    assert cyclic_cohorts(tree) == {"x", "y", "z", "s"}
    ledger = QuotaLedger.from_usage(tree, usage(A=1, B=1, OK=1))
    for queue in ("A", "B", "S"):
        fit = ledger.fits(queue, F, R, 1)
        assert fit.outcome is FitOutcome.INACTIVE
        assert "cycle" in fit.reason
        # Disconnected for arithmetic: only its own quota.
        assert ledger.potential_available(queue, F, R) == 2
    assert tree.parent_cohort("A") is None
    assert ledger.fits("OK", F, R, 1).outcome is FitOutcome.FITS


def test_usage_outside_quota_still_charges_the_cohort():
    # A has no quota for a100 any more but still runs 3 there; Kueue charges it all to cohort c.
    # subtree(c) = 0 (A) + 5 (B) = 5; usage(c) = 3 -> available(B) = 0 + 2 = 2.
    tree = QuotaTree([cq("A", "c", quotas={"h100": (1,)}), cq("B", "c", 5)])
    ledger = QuotaLedger.from_usage(tree, usage(A=3))
    assert cohort_usage(tree, ledger, "c", F, R) == 3
    assert ledger.available("B", F, R) == 2
    assert ledger.fits("A", F, R, 1).outcome is FitOutcome.NOT_COVERED


def test_fits_all_and_worst_fit():
    queue = ClusterQueue(
        "A",
        resource_groups=(
            ResourceGroup(
                ("cpu", R),
                (FlavorQuotas(F, (ResourceQuota("cpu", Fraction(4)), ResourceQuota(R, Fraction(2)))),),
            ),
        ),
    )
    ledger = QuotaLedger.from_usage(QuotaTree([queue]), {("A", F, "cpu"): Fraction(3)})
    fits = fits_all(ledger, "A", F, {"cpu": Fraction(1, 2), R: 3})
    assert [fit.outcome for fit in fits] == [FitOutcome.FITS, FitOutcome.NEVER_FITS]
    assert worst_fit(fits) is fits[1]
    assert worst_fit([]) is None
    with pytest.raises(ValueError, match="negative request"):
        ledger.fits("A", F, R, -1)


def test_fit_defaults():
    fit = Fit(FitOutcome.FITS, "A", F, R, Fraction(1))
    assert fit.admissible
    assert fit.borrowing == 1  # nominal defaults to 0


# --- ledger deltas ------------------------------------------------------------------------------------------


def test_delta_matches_rebuild_and_is_persistent():
    queues, cohorts, used, _ = CASES["hierarchical-with-cohort-quota"]
    tree = QuotaTree(queues, cohorts)
    before = QuotaLedger.from_usage(tree, used)
    after = with_usage_delta(before, "B", F, R, 3)
    rebuilt = QuotaLedger.from_usage(tree, {**used, ("B", F, R): Fraction(3)})
    for queue in ("A", "B", "C"):
        assert after.available(queue, F, R) == rebuilt.available(queue, F, R)
        assert after.usage(queue, F, R) == rebuilt.usage(queue, F, R)
    for name in ("team", "org"):
        assert cohort_usage(tree, after, name, F, R) == cohort_usage(tree, rebuilt, name, F, R)
    assert before.usage("B", F, R) == 0  # the original is untouched
    assert cluster_queue_usage(tree, after) == cluster_queue_usage(tree, rebuilt)
    released = with_usage_delta(with_usage_delta(after, "B", F, R, -3), "A", F, R, -7)
    assert cohort_usage(tree, released, "org", F, R) == 1
    assert with_usage_delta(before, "A", F, R, 0) is before


def test_delta_refuses_negative_usage_and_unknown_queue():
    ledger = QuotaLedger.from_usage(QuotaTree([cq("A", None, 2)]), usage(A=1))
    with pytest.raises(ValueError, match="negative"):
        with_usage_delta(ledger, "A", F, R, -2)
    with pytest.raises(KeyError):
        with_usage_delta(ledger, "B", F, R, 1)
    with pytest.raises(ValueError, match="negative usage"):
        QuotaLedger.from_usage(QuotaTree([cq("A", None, 2)]), usage(A=-1))


def test_ledger_ignores_unknown_queues():
    tree = QuotaTree([cq("A", None, 2)])
    assert cluster_queue_usage(tree, QuotaLedger.from_usage(tree, usage(A=1, gone=5))) == usage(A=1)


def test_many_deltas_compact_and_stay_exact():
    queues = [cq(f"q{i}", "c", 3) for i in range(10)]
    tree = QuotaTree(queues)
    ledger = QuotaLedger.from_usage(tree)
    total = {}
    for step in range(300):
        queue = f"q{step % 10}"
        delta = Fraction(1, 3) if step % 4 else Fraction(-1, 3) if total.get(queue) else Fraction(1, 7)
        ledger = with_usage_delta(ledger, queue, F, R, delta)
        total[queue] = total.get(queue, 0) + delta
    rebuilt = QuotaLedger.from_usage(tree, {(queue, F, R): amount for queue, amount in total.items()})
    assert cohort_usage(tree, ledger, "c", F, R) == cohort_usage(tree, rebuilt, "c", F, R) == sum(total.values())
    assert ledger.available("q0", F, R) == rebuilt.available("q0", F, R)


def test_duplicate_objects_are_rejected():
    with pytest.raises(ValueError, match="duplicate ClusterQueue"):
        QuotaTree([cq("A"), cq("A")])
    with pytest.raises(ValueError, match="duplicate Cohort"):
        QuotaTree([], [model_cohort("c"), model_cohort("c")])


# --- a literal transliteration of Kueue's resource_node.go, for differential testing ------------------------


class Reference:
    """Recursive, unoptimised: SubtreeQuota/usage recomputed from scratch on every call, as in the Go code."""

    def __init__(self, queues, cohorts, used):
        self.queues = {q.name: q for q in queues}
        self.cohorts = {c.name: c for c in cohorts}
        self.used = used
        for queue in queues:  # implicit cohorts
            if queue.cohort_name:
                self.cohorts.setdefault(queue.cohort_name, Cohort(queue.cohort_name))
        for c in list(self.cohorts.values()):
            if c.parent_name:
                self.cohorts.setdefault(c.parent_name, Cohort(c.parent_name))

    def parent(self, node):
        kind, name = node
        parent = self.queues[name].cohort_name if kind == "cq" else self.cohorts[name].parent_name
        return ("cohort", parent) if parent else None

    def children(self, name):
        kids = [("cohort", c.name) for c in self.cohorts.values() if c.parent_name == name]
        return kids + [("cq", q.name) for q in self.queues.values() if q.cohort_name == name]

    def quota(self, node):
        kind, name = node
        obj = self.queues[name] if kind == "cq" else self.cohorts[name]
        return obj.quota(F, R)

    def subtree(self, node):
        quota = self.quota(node)
        own = quota.nominal_quota if quota else Fraction(0)
        if node[0] == "cq":
            return own
        return own + sum((self.subtree(c) - self.local(c) for c in self.children(node[1])), Fraction(0))

    def local(self, node):
        quota = self.quota(node)
        if quota is None or quota.lending_limit is None:
            return Fraction(0)
        return max(Fraction(0), self.subtree(node) - quota.lending_limit)

    def usage(self, node):
        if node[0] == "cq":
            return self.used.get((node[1], F, R), Fraction(0))
        return sum((max(Fraction(0), self.usage(c) - self.local(c)) for c in self.children(node[1])), Fraction(0))

    def available(self, node):
        parent = self.parent(node)
        if parent is None:
            return self.subtree(node) - self.usage(node)
        parent_available = self.available(parent)
        quota = self.quota(node)
        if quota is not None and quota.borrowing_limit is not None:
            lq = self.local(node)
            stored = self.subtree(node) - lq
            used = max(Fraction(0), self.usage(node) - lq)
            parent_available = min(stored - used + quota.borrowing_limit, parent_available)
        return max(Fraction(0), self.local(node) - self.usage(node)) + parent_available

    def potential(self, node):
        parent = self.parent(node)
        if parent is None:
            return self.subtree(node)
        value = self.local(node) + self.potential(parent)
        quota = self.quota(node)
        if quota is not None and quota.borrowing_limit is not None:
            value = min(self.subtree(node) + quota.borrowing_limit, value)
        return value


# --- random trees -------------------------------------------------------------------------------------------

amounts = st.integers(min_value=0, max_value=8).map(Fraction)
maybe_limit = st.none() | amounts


@st.composite
def forests(draw):
    """Acyclic cohort forests (parents drawn from earlier cohorts, or implicit names) and queues in them."""
    cohort_names = [f"co{i}" for i in range(draw(st.integers(0, 5)))]
    cohorts = []
    for index, name in enumerate(cohort_names):
        parent = draw(st.sampled_from([None, "implicit-root", *cohort_names[:index]]))
        quota = None
        if draw(st.booleans()):
            borrowing = draw(maybe_limit) if parent else None
            lending = draw(maybe_limit) if parent else None
            quota = (draw(amounts), borrowing, lending)
        cohorts.append(
            Cohort(name, parent, _groups({F: quota}) if quota else ()),
        )
    queues = []
    for index in range(draw(st.integers(1, 6))):
        parent = draw(st.sampled_from([None, "implicit-root", *cohort_names]))
        nominal = draw(amounts)
        borrowing = draw(maybe_limit) if parent else None
        lending = draw(st.none() | st.integers(0, int(nominal)).map(Fraction)) if parent else None
        queues.append(cq(f"q{index}", parent, nominal, borrowing, lending))
    return queues, cohorts


@pytest.mark.slow  # 200 generated cohort forests
@pytest.mark.oracle  # differential: against a transliteration of Kueue's own code
@settings(max_examples=200, deadline=None)
@given(forests(), st.data())
def test_matches_reference_transliteration(forest, data):
    queues, cohorts = forest
    used = {
        (q.name, F, R): data.draw(st.integers(0, 12).map(Fraction), label=f"usage {q.name}")
        for q in queues
        if data.draw(st.booleans())
    }
    reference = Reference(queues, cohorts, used)
    tree = QuotaTree(queues, cohorts)
    ledger = QuotaLedger.from_usage(tree, used)
    for queue in queues:
        node = ("cq", queue.name)
        assert ledger.available(queue.name, F, R) == max(Fraction(0), reference.available(node))
        assert ledger.potential_available(queue.name, F, R) == reference.potential(node)
    for name in reference.cohorts:
        node = ("cohort", name)
        assert cohort_usage(tree, ledger, name, F, R) == reference.usage(node)
        assert cohort_subtree_quota(tree, name, F, R) == reference.subtree(node)
        assert cohort_available(tree, ledger, name, F, R) == reference.available(node)


def _root_of(tree, queue):
    path = tree.cohort_path(queue)
    return path[-1] if path else None


@pytest.mark.slow  # 300 generated forests with up to 40 steps each
@settings(max_examples=300, deadline=None)
@given(
    forests(),
    st.lists(st.tuples(st.integers(0, 5), st.integers(-2, 4)), min_size=1, max_size=40),
)
def test_consuming_available_never_breaks_kueue_invariants(forest, steps):
    """Queues take (a share of) their `available`, one at a time, re-asking after each step.

    Negative shares release part of a queue's own usage. After every step:
    - a root cohort's usage stays within its SubtreeQuota, and the queues below it use at most the sum of
      every nominalQuota in the tree;
    - no queue exceeds nominal + borrowingLimit (nominal alone without a cohort);
    - lendingLimit holds: whatever sits outside a node X (queue or cohort with a lendingLimit) uses at most
      the rest of the tree's nominal quota plus what X lends; a queue can always reach its non-lendable quota.
    """
    queues, cohorts = forest
    tree = QuotaTree(queues, cohorts)
    ledger = QuotaLedger.from_usage(tree)
    names = [q.name for q in queues]
    by_name = {q.name: q for q in queues}

    def nominal_total(queue_names, cohort_names):
        total = sum((tree.nominal(q, F, R) for q in queue_names), Fraction(0))
        for name in cohort_names:
            own = cohort_quota(tree, name, F, R)
            total += own.nominal_quota if own else 0
        return total

    def descendants(cohort_name):
        """Queues and cohorts in the subtree of cohort_name (itself included)."""
        cohorts_in = {cohort_name}
        changed = True
        while changed:
            changed = False
            for c in cohorts:
                if c.parent_name in cohorts_in and c.name not in cohorts_in:
                    cohorts_in.add(c.name)
                    changed = True
        queues_in = {q.name for q in queues if q.cohort_name in cohorts_in}
        return queues_in, cohorts_in

    for index, share in steps:
        queue = names[index % len(names)]
        if share >= 0:
            amount = ledger.available(queue, F, R) * share / 4
            fit = ledger.fits(queue, F, R, amount)
            assert fit.admissible, fit
        else:
            amount = -ledger.usage(queue, F, R) * (-share) / 2
            amount = max(amount, -ledger.usage(queue, F, R))
        ledger = with_usage_delta(ledger, queue, F, R, amount)

        roots = {_root_of(tree, q) for q in names} - {None}
        for root in roots:
            queues_in, cohorts_in = descendants(root)
            assert cohort_usage(tree, ledger, root, F, R) <= cohort_subtree_quota(tree, root, F, R)
            used = sum((ledger.usage(q, F, R) for q in queues_in), Fraction(0))
            assert used <= nominal_total(queues_in, cohorts_in)
            # lending limits of cohorts in this tree
            for name in cohorts_in:
                own = cohort_quota(tree, name, F, R)
                if own is None or own.lending_limit is None:
                    continue
                inside_queues, inside_cohorts = descendants(name)
                outside = queues_in - inside_queues
                outside_used = sum((ledger.usage(q, F, R) for q in outside), Fraction(0))
                rest = nominal_total(queues_in - inside_queues, cohorts_in - inside_cohorts)
                assert outside_used <= rest + own.lending_limit
        for name in names:
            quota = by_name[name].quota(F, R)
            used = ledger.usage(name, F, R)
            parent = tree.parent_cohort(name)
            if parent is None:
                assert used <= quota.nominal_quota
            elif quota.borrowing_limit is not None:
                assert used <= quota.nominal_quota + quota.borrowing_limit
            if parent is not None and quota.lending_limit is not None:
                queues_in, cohorts_in = descendants(_root_of(tree, name))
                others = sum((ledger.usage(q, F, R) for q in queues_in - {name}), Fraction(0))
                rest = nominal_total(queues_in - {name}, cohorts_in)
                assert others <= rest + quota.lending_limit
                guaranteed = quota.nominal_quota - quota.lending_limit
                assert used + ledger.available(name, F, R) >= guaranteed
        for name in cohort_names(tree):  # no debt anywhere: consumption never over-admits
            assert cohort_available(tree, ledger, name, F, R) >= 0
