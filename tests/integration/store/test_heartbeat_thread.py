"""The heartbeat thread against the real database: one statement per period for every lease.

The extend statements are observed, not replaced: each call is recorded on its way to
PostgreSQL and its answer is the database's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

import pytest
from tests.integration.store.helpers import new_job
from tests.support.waiting import wait_until

from tenure._store import (
    ClaimedJob,
    Extension,
    Finish,
    SessionBeat,
    Store,
    WorkerRegistration,
)
from tenure._worker._heartbeat import HeartbeatThread, Held
from tenure._worker._ownership import Ownership

HEARTBEAT = 0.4
LEASE_MS = 30_000


class Recorded:
    """The job ids each beat renewed: a full extension's, or those a session beat
    (migration 0023) confirmed."""

    def __init__(self, thread: HeartbeatThread) -> None:
        self.calls: list[list[int]] = []
        self.kinds: list[str] = []  # "session" or "full", in the order they were sent
        self.session_beats = 0
        self._lock = threading.Lock()
        conn = thread._conn
        send = conn.extend
        confirm = thread._confirm_session

        def extend(
            owner: str, held: Sequence[tuple[int, int, int]], timeout: float
        ) -> list[Extension]:
            with self._lock:
                self.calls.append(sorted(h[0] for h in held))
                self.kinds.append("full")
            return send(owner, held, timeout)

        def confirmed(live: list[Held], beat: SessionBeat, ticked_at: float) -> None:
            with self._lock:
                self.calls.append(sorted(h.job.id for h in live))
                self.kinds.append("session")
                self.session_beats += 1
            confirm(live, beat, ticked_at)

        conn.extend = extend  # type: ignore[method-assign]
        thread._confirm_session = confirmed  # type: ignore[method-assign]

    def snapshot(self) -> list[list[int]]:
        with self._lock:
            return list(self.calls)

    def full_after_session(self, since: int) -> bool:
        """Whether, among the beats from the ``since``-th on, a session beat was followed
        by a full extension."""
        with self._lock:
            kinds = self.kinds[since:]
        return "session" in kinds and "full" in kinds[kinds.index("session") :]


@contextmanager
def running(dsn: str) -> Iterator[tuple[HeartbeatThread, Recorded]]:
    thread = HeartbeatThread(dsn, "w")
    recorded = Recorded(thread)
    thread.start()
    try:
        yield thread, recorded
    finally:
        thread.stop()


def held(job: ClaimedJob, started_at: float) -> Held:
    return Held(
        job=job,
        ownership=Ownership(started_at, job.lease_remaining),
        lease_ms=LEASE_MS,
        heartbeat=HEARTBEAT,
        time_limit=3600.0,
        started_at=started_at,
        is_alive=lambda: True,
        on_end=lambda reason: None,
    )


async def test_leases_claimed_at_different_times_are_renewed_by_one_statement(
    store: Store, tenure_dsn: str
) -> None:
    await store.enqueue_many([new_job(f"k{i}") for i in range(30)])
    batches = [await store.claim("w", {"t": LEASE_MS}, 10) for _ in range(3)]
    everyone = sorted(job.id for batch in batches for job in batch)
    with running(tenure_dsn) as (thread, recorded):
        start = time.monotonic()
        # Three claim batches whose first beats fall 0, 0.1 and 0.2 s apart: three phases
        # that, renewed each on its own, would cost three statements per period.
        for n, batch in enumerate(batches):
            for job in batch:
                thread.hold(held(job, start + n * HEARTBEAT / 4))
        wait_until(lambda: len(recorded.snapshot()) >= 4, timeout=20, message="four beats")
    calls = recorded.snapshot()
    assert calls[0] == everyone, "the first beat did not take the leases due soon with it"
    assert all(call == everyone for call in calls), [len(c) for c in calls]


async def test_a_lease_due_more_than_half_a_period_later_waits_then_phases_merge(
    store: Store, tenure_dsn: str
) -> None:
    await store.enqueue_many([new_job(f"k{i}") for i in range(2)])
    early, late = await store.claim("w", {"t": LEASE_MS}, 2)
    with running(tenure_dsn) as (thread, recorded):
        start = time.monotonic()
        thread.hold(held(early, start))
        thread.hold(held(late, start + 0.8 * HEARTBEAT))  # due beyond half a period later
        wait_until(lambda: len(recorded.snapshot()) >= 2, timeout=20, message="two beats")
    first, second = recorded.snapshot()[:2]
    # The late lease is not renewed 0.8 H early; at its own beat the early one, due 0.2 H
    # later, goes with it, and from then on the two share one statement.
    assert first == [early.id]
    assert second == sorted([early.id, late.id])


async def test_a_beat_that_crosses_the_jobs_own_commit_reports_no_loss(
    store: Store, tenure_dsn: str
) -> None:
    """The commit lands, then an extension for the same token matches zero rows before
    the worker let go of the lease: that lease was used, not lost. Another lease that
    really is gone (committed under another owner's view) is still reported."""
    await store.enqueue_many([new_job(f"k{i}") for i in range(2)])
    mine, gone = await store.claim("w", {"t": LEASE_MS}, 2)
    ended: list[tuple[int, str]] = []
    with running(tenure_dsn) as (thread, recorded):
        start = time.monotonic()
        for job in (mine, gone):
            item = held(job, start)

            def on_end(reason: str, job_id: int = job.id) -> None:
                ended.append((job_id, reason))

            item.on_end = on_end
            if job is mine:
                item.ownership.committing = True  # the completer sent its commit
            thread.hold(item)
        verdicts = await store.finish_many(
            "w", [Finish(j.id, j.token, "succeeded", result_json="null") for j in (mine, gone)]
        )
        assert all(verdicts.values())
        wait_until(lambda: ended, timeout=20, message="the lost lease was never reported")
        beats = len(recorded.snapshot())
        wait_until(lambda: len(recorded.snapshot()) >= beats + 2, timeout=20, message="beats")
    assert ended == [(gone.id, "zero_rows")]
    lost = [e for e in await store.job_timeline(mine.id) if e["kind"] == "heartbeat_lost"]
    assert lost == []


async def test_the_keepalive_rides_on_the_extension_and_goes_alone_only_when_idle(
    store: Store, tenure_dsn: str
) -> None:
    """Idle, the thread stamps the worker's registry row once per keep-alive period;
    holding a lease beaten more often than that (0.4 s < 0.6 s), it sends extensions only
    (each stamps the row), never a keep-alive of its own."""
    registration = WorkerRegistration(
        name="w", host="h", pid=1, version="t", tools=("t",), concurrency=1, keepalive_ms=600
    )
    await store.register_worker(registration)
    thread = HeartbeatThread(tenure_dsn, "w", registration)
    touches: list[float] = []
    touch = thread._conn.touch_worker

    def counted(worker: WorkerRegistration, timeout: float) -> None:
        touches.append(time.monotonic())
        touch(worker, timeout)

    thread._conn.touch_worker = counted  # type: ignore[method-assign]
    recorded = Recorded(thread)

    async def seen() -> datetime:
        return next(w for w in await store.list_workers(10, 10) if w["name"] == "w")["last_seen_at"]

    thread.start()
    try:
        before = await seen()
        wait_until(lambda: len(touches) >= 2, timeout=10, message="no keep-alive while idle")
        assert await seen() > before
        await store.enqueue(new_job("kept"))
        [job] = await store.claim("w", {"t": LEASE_MS}, 1)
        thread.hold(held(job, time.monotonic()))
        wait_until(lambda: len(recorded.snapshot()) >= 2, timeout=10, message="no extension")
        idle_touches = len(touches)
        stamped = await seen()
        wait_until(lambda: len(recorded.snapshot()) >= 6, timeout=10, message="no more beats")
        assert len(touches) <= idle_touches + 1  # at most one already due at the hold
        assert await seen() > stamped  # the extensions kept the row alive
    finally:
        thread.stop()


async def test_a_failing_step_does_not_end_the_thread_nor_its_beats(
    store: Store, tenure_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An unexpected error in a keep-alive (not a database error) is logged, and the same
    thread goes on extending the lease it holds."""
    registration = WorkerRegistration(
        name="w", host="h", pid=1, version="t", tools=("t",), concurrency=1, keepalive_ms=200
    )
    await store.register_worker(registration)
    thread = HeartbeatThread(tenure_dsn, "w", registration)
    failures: list[float] = []

    def broken(worker: WorkerRegistration, timeout: float) -> None:
        failures.append(time.monotonic())
        raise RuntimeError("a bug in a keep-alive")

    thread._conn.touch_worker = broken  # type: ignore[method-assign]
    recorded = Recorded(thread)
    thread.start()
    try:
        wait_until(lambda: failures, timeout=10, message="the keep-alive never ran")
        await store.enqueue(new_job("kept"))
        [job] = await store.claim("w", {"t": LEASE_MS}, 1)
        thread.hold(held(job, time.monotonic()))
        wait_until(lambda: len(recorded.snapshot()) >= 2, timeout=10, message="no extension")
        assert thread._thread.is_alive()
    finally:
        thread.stop()
    assert "heartbeat step _keep_alive failed" in caplog.text
