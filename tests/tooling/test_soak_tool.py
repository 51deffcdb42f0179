"""tools/soak.py: runs planned with distinct seeds, failures kept with their output, reports added up, the
reliability table rewritten between its markers."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from tools import soak


def test_runs_have_distinct_seeds_and_every_test_comes_early() -> None:
    args = argparse.Namespace(first_seed=100, stress=25, restart_window=2, chaos_seeds="1,2", chaos_large_seeds="5")
    runs = soak.planned_runs(args)
    assert [r.test for r in runs[:14]] == ["stress"] * 10 + ["restart-window", "chaos", "chaos-3000", "stress"]
    stress = [r for r in runs if r.test == "stress"]
    assert len(stress) == 25 and len({r.env["STRESS_SEED"] for r in stress}) == 25
    large = next(r for r in runs if r.test == "chaos-3000")
    assert large.env == {"CHAOS_SEEDS": "5", "CHAOS_BACKGROUND_PODS": "3000", "CHAOS_SECONDS": "40"}


def test_a_failure_keeps_its_output_and_reports_are_added_up(tmp_path: Path) -> None:
    tally = soak.Tally("chaos")
    run = soak.Run("chaos", 7, "tests/e2e/test_chaos.py", {"CHAOS_SEEDS": "7"}, 10)
    report = 'chaos: {"seed": 7, "samples": 280, "over-commit instants": 2}'
    soak.record(tally, run, False, f"# seed 7\n{report}\nAssertionError", 12.0, tmp_path)
    soak.record(tally, run, True, 'chaos: {"samples": 300, "over-commit instants": 0}', 11.0, tmp_path)
    assert (tally.runs, tally.failures, tally.failed_seeds, tally.samples, tally.overcommit_instants) == (
        2,
        1,
        [7],
        580,
        2,
    )
    (kept,) = tally.outputs
    assert "AssertionError" in Path(kept).read_text()
    assert soak.summary_lines([tally])[0].startswith("chaos: 2 / 1")


def test_the_table_is_rewritten_between_its_markers_from_merged_results(tmp_path: Path, monkeypatch) -> None:
    for index, (runs, failures) in enumerate(((200, 0), (100, 1))):
        folder = tmp_path / f"r{index}"
        folder.mkdir()
        saved = soak.Tally("stress", runs=runs, failures=failures, seeds=list(range(runs)), seconds=60.0 * runs)
        (folder / "summary.json").write_text(json.dumps([asdict(saved)]))
    readme = tmp_path / "tests/e2e/README.md"
    readme.parent.mkdir(parents=True)
    readme.write_text(f"before\n{soak.TABLE_BEGIN}\nold\n{soak.TABLE_END}\nafter\n")
    monkeypatch.setattr(soak, "ROOT", tmp_path)
    assert soak.merge([tmp_path / "r0", tmp_path / "r1"], table_too=True) == 1
    text = readme.read_text()
    assert "old" not in text and text.startswith("before\n") and text.endswith("after\n")
    assert "| stress | 300 | 0-199 | 1 | - | 300 |" in text
    assert soak.seed_ranges([3, 1, 2, 7, 8, 10]) == "1-3, 7-8, 10"
