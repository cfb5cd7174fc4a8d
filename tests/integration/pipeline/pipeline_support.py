"""Helpers of the pipeline tests: direct reads of the test's tables, worker environments."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

import tenure
from tenure._maintenance._rescuer import RescuerConfig

STAGE_APP = "tests.integration.pipeline.stage_app:app"


class Tables:
    """Direct reads of the test's schema: tenure's tables and the stage app's effects."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def rows(self, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        with psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row) as conn:
            cursor = conn.execute(query, params or {})
            return cursor.fetchall() if cursor.description else []

    def value(self, query: str, params: dict[str, Any] | None = None) -> Any:
        (row,) = self.rows(query, params)
        return next(iter(row.values()))

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of tenure's tables, to prove that something changed nothing."""
        return {
            table: self.rows(f"SELECT * FROM {table} ORDER BY id")
            for table in ("tenure_runs", "tenure_run_stages", "tenure_jobs", "tenure_events")
        }


@contextlib.asynccontextmanager
async def serving(app: tenure.App) -> AsyncIterator[tenure.App]:
    """``app`` with its real worker running in this process (a quick rescuer); on exit
    the worker stops gracefully and the app's connections close."""
    rescuer = RescuerConfig(interval=0.1, resend_after=0.3)
    worker = app.worker(concurrency=8, poll_interval=0.05, rescuer=rescuer)
    task = asyncio.create_task(worker.run(handle_signals=False))
    try:
        yield app
    finally:
        worker.stop()
        await task
        await app.aclose()


def worker_env(dsn: str, crash_dir: Path) -> dict[str, str]:
    """What a stage-app worker needs besides TENURE_DSN: the effects' DSN, the crash folder."""
    return {"PIPELINE_TEST_DSN": dsn, "PIPELINE_CRASH_DIR": str(crash_dir)}
