"""Leases that follow their worker's session (migration 0023), on the real database.

A process's heartbeat is one update of its session row, whatever the number of leases; a
late beat is refused and revives nothing; a lease the heartbeat no longer names is frozen
where it stands and runs out; and a lease taken before the upgrade keeps its end and is
extended, committed or reclaimed by the new statements as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from tests.integration.store.helpers import new_job
from tests.support.schemas import fresh_schema_dsn

from tenure._store import Finish, LeaseConnection, Store, migrate
from tenure._store._migrate import discover

LEASE_MS = 30_000
LEASES = {"t": LEASE_MS}


def _rows(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


async def test_one_beat_extends_every_lease_of_the_process_and_writes_no_job_row(
    store: Store, tenure_dsn: str
) -> None:
    await store.enqueue_many([new_job(f"k{i}") for i in range(50)])
    jobs = await store.claim("w", LEASES, 50)
    versions = _rows(tenure_dsn, "SELECT id, xmin::text FROM tenure_jobs ORDER BY id")
    lease = LeaseConnection(tenure_dsn)
    try:
        answers = lease.extend("w", [(j.id, j.token, LEASE_MS) for j in jobs], 5.0)
    finally:
        lease.close()
    by_id = {j.id: j for j in jobs}
    assert len(answers) == 50
    assert all(
        a.lease_until is not None and a.lease_until >= by_id[a.job_id].lease_until for a in answers
    )
    # The jobs' rows are untouched: the beat was one update of the session row.
    assert _rows(tenure_dsn, "SELECT id, xmin::text FROM tenure_jobs ORDER BY id") == versions


async def test_a_session_is_as_short_as_the_leases_it_gave_not_the_tools_it_offers(
    store: Store, tenure_dsn: str
) -> None:
    """A worker that also offers a short-lease tool it never runs must not look stale
    between its beats (every claim and rescuer round would walk its running jobs)."""
    offers = {"long": 90_000, "short": 6_000}
    assert await store.claim("w", offers, 10) == []
    assert _rows(tenure_dsn, "SELECT owner FROM tenure_sessions") == []  # took nothing
    await store.enqueue(new_job("a", tool="long"))
    await store.claim("w", offers, 10)
    shortest = "SELECT min_lease_ms FROM tenure_sessions WHERE owner = 'w'"
    assert _rows(tenure_dsn, shortest) == [(90_000,)]
    await store.enqueue(new_job("b", tool="short"))
    await store.claim("w", offers, 10)
    assert _rows(tenure_dsn, shortest) == [(6_000,)]
    await store.enqueue(new_job("c", tool="long"))
    await store.claim("w", offers, 10)
    assert _rows(tenure_dsn, shortest) == [(6_000,)]  # never longer than a lease it gave


async def test_a_late_beat_is_refused_and_the_lease_goes_to_another_worker(
    store: Store, tenure_dsn: str
) -> None:
    await store.enqueue(new_job("k"))
    (job,) = await store.claim("w", LEASES, 1)
    # The process went silent for longer than its lease (the clock moves for its session and
    # for the end its claim gave the job).
    _rows(
        tenure_dsn,
        "UPDATE tenure_sessions SET beat_at = beat_at - interval '1 hour' RETURNING owner",
    )
    _rows(
        tenure_dsn,
        "UPDATE tenure_jobs SET lease_until = lease_until - interval '1 hour' RETURNING id",
    )
    lease = LeaseConnection(tenure_dsn)
    try:
        (answer,) = lease.extend("w", [(job.id, job.token, LEASE_MS)], 5.0)
    finally:
        lease.close()
    assert answer.lease_until is None  # zero rows: lost, never revived
    (taken,) = await store.claim("heir", LEASES, 1)
    assert (taken.id, taken.previous_owner, taken.previous_token) == (job.id, "w", job.token)
    verdicts = await store.finish_many(
        "w", [Finish(job.id, job.token, "succeeded", result_json="null")]
    )
    assert verdicts == {job.id: False}


async def test_a_lease_the_heartbeat_stops_naming_is_frozen_where_it_stands(
    store: Store, tenure_dsn: str
) -> None:
    await store.enqueue_many([new_job(f"k{i}") for i in range(2)])
    watched, unobservable = await store.claim("w", LEASES, 2)
    query = "SELECT lease_ms, lease_until FROM tenure_jobs WHERE id = %s"
    lease = LeaseConnection(tenure_dsn)
    try:
        # It was claimed after the session's last beat, so the next beat may still carry it
        # (it could be a claim the heartbeat has not heard of yet); the one after freezes it.
        lease.extend("w", [(watched.id, watched.token, LEASE_MS)], 5.0)
        lease.extend("w", [(watched.id, watched.token, LEASE_MS)], 5.0)
        [(lease_ms, frozen_at)] = _rows(tenure_dsn, query, (unobservable.id,))
        (answer,) = lease.extend("w", [(watched.id, watched.token, LEASE_MS)], 5.0)
    finally:
        lease.close()
    # A lease of its own row from now on: beats no longer move it, so it runs out and is
    # reclaimed like any expired lease, while the watched one goes on.
    assert lease_ms is None
    assert _rows(tenure_dsn, query, (unobservable.id,)) == [(None, frozen_at)]
    assert answer.lease_until is not None and answer.lease_until > frozen_at
    verdicts = await store.finish_many(
        "w", [Finish(watched.id, watched.token, "succeeded", result_json="null")]
    )
    assert verdicts == {watched.id: True}


async def _before_sessions(database_dsn: str) -> str:
    """A schema migrated up to 0022, as a database looked before this migration."""
    dsn = fresh_schema_dsn(database_dsn, "u")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for migration in discover("tenure._store.migrations"):
            if migration.version >= 23:
                break
            with conn.transaction():
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS tenure_migrations (version integer PRIMARY KEY,"
                    " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
                )
                conn.execute(sql.SQL(migration.statements))
                conn.execute(
                    "INSERT INTO tenure_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
    return dsn


@pytest.fixture
async def upgraded(database_dsn: str) -> AsyncIterator[tuple[str, list[tuple[int, int]]]]:
    """Two jobs running under leases taken before 0023 (by the claim of that version: the
    lease on the job's row), then the upgrade."""
    dsn = await _before_sessions(database_dsn)
    held = [
        (int(r[0]), int(r[1]))
        for r in _rows(
            dsn,
            """INSERT INTO tenure_jobs (tool, idempotency_key, payload, payload_hash,
                                        max_attempts, state, owner, token, attempt,
                                        lease_until, heartbeat_at, claimed_at)
               SELECT 't', 'old' || g, '{}', 'h', 3, 'running', 'old-worker',
                      nextval('tenure_fence_token'), 1,
                      clock_timestamp() + interval '30 seconds', clock_timestamp(),
                      clock_timestamp()
               FROM generate_series(1, 2) g
               RETURNING id, token""",
        )
    ]
    migrate(dsn)
    yield dsn, sorted(held)


async def test_leases_taken_before_the_upgrade_keep_their_end_and_are_extended_and_committed(
    upgraded: tuple[str, list[tuple[int, int]]],
) -> None:
    dsn, [(kept, kept_token), (expiring, expiring_token)] = upgraded
    [(before,)] = _rows(dsn, "SELECT lease_until FROM tenure_jobs WHERE id = %s", (kept,))
    lease = LeaseConnection(dsn)
    try:
        (answer,) = lease.extend("old-worker", [(kept, kept_token, 60_000)], 5.0)
    finally:
        lease.close()
    assert answer.lease_until is not None and answer.lease_until > before  # row by row
    store = Store(dsn, max_size=4)
    await store.open()
    try:
        verdicts = await store.finish_many(
            "old-worker", [Finish(kept, kept_token, "succeeded", result_json="null")]
        )
        assert verdicts == {kept: True}
        # The other one's holder died: its lease runs out where it stood and a worker of the
        # new version takes it over under a new token.
        _rows(
            dsn,
            "UPDATE tenure_jobs SET lease_until = clock_timestamp() - interval '1 s'"
            " WHERE id = %s RETURNING id",
            (expiring,),
        )
        (taken,) = await store.claim("new-worker", LEASES, 1)
        assert (taken.id, taken.previous_owner, taken.previous_token) == (
            expiring,
            "old-worker",
            expiring_token,
        )
        assert taken.token > expiring_token
    finally:
        await store.close()
