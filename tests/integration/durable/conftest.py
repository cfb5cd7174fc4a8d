"""Fixtures for the durable-step tests: a store on this test's schema, a worker in-process,
plain reads of the tables."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from tests.integration.store.conftest import store as store  # a Store on this test's schema
from tests.support.waiting import wait_until_async

from tenure import App
from tenure._worker._worker import Worker


@asynccontextmanager
async def running(app: App, **options: object) -> AsyncIterator[Worker]:
    """A worker for ``app`` on this event loop, stopped (and awaited) on the way out."""
    worker = app.worker(poll_interval=0.05, **options)
    task = asyncio.create_task(worker.run(handle_signals=False))
    try:
        yield worker
    finally:
        worker.stop()
        await task


def rows(dsn: str, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One statement on a connection of its own: its rows."""
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute(query, params or {}).fetchall()


async def until_waiting(dsn: str, job_id: int) -> None:
    """Poll until the job is `waiting` (suspended, holding nothing)."""

    def waiting() -> bool:
        found = rows(dsn, "SELECT state FROM tenure_jobs WHERE id = %(id)s", {"id": job_id})
        return bool(found[0]["state"] == "waiting")

    await wait_until_async(waiting, timeout=20, message=f"job {job_id} never waited")
