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

from .._log import log_event


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
