"""The virtual clock of tests/support/clock.py: timers fire in deadline order, at once."""

from __future__ import annotations

import asyncio

from tests.support.clock import run_on_virtual_clock


def test_the_clock_jumps_to_each_timer_in_deadline_order() -> None:
    async def scenario() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[str, float]] = []

        async def after(name: str, seconds: float) -> None:
            await asyncio.sleep(seconds)
            fired.append((name, loop.time()))

        await asyncio.gather(after("hour", 3600.0), after("second", 1.0), after("day", 86400.0))
        return fired

    assert run_on_virtual_clock(scenario()) == [
        ("second", 1.0),
        ("hour", 3600.0),
        ("day", 86400.0),
    ]
