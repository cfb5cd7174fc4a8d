"""The rescuer: ends leases that expired on their last allowed attempt.

Expired leases with attempts left need no rescue: the claim statement picks
them up directly (expired first, then queued). What the claim must never pick
— an expired lease whose job has used every attempt — is turned into `failed`
with reason ``lease_expired`` here, in bounded batches. Heartbeats make a
"stale after N minutes" guess unnecessary: a dead owner is found within one
lease. Same shape as every maintenance service: a frozen config with
defaults, idempotent start/stop, and `run_once()` for tests.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import psycopg

from .._errors import PolicyError
from .._store._store import Store

logger = logging.getLogger("tenure.rescuer")


@dataclass(frozen=True, slots=True)
class RescuerConfig:
    interval: float = 1.0
    batch: int = 1000

    def __post_init__(self) -> None:
        if not 0.05 <= self.interval <= 3600:
            raise PolicyError(f"rescuer interval={self.interval!r} is outside [0.05, 3600] s")
        if not 1 <= self.batch <= 100_000:
            raise PolicyError(f"rescuer batch={self.batch!r} is outside [1, 100000]")


class Rescuer:
    def __init__(self, store: Store, config: RescuerConfig | None = None) -> None:
        self._store = store
        self.config = config or RescuerConfig()
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> list[int]:
        """One sweep; returns the ids of jobs it failed."""
        failed: list[int] = []
        while True:
            batch = await self._store.fail_exhausted_leases(self.config.batch)
            failed.extend(batch)
            if len(batch) < self.config.batch:
                break
        if failed:
            logger.info("event=leases_exhausted jobs=%d reason=lease_expired", len(failed))
        return failed

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="tenure-rescuer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except psycopg.Error as exc:
                logger.warning("event=rescue_failed error=%s", type(exc).__name__)
            await asyncio.sleep(self.config.interval)
