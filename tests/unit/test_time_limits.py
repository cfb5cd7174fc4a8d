"""TimeLimits: one timer for every async call's time limit. A call past its limit is
cancelled and told so; a call that finished in time, or whose limit is later, is not.

Each test runs on a virtual clock (tests/support/clock.py): the limits and the calls'
durations are asyncio timers only, so which fires first depends on the deadlines alone,
never on how busy the machine is, and a 60 s limit costs no real time.
"""

from __future__ import annotations

import asyncio

import pytest
from tests.support.clock import run_on_virtual_clock

from tenure._worker._executor import TimeLimits


async def _limited(limits: TimeLimits, job_id: int, seconds: float, runs: float) -> str:
    """A call under ``limits``: 'done', or 'limited' when the limit cancelled it."""
    limits.add(job_id, seconds)
    try:
        await asyncio.sleep(runs)
    except asyncio.CancelledError:
        if limits.discard(job_id):
            return "limited"
        raise
    limits.discard(job_id)
    return "done"


def test_a_later_short_limit_fires_before_an_earlier_long_one() -> None:
    async def scenario() -> tuple[str, float, bool, str, float]:
        loop = asyncio.get_running_loop()
        limits = TimeLimits()
        long = asyncio.create_task(_limited(limits, 1, 60.0, 0.3))
        await asyncio.sleep(0)  # the long limit arms the timer first
        short = asyncio.create_task(_limited(limits, 2, 0.05, 60.0))
        short_outcome = await short
        short_at = loop.time()
        long_running = not long.done()
        return short_outcome, short_at, long_running, await long, loop.time()

    short, short_at, long_running, long, long_at = run_on_virtual_clock(scenario())
    assert short == "limited" and short_at == pytest.approx(0.05)
    assert long_running
    assert long == "done" and long_at == pytest.approx(0.3)


def test_a_call_that_finished_is_never_cancelled_by_its_old_deadline() -> None:
    async def scenario() -> tuple[str, bool, str]:
        limits = TimeLimits()
        first = await _limited(limits, 1, 0.05, 0.0)
        # The same job id runs again (a retry) with a long limit; the first deadline's
        # heap entry must not cancel it.
        again = asyncio.create_task(_limited(limits, 1, 60.0, 0.3))
        await asyncio.sleep(0.1)  # past the first deadline
        return first, again.done(), await again

    assert run_on_virtual_clock(scenario()) == ("done", False, "done")


def test_stale_entries_are_compacted_and_live_limits_still_fire() -> None:
    async def scenario() -> tuple[int, str, float]:
        limits = TimeLimits()
        for job_id in range(500):  # finished calls leave heap entries behind
            assert await _limited(limits, job_id, 60.0, 0.0) == "done"
        left = len(limits._heap)
        start = asyncio.get_running_loop().time()
        outcome = await _limited(limits, 1_000, 0.05, 60.0)
        return left, outcome, asyncio.get_running_loop().time() - start

    left, outcome, after = run_on_virtual_clock(scenario())
    assert left <= 130  # compacted, not 500
    assert outcome == "limited" and after == pytest.approx(0.05)
