"""TimeLimits: one timer for every async call's time limit. A call past its limit is
cancelled and told so; a call that finished in time, or whose limit is later, is not."""

from __future__ import annotations

import asyncio

from tests.support.waiting import wait_until_async

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


async def test_a_later_short_limit_fires_before_an_earlier_long_one() -> None:
    limits = TimeLimits()
    long = asyncio.create_task(_limited(limits, 1, 60.0, 0.3))
    await asyncio.sleep(0)  # the long limit arms the timer first
    short = asyncio.create_task(_limited(limits, 2, 0.05, 60.0))
    assert await asyncio.wait_for(short, 10) == "limited"
    assert not long.done()
    assert await asyncio.wait_for(long, 10) == "done"


async def test_a_call_that_finished_is_never_cancelled_by_its_old_deadline() -> None:
    limits = TimeLimits()
    assert await _limited(limits, 1, 0.05, 0.0) == "done"
    # The same job id runs again (a retry) with a long limit; the first deadline's
    # heap entry must not cancel it.
    again = asyncio.create_task(_limited(limits, 1, 60.0, 0.3))
    await asyncio.sleep(0.1)  # past the first deadline
    assert not again.done()
    assert await asyncio.wait_for(again, 10) == "done"


async def test_stale_entries_are_compacted_and_live_limits_still_fire() -> None:
    limits = TimeLimits()
    for job_id in range(500):  # finished calls leave heap entries behind
        assert await _limited(limits, job_id, 60.0, 0.0) == "done"
    assert len(limits._heap) <= 130  # compacted, not 500
    victim = asyncio.create_task(_limited(limits, 1_000, 0.05, 60.0))
    await wait_until_async(victim.done, timeout=10, message="the live limit never fired")
    assert victim.result() == "limited"
