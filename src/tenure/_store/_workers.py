"""The workers registry: registration, a clean stop, the pruner's batches and the
operators' read (queries/workers.sql). The heartbeat thread's keep-alive runs on its own
connection (`_lease.py`)."""

from __future__ import annotations

from typing import cast

from ._base import StoreBase
from ._connection import rows_of
from ._rows import WorkerInfo, WorkerRegistration


class WorkerStatements(StoreBase):
    """One method per statement of queries/workers.sql run on the pool."""

    async def register_worker(self, worker: WorkerRegistration) -> None:
        await self._execute("register_worker", worker.params())

    async def stop_worker(self, name: str, pid: int) -> bool:
        """Mark the row of this process stopped; False if another process took the name."""
        return await self._execute("stop_worker", {"name": name, "pid": pid}) == 1

    async def prune_workers(self, horizon_ms: int, limit: int, timeout_ms: int) -> int:
        """Delete one batch of rows not seen for ``horizon_ms``; returns how many."""
        async with self._pool.connection() as conn, conn.transaction():
            await rows_of(conn, "set_local_timeout", {"ms": timeout_ms})
            rows = await rows_of(conn, "prune_workers", {"horizon_ms": horizon_ms, "limit": limit})
        return int(rows[0]["n"])

    async def list_workers(self, limit: int, cap: int) -> list[WorkerInfo]:
        """Registered workers, alive first, with the leases each holds (counted from at
        most ``cap`` running jobs)."""
        rows = await self._fetch("list_workers", {"limit": limit, "cap": cap})
        return cast(list[WorkerInfo], rows)

    async def count_workers(self) -> dict[str, int]:
        """Registered workers by status (alive, silent, stopped)."""
        return {row["status"]: int(row["n"]) for row in await self._fetch("count_workers", {})}
