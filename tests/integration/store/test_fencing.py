"""Heartbeats and commits only ever succeed for the current owner's token."""

import asyncio
from datetime import timedelta

import psycopg
from tests.integration.store.helpers import new_job
from tests.support.waiting import wait_until_async

from tenure._store import ClaimedJob, Finish, LeaseConnection, Store


async def _claimed(store: Store, lease_ms: int = 5_000):  # type: ignore[no-untyped-def]
    await store.enqueue(new_job("job"))
    [job] = await store.claim("owner", {"t": lease_ms}, 1)
    return job


async def _lease_over(store: Store, job: ClaimedJob) -> bool:
    """Whether the database's clock has passed the job's lease."""
    return await store.db_now() > job.lease_until


async def test_heartbeat_extends_only_for_owner_and_token(store: Store, tenure_dsn: str) -> None:
    job = await _claimed(store)
    lease = LeaseConnection(tenure_dsn)
    try:
        ok, stale, stranger = await asyncio.to_thread(
            lambda: (
                lease.extend("owner", [(job.id, job.token, 5_000)], 5),
                lease.extend("owner", [(job.id, job.token - 1, 5_000)], 5),
                lease.extend("intruder", [(job.id, job.token, 5_000)], 5),
            )
        )
    finally:
        lease.close()
    assert ok[0].remaining is not None and 4.9 < ok[0].remaining <= 5.0
    assert stale[0].lease_until is None
    assert stranger[0].lease_until is None


async def test_heartbeat_after_lease_until_gets_zero_rows(store: Store, tenure_dsn: str) -> None:
    job = await _claimed(store, lease_ms=500)
    await wait_until_async(lambda: _lease_over(store, job), message="the lease never ran out")
    lease = LeaseConnection(tenure_dsn)
    try:
        [late] = await asyncio.to_thread(lease.extend, "owner", [(job.id, job.token, 500)], 5)
    finally:
        lease.close()
    assert late.lease_until is None, "an expired lease must not be resurrected"


async def test_batched_heartbeat_answers_each_job(store: Store, tenure_dsn: str) -> None:
    await store.enqueue_many([new_job(f"k{i}") for i in range(50)])
    jobs = await store.claim("owner", {"t": 5_000}, 50)
    held = [(j.id, j.token if i % 2 else j.token + 1000, 5_000) for i, j in enumerate(jobs)]
    lease = LeaseConnection(tenure_dsn)
    try:
        answers = await asyncio.to_thread(lease.extend, "owner", held, 5)
    finally:
        lease.close()
    extended = {a.job_id for a in answers if a.lease_until is not None}
    assert extended == {j.id for i, j in enumerate(jobs) if i % 2}
    assert len(answers) == 50


async def test_commit_with_a_stale_token_is_rejected_and_changes_nothing(store: Store) -> None:
    job = await _claimed(store)
    verdict = await store.finish_many(
        "owner", [Finish(job.id, job.token - 1, "succeeded", result_json='{"stale": true}')]
    )
    assert verdict == {job.id: False}
    row = await store.get_job(job.id)
    assert row.state == "running" and row.result is None
    verdict = await store.finish_many(
        "owner", [Finish(job.id, job.token, "succeeded", result_json='{"ok": 1}')]
    )
    assert verdict == {job.id: True}
    assert (await store.get_job(job.id)).result == {"ok": 1}
    again = await store.finish_many(
        "owner", [Finish(job.id, job.token, "succeeded", result_json='{"ok": 2}')]
    )
    assert again == {job.id: False}, "a second commit of one job must never land"
    assert (await store.get_job(job.id)).result == {"ok": 1}


async def test_commit_after_the_lease_expired_is_rejected(store: Store) -> None:
    job = await _claimed(store, lease_ms=500)
    await wait_until_async(lambda: _lease_over(store, job), message="the lease never ran out")
    verdict = await store.finish_many(
        "owner", [Finish(job.id, job.token, "succeeded", result_json="1")]
    )
    assert verdict == {job.id: False}
    assert (await store.get_job(job.id)).state == "running"


async def test_release_refunds_the_attempt(store: Store) -> None:
    job = await _claimed(store)
    verdict = await store.finish_many(
        "owner", [Finish(job.id, job.token, "queued", refund_attempt=True)]
    )
    assert verdict == {job.id: True}
    row = await store.get_job(job.id)
    assert row.state == "queued" and row.attempt == 0
    assert [e["kind"] for e in await store.job_timeline(job.id)] == ["job_claimed", "released"]


async def test_cancel_makes_the_owner_lose_its_lease(store: Store, tenure_dsn: str) -> None:
    job = await _claimed(store)
    cancelled = await store.cancel(job.id)
    assert cancelled is not None and cancelled.job.state == "cancelled"
    assert cancelled.held_until == job.lease_until  # the lease its owner held until then
    assert await store.cancel(job.id) is None
    lease = LeaseConnection(tenure_dsn)
    try:
        [answer] = await asyncio.to_thread(lease.extend, "owner", [(job.id, job.token, 5_000)], 5)
        states = await asyncio.to_thread(lease.states, [job.id], 5)
    finally:
        lease.close()
    assert answer.lease_until is None and states == {job.id: "cancelled"}
    verdict = await store.finish_many("owner", [Finish(job.id, job.token, "succeeded", "1")])
    assert verdict == {job.id: False}
    retried = await store.retry(job.id)
    assert retried is not None and retried.state == "queued"


async def test_a_cancel_reports_the_lease_as_an_extension_that_committed_meanwhile_left_it(
    store: Store, tenure_dsn: str
) -> None:
    """held_until is what the owner may count on: an extension that held the row while the
    cancel waited for it counts (a statement snapshot taken before it would not see it)."""
    job = await _claimed(store)
    extended = job.lease_until + timedelta(hours=1)
    async with await psycopg.AsyncConnection.connect(tenure_dsn) as extension:
        await extension.execute(
            "UPDATE tenure_jobs SET lease_until = %(until)s WHERE id = %(id)s",
            {"until": extended, "id": job.id},
        )  # not committed: the row stays locked
        cancelling = asyncio.create_task(store.cancel(job.id))
        await wait_until_async(
            lambda: _waits_for_a_lock(tenure_dsn), message="the cancel never waited"
        )
        await extension.commit()
    cancelled = await cancelling
    assert cancelled is not None and cancelled.held_until == extended
    queued = await store.enqueue(new_job("never-ran"))
    never = await store.cancel(queued.id)
    assert never is not None and never.held_until is None  # nothing held a lease


async def _waits_for_a_lock(dsn: str) -> bool:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        row = await cursor.fetchone()
    return row is not None and row[0] > 0


async def test_a_retry_after_the_last_attempt_becomes_a_failure(store: Store) -> None:
    await store.enqueue(new_job("once", attempts=1))
    [job] = await store.claim("owner", {"t": 5_000}, 1)
    verdict = await store.finish_many(
        "owner", [Finish(job.id, job.token, "queued", error={"code": "retryable"})]
    )
    assert verdict == {job.id: True}
    row = await store.get_job(job.id)
    assert (row.state, row.attempt, row.max_attempts) == ("failed", 1, 1)
    assert await store.claim("owner", {"t": 5_000}, 1) == []
