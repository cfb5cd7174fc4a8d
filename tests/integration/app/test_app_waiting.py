"""Waiting on a real database: what wakes a waiter, and what it reads when woken."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from tests.support.waiting import wait_until_async

import tenure
from tenure._store import JobStatus

STEPS = 5  # progress values the watcher must see before the waiter is looked at


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[tenure.App]:
    app = tenure.App(tenure_dsn)
    yield app
    await app.aclose()


async def count_status_reads(app: tenure.App, monkeypatch: pytest.MonkeyPatch) -> Counter[Any]:
    """How many times each task read job statuses through this loop's store (the reads
    still go to the database; they are only counted)."""
    store = await app._connection.store()
    reads: Counter[Any] = Counter()
    read = store.job_status

    async def counted(job_ids: Sequence[int]) -> dict[int, JobStatus]:
        reads[asyncio.current_task()] += 1
        return await read(job_ids)

    monkeypatch.setattr(store, "job_status", counted)
    return reads


async def test_progress_wakes_a_watcher_but_never_a_plain_waiter(
    app: tenure.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22 C: 200 idle waiters made 807 status reads/s on jobs reporting progress."""
    release = asyncio.Event()

    @app.tool("chatty", lease=5, heartbeat=1, jitter=1)
    async def chatty(ctx: tenure.Context) -> str:
        step = 0
        while not release.is_set():
            step += 1
            ctx.report_progress(step)
            await asyncio.sleep(0.05)
        return "done"

    reads = await count_status_reads(app, monkeypatch)
    waiters = await app._connection.waiters()
    # The listener's first connection wakes everyone once; let that happen before anyone waits.
    await wait_until_async(lambda: waiters.pushed, timeout=20, message="no listener")
    worker = app.worker(concurrency=1, poll_interval=0.2)
    running = asyncio.create_task(worker.run(handle_signals=False))
    try:
        job = await app.enqueue("chatty", {})
        waiting = asyncio.create_task(app.wait(job.id, timeout=60))
        seen: list[Any] = []
        async with asyncio.timeout(60):
            async for now in app.watch(job.id):
                if now.progress is not None:
                    seen.append(now.progress["done"])
                if len(seen) >= STEPS:
                    break
        # Each of those progress reports was a notification on the waiter's own connection.
        assert len(set(seen)) >= STEPS, seen
        assert not waiting.done()
        assert reads[waiting] == 1, reads  # its first look only
        release.set()
        assert await waiting == "done"
        assert reads[waiting] == 2, reads  # and one more, for the ending
    finally:
        release.set()
        worker.stop()
        await running
