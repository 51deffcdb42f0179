"""bench/e2e_bench.py's split of kube-scheduler's scheduling algorithm into its in-tree phases and the rest (where
an extender's calls are), read from kube-scheduler's own /metrics text: it tells whether a slower cycle is the
calls or kube-scheduler's plugins working more."""

from __future__ import annotations

import pytest

from bench.e2e_bench import phase_split, phases_per_pod, scheduler_totals

PHASE_SUM = "scheduler_framework_extension_point_duration_seconds_sum"


def metrics_text(algorithm: float, attempts: int, errors: int, phases: dict[tuple[str, str], float]) -> str:
    """kube-scheduler v1.37.2's /metrics in the shape it writes them (component-base, text format; buckets left
    out), with `phases` keyed by (extension point, status)."""
    lines = [
        "# TYPE scheduler_scheduling_algorithm_duration_seconds histogram",
        f"scheduler_scheduling_algorithm_duration_seconds_sum {algorithm}",
        f"scheduler_scheduling_algorithm_duration_seconds_count {attempts}",
        f'scheduler_schedule_attempts_total{{profile="extender",result="error"}} {errors}',
        f'scheduler_schedule_attempts_total{{profile="extender",result="scheduled"}} {attempts - errors}',
    ]
    for (point, status), seconds in phases.items():
        lines.append(f'{PHASE_SUM}{{extension_point="{point}",profile="extender",status="{status}"}} {seconds}')
    lines.append(f'{PHASE_SUM.replace("_sum", "_count")}{{extension_point="Filter",profile="extender"}} {attempts}')
    return "\n".join(lines) + "\n"


BEFORE = metrics_text(
    1.5,
    100,
    0,
    {
        ("PreFilter", "Success"): 0.1,
        ("Filter", "Success"): 1.0,
        ("Filter", "Unschedulable"): 0.05,
        ("PreScore", "Success"): 0.02,
        ("Score", "Success"): 0.2,
        ("PreBind", "Success"): 9.0,
    },
)
AFTER = metrics_text(
    5.5,
    300,
    2,
    {
        ("PreFilter", "Success"): 0.3,
        ("Filter", "Success"): 3.4,
        ("Filter", "Unschedulable"): 0.05,
        ("PreScore", "Success"): 0.02,
        ("Score", "Success"): 0.6,
        ("PreBind", "Success"): 30.0,
    },
)


def test_totals_read_the_algorithm_attempts_and_in_tree_phases() -> None:
    totals = scheduler_totals(BEFORE)
    assert totals.algorithm_seconds == 1.5
    assert totals.attempts == 100
    assert totals.by_result == {"error": 0.0, "scheduled": 100.0}
    # Filter's statuses add up; PreBind (the binding cycle, not the algorithm) and the count lines are left out.
    assert totals.phase_seconds == pytest.approx({"PreFilter": 0.1, "Filter": 1.05, "PreScore": 0.02, "Score": 0.2})


def test_a_rounds_phases_per_attempt_and_the_rest() -> None:
    spent = phases_per_pod(scheduler_totals(BEFORE), scheduler_totals(AFTER))
    # 200 attempts; the algorithm took 4 s of which the phases 0.2 + 2.4 + 0 + 0.4 s: the rest is 1 s.
    assert spent == pytest.approx({"PreFilter": 1.0, "Filter": 12.0, "PreScore": 0.0, "Score": 2.0, "rest": 5.0})


def test_a_round_without_attempts_has_no_split() -> None:
    assert phases_per_pod(scheduler_totals(BEFORE), scheduler_totals(BEFORE)) == {}


def test_the_split_compares_medians_of_rounds() -> None:
    without = [
        {"PreFilter": 1.0, "Filter": 20.0, "PreScore": 0.1, "Score": 2.0, "rest": 0.5},
        {"PreFilter": 1.0, "Filter": 30.0, "PreScore": 0.1, "Score": 3.0, "rest": 0.7},
        {"PreFilter": 1.0, "Filter": 25.0, "PreScore": 0.1, "Score": 2.5, "rest": 0.6},
    ]
    with_it = [{**spent, "Filter": spent["Filter"] + 4.0, "rest": spent["rest"] + 3.0} for spent in without]
    line = phase_split(without, [*with_it, {}])  # a round without attempts counts for nothing
    assert line == (
        "filter plugins 26.00 / 30.00 (+4.00); score plugins 2.60 / 2.60 (+0.00); "
        "the rest (the extender's calls) 0.60 / 3.60 (+3.00)"
    )
