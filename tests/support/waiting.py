"""Poll for a condition with a deadline instead of sleeping and hoping.

A fixed ``sleep`` is either too short on a loaded CI machine (flaky) or too long
everywhere else (slow). Polling returns as soon as the condition holds and fails
loudly, with a message saying what never happened, when it does not.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["wait_until", "wait_until_async"]


def _failure(message: str, timeout: float) -> AssertionError:
    return AssertionError(f"{message or 'condition not met'} (waited {timeout:.2f}s)")


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
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            if predicate():
                return
            raise _failure(message, timeout)
        time.sleep(interval)


async def wait_until_async(
    predicate: Callable[[], object],
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "",
) -> None:
    """Like :func:`wait_until`, but yields to the running event loop between polls."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            if predicate():
                return
            raise _failure(message, timeout)
        await asyncio.sleep(interval)
