"""The queue charts' step lines: one unit per minute, every minute's count recoverable,
and a quiet day costs a few bytes, not 1,440 points."""

from __future__ import annotations

import random

from tests.support.charts import step_heights

from tenure._dashboard._queues_page import PLOT, step_path


def counts(d: str, peak: int) -> list[int]:
    """Each minute's count, read back from its height (drawn to 4 significant digits: exact
    to the count for peaks up to 5,000, and far finer than a pixel above)."""
    return [round((PLOT - y) / PLOT * peak) for y in step_heights(d)]


def test_every_minute_reads_back_at_its_count() -> None:
    rng = random.Random(16)
    for slots in (1, 60, 1440):
        for top in (1, 7, 40, 5000):
            values = [rng.choice([0, 0, 0, rng.randint(1, top)]) for _ in range(slots)]
            peak = max(1, *values)
            assert counts(step_path(values, peak), peak) == values


def test_a_flat_stretch_is_one_segment() -> None:
    quiet = [0] * 1440
    assert step_path(quiet, 1) == "M0,100h1440"
    one = [0] * 1440
    one[700] = 3
    d = step_path(one, 3)
    assert d == "M0,100h700V0h1V100h739"
    assert counts(d, 3) == one


def test_no_minutes_no_line() -> None:
    assert step_path([], 1) == ""
