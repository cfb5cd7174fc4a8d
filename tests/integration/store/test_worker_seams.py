"""Where the worker meets the database, decided by what the database answers:

- an outcome the database cannot store is a verdict on that row alone, never the batch;
- a lease's local clock starts when its claim is sent on a connection, not before the
  claim waited for one;
- an idle worker told that another owner's lease has already ended claims at once.
"""

from __future__ import annotations

import asyncio
import time

from tests.integration.store.helpers import new_job

from tenure import App, Context
from tenure._store import Finish, Store
from tenure._worker._completer import Completer
from tenure._worker._ownership import Ownership

LEASES = {"t": 30_000}


async def test_an_unstorable_outcome_fails_its_own_job_and_the_batch_commits(
    store: Store,
) -> None:
    await store.enqueue_many([new_job(f"k{n}") for n in range(3)])
    jobs = await store.claim("w", LEASES, 3)
    completer = Completer(store, "w", lambda _: None)
    completer.start()
    try:
        # The middle outcome carries text jsonb refuses (a NUL): the statement for the
        # batch fails as a whole, and must not take the other two down with it.
        outcomes = [
            Finish(jobs[0].id, jobs[0].token, "succeeded", result_json="1"),
            Finish(jobs[1].id, jobs[1].token, "failed", error={"code": "x", "m": "a\x00b"}),
            Finish(jobs[2].id, jobs[2].token, "succeeded", result_json="3"),
        ]
        verdicts = await asyncio.wait_for(
            asyncio.gather(
                *(
                    completer.commit(job, finish, Ownership(time.monotonic(), 30))
                    for job, finish in zip(jobs, outcomes, strict=True)
                )
            ),
            10,
        )
    finally:
        await completer.stop()
    assert verdicts == [True, True, True]
    rows = {j.id: await store.get_job(j.id) for j in jobs}
    assert [rows[j.id].state for j in jobs] == ["succeeded", "failed", "succeeded"]
    assert [rows[j.id].result for j in jobs] == [1, None, 3]
    bad = rows[jobs[1].id].error
    assert bad is not None and bad["code"] == "bad_result"
    assert bad["type"] == "UntranslatableCharacter"


async def test_a_claims_lease_clock_starts_once_it_has_a_connection(tenure_dsn: str) -> None:
    """With the only connection busy for a while, the claim waits for it; the lease it is
    granted afterwards is counted from the moment it was sent, so it is not spent."""
    store = Store(tenure_dsn, max_size=1)
    await store.open()
    try:
        await store.enqueue(new_job("k"))
        held = asyncio.Event()
        released_at = 0.0

        async def occupy() -> None:
            nonlocal released_at
            async with store._pool.connection() as conn:
                held.set()
                await conn.execute("SELECT pg_sleep(0.5)")
            released_at = time.monotonic()

        occupant = asyncio.create_task(occupy())
        await held.wait()
        asked_at = time.monotonic()
        (job,) = await store.claim("w", LEASES, 1)
        await occupant
        assert job.sent_at >= released_at - 0.05 > asked_at
        assert 29 < job.lease_remaining <= 30
    finally:
        await store.close()


async def test_an_idle_worker_told_a_lease_already_ended_claims_now(
    store: Store, tenure_dsn: str
) -> None:
    app = App(tenure_dsn)

    @app.tool("t", lease=30, heartbeat=5, jitter=1)
    async def t(ctx: Context) -> None:
        return None

    worker = app.worker(poll_interval=60)
    await store.enqueue(new_job("k"))
    (job,) = await store.claim("other", LEASES, 1)
    async with store._pool.connection() as conn:  # its owner died a moment ago
        await conn.execute(
            "UPDATE tenure_jobs SET lease_until = clock_timestamp() - interval '1 ms'"
        )
        # ... and so did its session's beats (migration 0023), which its lease follows.
        await conn.execute(
            "UPDATE tenure_sessions SET beat_at = clock_timestamp() - interval '1 hour'"
        )
    # The expiry is behind us: not "nothing ahead" (a whole poll), but "claim now".
    assert await worker._idle_wait(store) == 0.0
    # Nothing to claim behind an expiry that stays past (a last attempt, a full key):
    # each further look backs off instead of spinning, and never past a poll.
    waits = []
    for _ in range(20):
        worker._look_again_at = 0.0
        waits.append(await worker._idle_wait(store))
    assert 0 < waits[0] < waits[5] < waits[-1] <= 60
    assert job.tool == "t"
    await app.aclose()
