"""Fixtures for the durable-step tests: a store on this test's schema, a worker in-process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tests.integration.store.conftest import store as store  # a Store on this test's schema

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
