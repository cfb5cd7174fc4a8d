"""The components with rounds (River's maintenance services, Oban's plugins): a frozen
config with defaults, validated eagerly; idempotent `start`/`stop` (the supervisor's
`Component` contract, tenure._maintenance._supervisor; also ``async with``);
`run_once()`, which tests call directly; and one event and one error policy.

Every round ends in one ``component_round`` event (Oban's plugin span): the component's
name, ``outcome`` ok or failed, its duration, what it counted, and on failure the
error's class; then the component's `Signal` fires (what tests await). An ok round is a
DEBUG line. A round that fails is not the end: the next comes after the usual pause. A
database error (the server restarting, a statement timing out) is a WARNING; anything
else is a bug, logged at ERROR with its traceback, and the service still lives on: a
service that silently died would leave its work (expired leases, pruning, schedules)
undone with nobody told.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sized
from types import TracebackType
from typing import Any, Self

from .._errors import PolicyError, StoreError
from .._log import log_event
from ._supervisor import Signal

Range = tuple[str, object, float, float]  # setting, value, lowest, highest


def check_ranges(service: str, checks: tuple[Range, ...], optional: str = "") -> None:
    """PolicyError unless every setting is a number within its range; the one named
    ``optional`` may also be None (which turns the service off)."""
    for name, value, low, high in checks:
        if value is None and name == optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise PolicyError(f"{service} {name} must be a number, got {value!r}")
        if not low <= value <= high:
            raise PolicyError(f"{service} {name}={value!r} is outside [{low:g}, {high:g}]")


def check_sweeps(
    service: str, interval: float, batch: int, statement_timeout: float, *more: Range
) -> None:
    """The settings of a service that deletes in bounded batches (the job and worker
    pruners), plus ``more`` of its own: each in range, the batch a whole number."""
    check_ranges(
        service,
        (
            *more,
            ("interval", interval, 0.05, 86400.0),
            ("batch", batch, 1, 100_000),
            ("statement_timeout", statement_timeout, 0.1, 600.0),
        ),
    )
    if isinstance(batch, float):
        raise PolicyError(f"{service} batch must be an integer, got {batch!r}")


async def sweep(delete_batch: Callable[[], Awaitable[int]], batch: int, most: int) -> int:
    """Delete batch after batch until one comes back short (or ``most`` batches: the
    rest waits for the next sweep); how many rows in all."""
    deleted = 0
    for _ in range(most):
        n = await delete_batch()
        deleted += n
        if n < batch:
            break
    return deleted


class Service:
    """Base of a component with rounds: subclasses define `run_once` and `pause`.

    ``jitter`` (a fraction) spreads the pause, so the same service on several workers
    does not run in step. ``signal`` fires after every round, failed or not; the
    supervisor replaces it with the process's signal of the component's name.
    """

    name = "service"
    logger = logging.getLogger("tenure.maintenance")
    jitter = 0.0

    _task: asyncio.Task[None] | None = None
    _signal: Signal | None = None
    rounds = 0  # completed rounds, failed or not (tests and the curious read it)
    failures = 0

    @property
    def signal(self) -> Signal:
        if self._signal is None:
            self._signal = Signal()
        return self._signal

    @signal.setter
    def signal(self, signal: Signal) -> None:
        self._signal = signal

    def counts(self, result: Any) -> dict[str, int]:
        """What a round's result counts, for its ``component_round`` event: a number of
        rows, whether it acted, how many things it decided."""
        if isinstance(result, bool):
            return {"acted": int(result)}
        if isinstance(result, int):
            return {"rows": result}
        if isinstance(result, Sized):
            return {"items": len(result)}
        return {}

    async def run_once(self) -> Any:
        raise NotImplementedError

    def pause(self) -> float:
        """Seconds until the next round."""
        raise NotImplementedError

    @property
    def enabled(self) -> bool:
        return True

    def start(self) -> None:
        if self._task is None and self.enabled:
            self._task = asyncio.create_task(self._loop(), name=f"tenure-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def round(self) -> None:
        """One round under the error policy, its event and its signal."""
        started = time.monotonic()
        try:
            counts: dict[str, Any] = self.counts(await self.run_once())
        except (StoreError, TimeoutError) as exc:
            self._failed(started, exc, logging.WARNING)
        except Exception as exc:  # a bug: say so loudly, and keep the service alive
            self._failed(started, exc, logging.ERROR)
            self.logger.exception("%s: unexpected error in a round", self.name)
        else:
            log_event(
                self.logger,
                "component_round",
                level=logging.DEBUG,
                component=self.name,
                outcome="ok",
                duration=round(time.monotonic() - started, 4),
                **counts,
            )
        self.rounds += 1
        self.signal.fire()

    def _failed(self, started: float, exc: BaseException, level: int) -> None:
        self.failures += 1
        log_event(
            self.logger,
            "component_round",
            level=level,
            component=self.name,
            outcome="failed",
            duration=round(time.monotonic() - started, 4),
            error=type(exc).__name__,
        )

    async def _loop(self) -> None:
        while True:
            await self.round()
            pause = self.pause()
            if self.jitter:
                pause *= random.uniform(1 - self.jitter, 1 + self.jitter)  # noqa: S311
            await asyncio.sleep(pause)
