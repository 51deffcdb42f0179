"""Repetition as a tool: the over-commit stress test, the restart-window e2e and the chaos e2e, N times each.

A race that shows once in fifty runs is only found by running it hundreds of times and keeping what the failing
run printed. Each run here is its own pytest process with its own seed (STRESS_SEED, RESTART_WINDOW_SEED,
CHAOS_SEEDS), so a failure is replayed by its seed alone; every failing run's full output (stdout and stderr,
with the seed and the command in the first lines) is kept under the results directory, and a summary line
`test: runs / failures` per test is printed and written to summary.json there. The e2e runs' reports (the
`chaos: {...}` and `restart window: {...}` lines) give the over-commit instants and samples of the reliability
table, which `--table`
rewrites between the markers of tests/e2e/README.md.

    python -m tools.soak --stress 300 --restart-window 20 --chaos-seeds 1,2,3,4,5 --chaos-large-seeds 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "no:randomly"]
TABLE_BEGIN = "<!-- soak:begin -->"
TABLE_END = "<!-- soak:end -->"
WINDOW_TEST = "tests/e2e/test_restart_window.py"
# The e2e tests' one-line JSON reports, with their over-commit instants and samples.
E2E_REPORT = re.compile(r"^(?:chaos|restart window): (\{.*\})$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Run:
    """One pytest process: which test, the seed it was given, the environment that carries the seed."""

    test: str
    seed: int
    path: str
    env: dict[str, str]
    timeout: float


@dataclass
class Tally:
    """What the runs of one test gave: counts, seeds, the failing ones' output files, chaos figures."""

    test: str
    runs: int = 0
    failures: int = 0
    seeds: list[int] = field(default_factory=list)
    failed_seeds: list[int] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    seconds: float = 0.0
    overcommit_instants: int = 0
    samples: int = 0


def planned_runs(args: argparse.Namespace) -> list[Run]:
    """The runs asked for, interleaved test by test (so a stop midway still has some of each)."""
    first = args.first_seed
    stress = [
        Run(
            "stress", first + i, "tests/decisions/quota/test_overcommit_stress.py", {"STRESS_SEED": str(first + i)}, 900
        )
        for i in range(args.stress)
    ]
    window = [
        Run(
            "restart-window",
            first + i,
            "tests/e2e/test_restart_window.py",
            {"RESTART_WINDOW_SEED": str(first + i)},
            900,
        )
        for i in range(args.restart_window)
    ]
    chaos = [
        Run("chaos", seed, "tests/e2e/test_chaos.py", {"CHAOS_SEEDS": str(seed)}, 1200)
        for seed in _seeds(args.chaos_seeds)
    ]
    large = [
        Run(
            "chaos-3000",
            seed,
            "tests/e2e/test_chaos.py",
            {"CHAOS_SEEDS": str(seed), "CHAOS_BACKGROUND_PODS": "3000", "CHAOS_SECONDS": "40"},
            1800,
        )
        for seed in _seeds(args.chaos_large_seeds)
    ]
    lanes = [stress, window, chaos, large]
    ordered: list[Run] = []
    while any(lanes):
        for lane in lanes:
            # stress runs are cheap: several of them for each e2e run
            for _ in range(10 if lane is stress else 1):
                if lane:
                    ordered.append(lane.pop(0))
    return ordered


def _seeds(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def run_one(run: Run, results: Path) -> tuple[bool, str, float]:
    """(passed, full output, seconds). A run over its timeout is a failure with what it printed so far."""
    env = {**os.environ, **run.env}
    command = [*PYTEST, run.path]
    began = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=run.timeout, check=False
        )
        passed, out, err = done.returncode == 0, done.stdout, done.stderr
        status = f"exit {done.returncode}"
    except subprocess.TimeoutExpired as expired:
        passed, status = False, f"timed out after {run.timeout:.0f}s"
        out = _text(expired.stdout)
        err = _text(expired.stderr)
    seconds = time.monotonic() - began
    header = f"# {run.test} seed {run.seed}: {status} in {seconds:.1f}s\n# env {run.env}\n# {' '.join(command)}\n"
    return passed, f"{header}\n--- stdout\n{out}\n--- stderr\n{err}", seconds


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def record(
    tally: Tally, run: Run, passed: bool, output: str, seconds: float, results: Path, *, keep: bool = False
) -> None:
    tally.runs += 1
    tally.seeds.append(run.seed)
    tally.seconds += seconds
    for report in E2E_REPORT.findall(output):
        try:
            parsed = json.loads(report)
        except ValueError:
            continue
        tally.overcommit_instants += int(parsed.get("over-commit instants", 0))
        tally.samples += int(parsed.get("samples", 0))
    if passed and not keep:
        return
    path = results / f"{run.test}-seed{run.seed}-{'ok' if passed else 'failed'}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    path.write_text(output)
    if passed:
        return
    tally.failures += 1
    tally.failed_seeds.append(run.seed)
    tally.outputs.append(str(path))


def summary_lines(tallies: Sequence[Tally]) -> list[str]:
    return [
        f"{t.test}: {t.runs} / {t.failures}"
        + (f"  (failed seeds {t.failed_seeds}; output in {', '.join(t.outputs)})" if t.failures else "")
        for t in tallies
    ]


def table(tallies: Sequence[Tally], load: str, how: str = "`make soak`") -> str:
    """The reliability table of tests/e2e/README.md."""
    rows = [
        "| test | runs | seeds | failures | over-commit instants (samples) | minutes |",
        "|---|---|---|---|---|---|",
    ]
    for t in tallies:
        if not t.runs:
            continue
        seeds = seed_ranges(t.seeds)
        instants = f"{t.overcommit_instants} ({t.samples})" if t.test != "stress" else "-"
        rows.append(f"| {t.test} | {t.runs} | {seeds} | {t.failures} | {instants} | {t.seconds / 60:.0f} |")
    rows.append("")
    rows.append(f"Taken {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by {how}; {load}.")
    return "\n".join(rows)


def seed_ranges(seeds: Sequence[int]) -> str:
    """1,2,3,7,8 -> "1-3, 7-8"."""
    ranges: list[list[int]] = []
    for seed in sorted(set(seeds)):
        if ranges and seed == ranges[-1][1] + 1:
            ranges[-1][1] = seed
        else:
            ranges.append([seed, seed])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def rewrite_table(readme: Path, text: str) -> None:
    body = readme.read_text()
    begin, end = body.find(TABLE_BEGIN), body.find(TABLE_END)
    if begin < 0 or end < begin:
        raise SystemExit(f"{readme} has no {TABLE_BEGIN} ... {TABLE_END} section")
    readme.write_text(body[: begin + len(TABLE_BEGIN)] + "\n" + text + "\n" + body[end:])


def load_figure() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average at the end {one:.1f} / {five:.1f} / {fifteen:.1f} on {os.cpu_count()} CPUs"


def merge(folders: Sequence[Path], *, table_too: bool) -> int:
    """The tallies of soak runs made apart (several processes, several sittings) added up."""
    merged: dict[str, Tally] = {}
    for folder in folders:
        if not (folder / "summary.json").exists():
            print(f"{folder}: no finished run yet", file=sys.stderr)
            continue
        for saved in json.loads((folder / "summary.json").read_text()):
            into = merged.setdefault(saved["test"], Tally(saved["test"]))
            for name, value in saved.items():
                if name != "test":
                    setattr(into, name, getattr(into, name) + value)
    ran = [t for t in merged.values() if t.runs]
    print("\n".join(summary_lines(ran)))
    if table_too:
        how = f"`python -m tools.soak --merge` over {len(folders)} soak runs"
        rewrite_table(ROOT / "tests/e2e/README.md", table(ran, load_figure(), how))
    return 1 if any(t.failures for t in ran) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stress", type=int, default=300, help="over-commit stress runs")
    parser.add_argument("--restart-window", type=int, default=20, help="restart-window e2e runs")
    parser.add_argument("--chaos-seeds", default="1,2,3,4", help="chaos e2e seeds, 300 unrelated pods")
    parser.add_argument("--chaos-large-seeds", default="5", help="chaos e2e seeds, 3,000 unrelated pods")
    parser.add_argument("--first-seed", type=int, default=int(time.time()) % 100_000, help="stress/window seeds")
    parser.add_argument("--results", type=Path, default=ROOT / "soak-results")
    parser.add_argument("--table", action="store_true", help="rewrite the table in tests/e2e/README.md")
    parser.add_argument("--keep-all", action="store_true", help="keep the output of passing runs too")
    parser.add_argument("--merge", type=Path, nargs="*", default=[], help="only add up these results folders")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, table_too=args.table)
    results = args.results / time.strftime("%Y%m%dT%H%M%S")
    results.mkdir(parents=True, exist_ok=True)
    tallies = {name: Tally(name) for name in ("stress", "restart-window", "chaos", "chaos-3000")}
    for run in planned_runs(args):
        passed, output, seconds = run_one(run, results)
        record(tallies[run.test], run, passed, output, seconds, results, keep=args.keep_all)
        print(f"{run.test} seed {run.seed}: {'ok' if passed else 'FAILED'} ({seconds:.1f}s)", flush=True)
        (results / "summary.json").write_text(json.dumps([asdict(t) for t in tallies.values()], indent=1))
    ran = [t for t in tallies.values() if t.runs]
    print("\n".join(summary_lines(ran)))
    print(f"results: {results}")
    if args.table:
        rewrite_table(ROOT / "tests/e2e/README.md", table(ran, load_figure()))
    return 1 if any(t.failures for t in ran) else 0


if __name__ == "__main__":
    sys.exit(main())
