"""The one contract every background service of a worker follows (River's maintenance
services, Oban's plugins): a frozen config with defaults, validated eagerly; idempotent
`start`/`stop` (and ``async with``, so a worker composes its services on one exit stack);
`run_once()`, which tests call directly; and one error policy.

The error policy: a round that fails is logged as the service's ``failed_event`` and the
next round comes after the usual pause. A database error (the server restarting, a
statement timing out) is a WARNING line with its class; anything else is a bug, logged
at ERROR with its traceback, and the service still lives on: a service that silently
died would leave its work (expired leases, pruning, schedules) undone with nobody told.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self

from .._errors import PolicyError, StoreError
from .._log import log_event

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
    """Base of a background service: subclasses define `run_once` and `pause`.

    ``jitter`` (a fraction) spreads the pause, so the same service on several workers
    does not run in step.
    """

    name = "tenure-service"
    failed_event = "service_failed"
    logger = logging.getLogger("tenure.maintenance")
    jitter = 0.0

    _task: asyncio.Task[None] | None = None
    rounds = 0  # completed rounds, failed or not (tests and the curious read it)
    failures = 0

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
            self._task = asyncio.create_task(self._loop(), name=self.name)

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

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except (StoreError, TimeoutError) as exc:
                self.failures += 1
                log_event(
                    self.logger, self.failed_event, level=logging.WARNING, error=type(exc).__name__
                )
            except Exception as exc:  # a bug: say so loudly, and keep the service alive
                self.failures += 1
                log_event(
                    self.logger, self.failed_event, level=logging.ERROR, error=type(exc).__name__
                )
                self.logger.exception("%s: unexpected error in a round", self.name)
            self.rounds += 1
            pause = self.pause()
            if self.jitter:
                pause *= random.uniform(1 - self.jitter, 1 + self.jitter)  # noqa: S311
            await asyncio.sleep(pause)
