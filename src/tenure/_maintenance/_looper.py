"""The loop every maintenance service runs: `run_once`, then a pause, until stopped.

Idempotent start and stop; a database error in one round is logged (as the
service's ``failed_event``) and the next round comes after the usual pause, so
a restarting database never kills the service.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg

from .._errors import PolicyError
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


class Looper:
    """Base of a maintenance service: subclasses define `run_once` and `pause`."""

    name = "tenure-maintenance"
    failed_event = "maintenance_failed"
    logger = logging.getLogger("tenure.maintenance")

    _task: asyncio.Task[None] | None = None

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

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except psycopg.Error as exc:
                log_event(
                    self.logger, self.failed_event, level=logging.WARNING, error=type(exc).__name__
                )
            await asyncio.sleep(self.pause())
