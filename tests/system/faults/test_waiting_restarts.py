"""Waiting through a real PostgreSQL restart: callers see tenure's answers, never a driver error.

Issue 22 D: a restart that caught ``watch()``/``wait()`` mid-read raised a raw
``psycopg.OperationalError`` (3 of 600 watchers in one run). The store now raises
`ConnectionLost` for a broken connection, and a waiter reads again while its timeout
allows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.apps.cancel_app import build_app
from tests.support.servers import private_server
from tests.support.waiting import wait_until_async
from tests.support.workers import WorkerGroup

from tenure import App, Job, JobCancelled
from tenure._chaos._proxy import FaultProxy
from tenure._embedded import EmbeddedPostgres

pytestmark = pytest.mark.slow

CANCEL_APP = "tests.apps.cancel_app:app"
JOBS = 40  # each followed by a waiter and a watcher
SECONDS = 6.0  # how long each job chatters; the restart comes while all of them do


@pytest.fixture
def server() -> Iterator[EmbeddedPostgres]:
    with private_server("tenure-waiting-") as server:
        yield server


async def test_a_read_that_a_restart_breaks_is_read_again_and_the_wait_answers(
    server: EmbeddedPostgres,
) -> None:
    """Deterministic: the waiter's read is held on the wire by the proxy when the server
    shuts down, so the shutdown breaks exactly that read."""
    with FaultProxy.for_dsn(server.dsn) as proxy:
        app = build_app(proxy.dsn(server.dsn))
        other = App(server.dsn)  # the canceller, on its own connection to the server
        try:
            job = await app.enqueue("effects", {"path": "/dev/null"})
            waiters = await app._connection.waiters()
            await wait_until_async(lambda: waiters.pushed, timeout=20, message="no listener")
            waiting = asyncio.create_task(app.wait(job.id, timeout=120))
            await wait_until_async(lambda: job.id in waiters._by_job, message="never waited")
            proxy.set_mode("hold")  # what the App sends is held; what it receives passes
            await other.cancel(job.id)  # its notification wakes the waiter, which reads
            await wait_until_async(
                lambda: proxy.bytes_held > 0, timeout=20, message="the waiter never read"
            )
            await asyncio.to_thread(server.stop)  # the read's connection is terminated
            assert not waiting.done()
            await asyncio.to_thread(server.start)
            proxy.set_mode("pass")
            with pytest.raises(JobCancelled) as cancelled:
                await waiting
            assert cancelled.value.job is not None and cancelled.value.job.state == "cancelled"
        finally:
            await other.aclose()
            await app.aclose()


async def test_many_waiters_and_watchers_ride_out_a_crash_restart(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """The fault test's shape: many concurrent follows, each read on every progress report,
    and the database crashing under them; every one ends with the job's real outcome."""
    app = build_app(server.dsn)
    outcomes: list[Any] = []
    try:
        with WorkerGroup(server.dsn, tmp_path, app=CANCEL_APP) as workers:
            workers.spawn("a", concurrency=JOBS).wait_started()
            jobs = [await app.enqueue("chatty", {"seconds": SECONDS}) for _ in range(JOBS)]
            reported: set[int] = set()

            async def watch(job: Job) -> Any:
                last = None
                async for last in app.watch(job.id, timeout=120):
                    if last.progress is not None:
                        reported.add(job.id)
                assert last is not None
                return last.state, last.result

            async def wait(job: Job) -> Any:
                return "succeeded", await app.wait(job.id, timeout=120)

            follows = [asyncio.create_task(f(job)) for job in jobs for f in (watch, wait)]
            await wait_until_async(
                lambda: len(reported) == JOBS, timeout=60, message="not every job reported"
            )
            await asyncio.to_thread(server.restart, "immediate")
            outcomes = await asyncio.gather(*follows, return_exceptions=True)
    finally:
        with contextlib.suppress(Exception):
            await app.aclose()
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert failures == [], failures[:3]
    assert len(outcomes) == 2 * JOBS
    assert all(state == "succeeded" and steps > 0 for state, steps in outcomes), outcomes[:4]
