"""bench/e2e_bench.py's order of the schedulers within a round index: a balanced (Williams) design, so that what
one round leaves behind for the next falls on every mode alike (the burst ratio's goal hangs on a few percent)."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.e2e_bench import FLOOR_MODES, MODES, round_order


@pytest.mark.parametrize("count", [2, 4, 6])
def test_every_mode_runs_once_per_round_and_once_in_every_position(count: int) -> None:
    modes = tuple(f"mode-{i}" for i in range(count))
    rows = [round_order(modes, index) for index in range(count)]
    assert all(sorted(row) == sorted(modes) for row in rows)
    for position in range(count):
        assert sorted(row[position] for row in rows) == sorted(modes)


@pytest.mark.parametrize("count", [2, 4, 6])
def test_every_mode_follows_every_other_exactly_once(count: int) -> None:
    modes = tuple(f"mode-{i}" for i in range(count))
    successions = Counter(
        (row[position], row[position + 1])
        for row in (round_order(modes, index) for index in range(count))
        for position in range(count - 1)
    )
    assert set(successions.values()) == {1}
    assert len(successions) == count * (count - 1)


def test_the_benchs_own_modes() -> None:
    """Two modes alternate, and which goes first alternates; the four modes of --floor start plain first (after
    the warm-ups) and keep no one cyclic order (one would put ours right after plain in every round)."""
    assert [round_order(MODES, index) for index in range(3)] == [MODES, MODES[::-1], MODES]
    modes = (*MODES, *FLOOR_MODES)
    rows = [round_order(modes, index) for index in range(4)]
    assert rows[0][0] == MODES[0]
    before_ours = {row[row.index(MODES[1]) - 1] for row in rows if row.index(MODES[1]) > 0}
    assert len(before_ours) == 3
