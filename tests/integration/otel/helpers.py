"""Helpers of the in-process tracing tests: a worker for the block, spans awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tests.integration.otel.spans import Seen, Traced, named
from tests.support.waiting import wait_until_async

from tenure import App


@asynccontextmanager
async def running(app: App, **options: Any) -> AsyncIterator[None]:
    """A worker of ``app`` in this event loop for the block; stopped (softly) after it."""
    worker = app.worker(concurrency=8, poll_interval=0.05, **options)
    task = asyncio.create_task(worker.run(handle_signals=False))
    try:
        yield
    finally:
        worker.stop()
        await task


async def finished(tracing: Traced, name: str, count: int = 1) -> list[Seen]:
    """Wait until ``count`` spans called ``name`` have ended; return them all."""
    await wait_until_async(
        lambda: len(named(tracing.spans(), name)) >= count,
        20,
        interval=0.02,
        message=f"fewer than {count} {name} spans: {[s.name for s in tracing.spans()]}",
    )
    return named(tracing.spans(), name)
