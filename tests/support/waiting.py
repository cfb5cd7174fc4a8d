"""Poll for a condition with a deadline instead of sleeping and hoping.

A fixed ``sleep`` is either too short on a loaded CI machine (flaky) or too long
everywhere else (slow). Polling returns as soon as the condition holds and fails
loudly, with a message saying what never happened, when it does not.

`wait_until` is the harness's `tenure._chaos._harness.wait_for`, failing the test
(AssertionError) instead of raising TimeoutError.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable

from tenure._chaos._harness import wait_for

__all__ = ["wait_until", "wait_until_async"]


def wait_until(
    predicate: Callable[[], object],
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "",
) -> None:
    """Block until ``predicate()`` is truthy; raise AssertionError after *timeout* seconds.

    The predicate is always evaluated at least once, and once more at the
    deadline, so a condition that becomes true while we slept is not missed.
    Do not use it inside a coroutine whose own loop must make progress for the
    predicate to become true: use :func:`wait_until_async` there.
    """
    wait_for(predicate, timeout, message or "condition not met", interval, error=AssertionError)


async def wait_until_async(
    predicate: Callable[[], object],
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "",
) -> None:
    """Like :func:`wait_until`, but yields to the running event loop between polls.

    ``predicate`` may be a coroutine function (or return any awaitable): what it
    returns is awaited, so a condition that needs the database is one line.
    """

    async def holds() -> bool:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        return bool(value)

    deadline = time.monotonic() + timeout
    while not await holds():
        if time.monotonic() >= deadline:
            if await holds():
                return
            raise AssertionError(f"{message or 'condition not met'} (waited {timeout:.2f} s)")
        await asyncio.sleep(interval)
