"""The journal's statements, writer and pruner, and doctor's checks, on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from tests.integration.store.helpers import new_job
from tests.support.waiting import wait_until_async

from tenure._log import Event
from tenure._maintenance._journal_pruner import JournalPruner, JournalPrunerConfig
from tenure._observe._doctor import check_indexes, check_schema, query_plan_scans
from tenure._observe._journal import JournalWriter
from tenure._observe._metrics import DatabaseGauges, ToolLabels
from tenure._store import EventQuery, Finish, JournalRow, Store

DAY_MS = 86_400_000


def _ms(delta: timedelta) -> float:
    return delta.total_seconds() * 1000


def _duration(event: Mapping[str, object]) -> int:
    """An event's duration_ms, which these events must have."""
    duration = event["duration_ms"]
    assert isinstance(duration, int), event
    return duration


async def _past(store: Store, moment: datetime, ms: float) -> None:
    """Poll until the database's clock is ``ms`` past ``moment``."""

    async def passed() -> bool:
        return _ms(await store.db_now() - moment) >= ms

    await wait_until_async(passed, message=f"the database's clock never passed {moment} + {ms} ms")


async def _expire(store: Store, job_id: int, past_ms: float = 0) -> datetime:
    """Wait (on the database's clock) until the job's lease has run out; its end."""
    lease_until = (await store.job_detail(job_id))["lease_until"]
    assert lease_until is not None
    await _past(store, lease_until, past_ms)
    return lease_until


async def test_rescued_lease_journals_the_expiry_then_the_failure(store: Store) -> None:
    await store.enqueue(new_job("last", attempts=1))
    [job] = await store.claim("w1", {"t": 200}, 1)
    lease_until = await _expire(store, job.id, past_ms=100)
    assert await store.fail_exhausted_leases(10) == [job.id]
    found = _ms(await store.db_now() - lease_until)
    events = await store.job_timeline(job.id)
    assert [e["kind"] for e in events] == ["job_claimed", "lease_expired", "failed"]
    for event in events:
        assert (event["token"], event["attempt"], event["worker"]) == (job.token, 1, "w1")
    assert events[1]["code"] == events[2]["code"] == "lease_expired"
    # How long past its end the lease was found: at least the 100 ms waited, at most
    # the time to the test's own reading after (a unit or a reference point off fails).
    assert 100 <= _duration(events[1]) <= found + 1 and events[2]["duration_ms"] is None


@pytest.mark.parametrize("lease", ["session", "row"])
async def test_a_reclaim_journals_how_long_past_its_end_the_lease_was_found(
    store: Store, tenure_dsn: str, lease: str
) -> None:
    """Both kinds of lease an hour past their end: the one that follows its session (the
    claim's orphaned branch) and one of its own row (frozen; the expired branch)."""
    await store.enqueue(new_job("k"))
    (job,) = await store.claim("w", {"t": 30_000}, 1)
    with psycopg.connect(tenure_dsn, autocommit=True) as conn:
        conn.execute("UPDATE tenure_sessions SET beat_at = beat_at - interval '1 hour'")
        conn.execute(
            "UPDATE tenure_jobs SET lease_until = lease_until - interval '1 hour',"
            " lease_ms = CASE WHEN %s THEN lease_ms END WHERE id = %s",
            (lease == "session", job.id),
        )
        row = conn.execute(
            "SELECT tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at) FROM tenure_jobs j"
            " LEFT JOIN tenure_sessions s ON s.owner = j.owner WHERE j.id = %s",
            (job.id,),
        ).fetchone()
    assert row is not None
    end: datetime = row[0]
    before = await store.db_now()
    (taken,) = await store.claim("heir", {"t": 30_000}, 1)
    after = await store.db_now()
    assert (taken.id, taken.previous_token) == (job.id, job.token)
    events = await store.job_timeline(job.id)
    assert [e["kind"] for e in events] == ["job_claimed", "lease_expired", "job_claimed"]
    for event in events[1:]:
        assert _ms(before - end) - 1 <= _duration(event) <= _ms(after - end) + 1, event
    assert _duration(events[1]) >= 3_500_000  # an hour late, not since the claim


async def test_commit_and_cancel_journal_durations_on_the_database_clock(store: Store) -> None:
    await store.enqueue(new_job("a"))
    await store.enqueue(new_job("b"))
    before = await store.db_now()
    jobs = await store.claim("w1", {"t": 60_000}, 2)
    done, running = jobs
    await _past(store, await store.db_now(), 100)  # both attempts run 100 ms or more
    verdict = await store.finish_many("w1", [Finish(done.id, done.token, "succeeded", "{}")])
    assert verdict == {done.id: True}
    assert await store.cancel(running.id) is not None
    (succeeded,) = [e for e in await store.job_timeline(done.id) if e["kind"] == "succeeded"]
    (cancelled,) = [e for e in await store.job_timeline(running.id) if e["kind"] == "cancelled"]
    ran = _ms(await store.db_now() - before)  # no attempt can have run longer than this
    assert 100 <= _duration(succeeded) <= ran + 1 and succeeded["code"] is None
    assert 100 <= _duration(cancelled) <= ran + 1 and cancelled["code"] == "cancelled"
    queued = await store.enqueue(new_job("never ran"))
    await store.cancel(queued.id)
    (not_run,) = [e for e in await store.job_timeline(queued.id) if e["kind"] == "cancelled"]
    assert not_run["duration_ms"] is None  # it was never running


async def test_writer_batches_back_dates_and_copies_the_payload_hash(store: Store) -> None:
    job = await store.enqueue(new_job("hashed"))
    async with store._pool.connection() as conn:
        await conn.execute("UPDATE tenure_jobs SET payload_hmac = 'feed' WHERE id = %s", (job.id,))
    writer = JournalWriter(store, worker="w1")
    writer.start()
    late = Event(
        "ownership_unknown",
        job=job.id,
        token=7,
        attempt=1,
        tool="t",
        worker="w1",
        fields={"reason": "db_error", "since_confirmed": 0.25},
        monotonic=time.monotonic() - 3.0,  # it happened three seconds ago
    )
    writer(late)
    now = time.monotonic()  # (an Event's default, 0.0, would date it at the machine's boot)
    writer(
        Event(
            "tool_request_started",
            job=job.id,
            worker="w1",
            fields={"operation": "x"},
            monotonic=now,
        )
    )
    writer(Event("ownership_unknown", job=job.id, worker="someone else", monotonic=now))
    await writer.stop()
    assert writer.written == 2
    unknown, started = await store.job_timeline(job.id)
    assert (unknown["kind"], unknown["token"], unknown["code"], unknown["duration_ms"]) == (
        "ownership_unknown",
        7,
        "db_error",
        250,
    )
    assert unknown["payload_hmac"] == started["payload_hmac"] == "feed"
    lag = (await store.db_now() - unknown["at"]).total_seconds()
    assert 2.9 < lag < 10, lag  # back-dated by the time it waited in the buffer
    assert started["detail"] == {"operation": "x"}


async def test_a_row_is_dated_when_seen_however_long_its_batch_waited(tenure_dsn: str) -> None:
    """After an outage the writer's batch may wait for a connection: the rows in it are
    still dated when the worker observed them, not when the batch got through."""
    store = Store(tenure_dsn, max_size=1)
    await store.open()
    try:
        job = await store.enqueue(new_job("dated"))
        with psycopg.connect(tenure_dsn) as clock:
            seen_at = clock.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        observed = Event("ownership_unknown", job=job.id, worker="w", monotonic=time.monotonic())
        busy = asyncio.Event()

        async def occupy() -> None:  # the only connection is taken for 1.5 s
            async with store._pool.connection() as conn:
                busy.set()
                await conn.execute("SELECT pg_sleep(1.5)")

        occupant = asyncio.create_task(occupy())
        await busy.wait()
        writer = JournalWriter(store, worker="w")
        writer.start()
        writer(observed)
        await writer.stop(timeout=10)
        await occupant
        assert writer.written == 1
        (row,) = await store.job_timeline(job.id)
        late = (row["at"] - seen_at).total_seconds()
        assert late < 0.5, late  # not ~1.5 s: the wait for the connection is not counted
    finally:
        await store.close()


def _row(kind: str, age_ms: int) -> JournalRow:
    """A row observed ``age_ms`` ago on this process's clock."""
    observed = time.monotonic() - age_ms / 1000
    return JournalRow(kind, None, None, None, "w", "t", None, None, {}, observed_at=observed)


async def test_pruner_deletes_old_rows_in_bounded_batches(store: Store) -> None:
    await store.record_events([_row("succeeded", 30 * DAY_MS) for _ in range(7)])
    await store.record_events([_row("succeeded", 0) for _ in range(3)])
    pruner = JournalPruner(store, JournalPrunerConfig(retention=14 * 86400, batch=3))
    assert await store.count_old_events(pruner.retention_ms, 100) == 7
    batches: list[int] = []
    assert await pruner.run_once(batches.append) == 7
    assert batches == [3, 3, 1]
    assert await pruner.run_once() == 0
    assert len(await store.find_events(EventQuery(limit=100))) == 3


async def _load(store: Store, dsn: str) -> None:
    """Enough rows for the planner to judge like production: finished, queued, running."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO tenure_jobs (tool, state, idempotency_key, payload, payload_hash,"
            " max_attempts, finished_at)"
            " SELECT 't', 'succeeded', 'done' || g, '{}', 'h', 3, now()"
            " FROM generate_series(1, 20000) g"
        )
        await conn.execute(
            "INSERT INTO tenure_events (kind, job_id, token, attempt, worker, tool)"
            " SELECT 'succeeded', g, g, 1, 'w', 't' FROM generate_series(1, 20000) g"
        )
    for i in range(30):
        await store.enqueue(new_job(f"queued {i}"))
    await store.claim("w1", {"t": 60_000}, 10)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("ANALYZE tenure_jobs")
        await conn.execute("ANALYZE tenure_events")


async def test_every_observability_statement_runs_and_uses_its_index(
    store: Store, tenure_dsn: str
) -> None:
    before = await store.db_now()
    await _load(store, tenure_dsn)
    assert [c.status for c in await check_schema(store)] == ["ok"]
    checks = await check_indexes(store, None)
    assert all(c.status == "ok" for c in checks), checks

    def uses(plan: Any, index: str) -> bool:
        used, scanned = query_plan_scans(plan)
        return index in used and "tenure_jobs" not in scanned and "tenure_events" not in scanned

    assert uses(await store.explain("notable_events", {"limit": 40}), "tenure_events_notable")
    assert uses(await store.explain("running_leases", {"limit": 200}), "tenure_jobs_lease_until")
    depth_plan = await store.explain("queue_depth", {"cap": 1000})
    assert uses(depth_plan, "tenure_jobs_queued") or uses(depth_plan, "tenure_jobs_tenant_queued")
    prune = {"older_than_ms": DAY_MS, "limit": 100}
    assert uses(await store.explain("prune_events", prune), "tenure_events_at")

    running = await store.running_leases(200)
    assert len(running) == 10 and running[0]["lease_until"] <= running[-1]["lease_until"]
    assert {r["tool"]: r["running"] for r in await store.running_summary(1000)} == {"t": 10}
    [depth] = await store.queue_depth(1000)
    since_load = (await store.db_now() - before).total_seconds()
    assert (depth["depth"], depth["capped"]) == (20, False)
    assert (
        depth["oldest_age"] is not None and 0 <= depth["oldest_age"] <= since_load
    )  # seconds since a job of _load's was due
    [capped] = await store.queue_depth(5)
    assert (capped["depth"], capped["capped"]) == (5, True)
    assert await store.throughput(60_000, 5_000, 1000)
    assert await store.notable_events(10) == []
    assert await store.journal_head() >= 20_000
    assert await store.pipeline_runs(5) == []  # the pipeline tables exist, no runs yet
    found = await store.find_events(EventQuery(kinds=("succeeded",), tool="t", limit=5))
    assert len(found) == 5 and all(e["kind"] == "succeeded" for e in found)
    assert await store.find_events(EventQuery(reclaims=True, limit=5)) == []


async def test_database_gauges_count_the_journal_since_they_started(store: Store) -> None:
    labels = ToolLabels()
    labels.register("t", {"model": "m"})
    gauges = DatabaseGauges(labels, journal_counts=True)
    await store.record_events([_row("succeeded", 0)])
    await gauges.refresh(store)  # the first scrape only notes where the journal stands
    await store.record_events([_row("lease_expired", 0), _row("lease_expired", 0)])
    await gauges.refresh(store)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in gauges.collect()
        for s in family.samples
    }
    key = (("kind", "lease_expired"), ("model", "m"), ("provider", ""), ("tool", "t"))
    assert samples[("tenure_journal_events_total", key)] == 2
    # The succeeded row predates the first scrape: a known tool's series shows 0, not 1.
    succeeded = (("kind", "succeeded"), *key[1:])
    assert samples[("tenure_journal_events_total", succeeded)] == 0
    assert samples[("tenure_database_up", ())] == 1
