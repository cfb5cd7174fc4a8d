"""An event loop on a virtual clock, for code whose waiting is all asyncio timers.

``loop.time()`` reads a counter, not the machine's clock. When the loop has
nothing to do but wait for its next timer, the counter jumps to that timer
instead of the loop sleeping: a 60 s limit passes at once, and which of two
timers fires first depends only on their deadlines, never on how loaded the
machine is. Real I/O and threads still wake the loop as usual, but the clock
does not wait for them: use this only where timers alone decide the outcome.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["VirtualClockLoop", "run_on_virtual_clock"]

T = TypeVar("T")


class _FastForward(selectors.DefaultSelector):
    """A selector that, asked to block until the next timer, moves the clock there."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout > 0:
            self.now += timeout
            timeout = 0
        return super().select(timeout)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` is virtual (see the module docstring)."""

    def __init__(self) -> None:
        self._fast_forward = _FastForward()
        super().__init__(self._fast_forward)

    def time(self) -> float:
        return self._fast_forward.now


def run_on_virtual_clock(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end on a fresh :class:`VirtualClockLoop`."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()
