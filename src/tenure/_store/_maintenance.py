"""Periodic schedules, the job pruner and the planner's statistics (queries/maintenance.sql)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime

import psycopg

from ._base import StoreBase
from ._connection import (
    CLAIM_TIMEOUT,
    rows_of,
)
from ._jobs import try_analyze
from ._rows import (
    JobsStatistics,
    NewJob,
)


class MaintenanceStatements(StoreBase):
    """One method per statement the maintenance services run."""

    # -- maintenance: periodic schedules and the job pruner ----------------------

    async def schedule_marks(self, names: Sequence[str]) -> tuple[datetime, dict[str, datetime]]:
        """The scheduler's clock (the database's) and each schedule's latest decided slot."""
        rows = await self._fetch("schedule_marks", {"names": list(names)})
        marks = {row["name"]: row["last_slot"] for row in rows if row["name"] is not None}
        return rows[0]["now"], marks

    async def decide_slot(
        self, name: str, slot: datetime, job: NewJob | None
    ) -> tuple[bool, int | None]:
        """Advance schedule ``name`` to ``slot`` and queue ``job`` with it, in one transaction.

        Returns (advanced, job id): advanced is False when another worker decided
        this slot first; the job id is None when nothing was queued.
        """
        async with self._pool.connection() as conn, conn.transaction():
            if not await rows_of(conn, "advance_schedule", {"name": name, "slot": slot}):
                return False, None
            if job is None:
                return True, None
            rows = await rows_of(conn, "enqueue", job.params())
            return True, rows[0]["id"] if rows else None

    async def prune_jobs(self, tools: Sequence[str] | None, limit: int, timeout_ms: int) -> int:
        """Delete one batch of terminal jobs whose own retention has passed: of ``tools``
        only, or of every application when ``tools`` is None."""
        async with self._pool.connection() as conn, conn.transaction():
            await rows_of(conn, "set_local_timeout", {"ms": timeout_ms})
            params = {"tools": None if tools is None else list(tools), "limit": limit}
            rows = await rows_of(conn, "prune_jobs", params)
        return int(rows[0]["n"])

    async def jobs_statistics(self) -> JobsStatistics:
        """The planner's view of tenure_jobs at its last ANALYZE, and the table now."""
        row = (await self._fetch("jobs_statistics", {}, CLAIM_TIMEOUT))[0]
        return JobsStatistics(
            analyzed_rows=float(row["analyzed_rows"]), live_rows=float(row["live_rows"])
        )

    async def analyze_jobs(self, timeout_ms: int) -> bool:
        """ANALYZE tenure_jobs unless another worker is at it; True if this one did. False
        too when ``timeout_ms`` passed first (behind a long lock, autovacuum's own pass):
        the next look decides again."""
        with contextlib.suppress(psycopg.errors.QueryCanceled):
            async with self._pool.connection() as conn, conn.transaction():
                await rows_of(conn, "set_local_timeout", {"ms": timeout_ms})
                return await try_analyze(conn)
        return False
