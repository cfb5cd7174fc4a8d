"""The heartbeat's fast path on the real database: a session beat (migration 0023).

One update of the process's session row confirms every lease that follows it and reads no
job row; it is refused once the session has been silent for its shortest lease (the full
extension then decides lease by lease); it freezes the leases it is told of by name; and
the heartbeat thread sends a full extension every few session beats, which freezes a lease
the process holds without knowing it.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from tests.integration.store.helpers import new_job
from tests.integration.store.test_heartbeat_thread import Recorded, held
from tests.support.waiting import wait_until

from tenure._errors import StoreError
from tenure._store import LeaseConnection, Store
from tenure._worker._heartbeat import RECONCILE_EVERY, HeartbeatThread
from tenure._worker._ownership import Ownership

LEASE_MS = 30_000
LEASES = {"t": LEASE_MS}


def _rows(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


def _lease_ends(dsn: str) -> dict[int, Any]:
    return dict(
        _rows(
            dsn,
            "SELECT j.id, tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at)"
            " FROM tenure_jobs j LEFT JOIN tenure_sessions s ON s.owner = j.owner"
            " WHERE j.state = 'running'",
        )
    )


async def test_a_session_beat_moves_every_lease_and_touches_no_job_row(
    store: Store, tenure_dsn: str
) -> None:
    await store.enqueue_many([new_job(f"k{i}") for i in range(20)])
    jobs = await store.claim("w", LEASES, 20)
    assert all(j.session_lease for j in jobs)
    versions = _rows(tenure_dsn, "SELECT id, xmin::text FROM tenure_jobs ORDER BY id")
    before = _lease_ends(tenure_dsn)
    lease = LeaseConnection(tenure_dsn)
    try:
        beat = lease.beat_session("w", LEASE_MS, [], 5.0)
    finally:
        lease.close()
    assert beat.beat_at is not None and beat.frozen == []
    assert 0.0 <= beat.age < 5.0
    after = _lease_ends(tenure_dsn)
    assert all(after[j.id] > before[j.id] for j in jobs)
    assert _rows(tenure_dsn, "SELECT id, xmin::text FROM tenure_jobs ORDER BY id") == versions


async def test_a_session_beat_is_refused_once_the_session_was_silent_too_long(
    store: Store, tenure_dsn: str
) -> None:
    await store.enqueue(new_job("k"))
    await store.claim("w", LEASES, 1)
    # Silent for longer than the shortest lease the caller holds, though not for the
    # session's own recorded shortest: the lesser of the two decides.
    _rows(
        tenure_dsn,
        "UPDATE tenure_sessions SET beat_at = beat_at - interval '2 seconds' RETURNING owner",
    )
    (before,) = _rows(tenure_dsn, "SELECT beat_at FROM tenure_sessions WHERE owner = 'w'")
    lease = LeaseConnection(tenure_dsn)
    try:
        refused = lease.beat_session("w", 1_000, [], 5.0)
        missing = lease.beat_session("nobody", 1_000, [], 5.0)
    finally:
        lease.close()
    assert refused.beat_at is None and missing.beat_at is None
    # A refused beat moved nothing: the full extension must look at each lease.
    assert _rows(tenure_dsn, "SELECT beat_at FROM tenure_sessions WHERE owner = 'w'") == [before]


async def test_a_session_beat_freezes_the_leases_it_names_where_they_stand(
    store: Store, tenure_dsn: str
) -> None:
    await store.enqueue_many([new_job(f"k{i}") for i in range(3)])
    quiet, live, other = await store.claim("w", LEASES, 3)
    ends = _lease_ends(tenure_dsn)
    lease = LeaseConnection(tenure_dsn)
    try:
        # A wrong token freezes nothing: only this process's lease under that token.
        beat = lease.beat_session(
            "w", LEASE_MS, [(quiet.id, quiet.token), (other.id, other.token + 1)], 5.0
        )
    finally:
        lease.close()
    assert beat.beat_at is not None and beat.frozen == [quiet.id]
    rows = dict(_rows(tenure_dsn, "SELECT id, lease_ms FROM tenure_jobs"))
    assert rows[quiet.id] is None and rows[live.id] == LEASE_MS and rows[other.id] == LEASE_MS
    after = _lease_ends(tenure_dsn)
    assert after[quiet.id] == ends[quiet.id]  # frozen where the previous beat left it
    assert after[live.id] > ends[live.id]


async def test_the_thread_beats_its_session_and_reconciles_every_few_beats(
    store: Store, tenure_dsn: str
) -> None:
    """Session beats confirm the leases; every RECONCILE_EVERY of them a full extension
    looks at each lease again, and freezes one this process holds without knowing it
    (a claim whose answer never reached it)."""
    await store.enqueue_many([new_job(f"k{i}") for i in range(4)])
    *known, forgotten = await store.claim("w", LEASES, 4)
    thread = HeartbeatThread(tenure_dsn, "w")
    recorded = Recorded(thread)
    thread.start()
    try:
        start = time.monotonic()
        for job in known:
            thread.hold(held(job, start))
        wait_until(
            lambda: len(recorded.snapshot()) > recorded.session_beats,
            timeout=30,
            message="no full extension came",
        )
    finally:
        thread.stop()
    assert recorded.session_beats >= RECONCILE_EVERY
    assert recorded.calls[0] == sorted(j.id for j in known)  # the first beat was a session's
    rows = dict(_rows(tenure_dsn, "SELECT id, lease_ms FROM tenure_jobs"))
    assert rows[forgotten.id] is None  # frozen by the full extension: it runs out
    assert all(rows[j.id] == LEASE_MS for j in known)


async def test_a_lease_whose_own_deadline_passed_is_never_confirmed_by_a_session_beat(
    store: Store, tenure_dsn: str
) -> None:
    """A process stopped for longer than its lease may find its session fresh again (a
    claim of its own made it anew) while its old leases were frozen and taken: only the
    full extension, which answers per lease, may confirm one."""
    await store.enqueue(new_job("k"))
    (job,) = await store.claim("w", LEASES, 1)
    thread = HeartbeatThread(tenure_dsn, "w")
    recorded = Recorded(thread)
    ended: list[str] = []
    item = held(job, time.monotonic())
    item.ownership = Ownership(time.monotonic() - 60, 1.0)  # its deadline passed
    item.on_end = ended.append
    # The database froze it where it stood and another worker took it meanwhile.
    _rows(
        tenure_dsn,
        "UPDATE tenure_jobs SET lease_ms = NULL, lease_until = clock_timestamp()"
        " - interval '1 second' WHERE id = %s RETURNING id",
        (job.id,),
    )
    (taken,) = await store.claim("heir", LEASES, 1)
    assert taken.id == job.id
    # One beat, on this thread (no watcher racing it to the passed deadline).
    thread.hold(item)
    try:
        thread._tick([item], time.monotonic(), [])
    finally:
        thread.stop()
    assert recorded.session_beats == 0
    assert recorded.calls == [[job.id]]  # the full extension, which said zero rows
    assert ended == ["zero_rows"]


async def test_a_beat_past_its_deadline_is_cancelled_on_the_server_and_leaves_no_lock(
    store: Store, tenure_dsn: str
) -> None:
    """A beat that waits (here for the session row, locked by another transaction) and
    outlives its deadline fails at the deadline, and is not left running on the server:
    there it would take the session row once free and hold it, and the process's next
    beat would queue behind it (a million leases on a stalled disk did exactly that)."""
    await store.enqueue(new_job("k"))
    await store.claim("w", LEASES, 1)
    blocker = psycopg.connect(tenure_dsn)
    lease = LeaseConnection(tenure_dsn)
    try:
        (before,) = _rows(tenure_dsn, "SELECT beat_at FROM tenure_sessions WHERE owner = 'w'")
        blocker.execute("SELECT 1 FROM tenure_sessions WHERE owner = 'w' FOR UPDATE")
        row = lease._connection(5.0).execute("SELECT pg_backend_pid() AS pid").fetchone()
        assert row is not None
        pid = row["pid"]
        with pytest.raises(StoreError):
            lease.beat_session("w", LEASE_MS, [], 0.3)

        def left_running() -> list[tuple[Any, ...]]:
            return _rows(
                tenure_dsn,
                "SELECT state, wait_event_type FROM pg_stat_activity WHERE pid = %s"
                " AND state = 'active'",
                (pid,),
            )

        wait_until(lambda: not left_running(), timeout=10, message="the beat still runs")
        # Gone while the lock is still held, so the beat that timed out changed nothing;
        # the next beat, once the row is free, is not behind a ghost of the first.
        blocker.rollback()
        assert _rows(tenure_dsn, "SELECT beat_at FROM tenure_sessions WHERE owner = 'w'") == [
            before
        ]
        beat = lease.beat_session("w", LEASE_MS, [], 5.0)
        assert beat.beat_at is not None
    finally:
        lease.close()
        blocker.close()


async def test_a_full_extension_freezes_no_job_of_a_claim_still_on_its_way(
    store: Store, tenure_dsn: str
) -> None:
    """A claim answered while beats go on: its jobs predate the session's last beat but are
    not held yet. A full extension then must not take them for forgotten and freeze them
    (the process would confirm them by session beats while their row leases ran out, and
    another worker would take them over from a live executor). Once the claim has settled,
    a job it took that the process never held is frozen as before."""
    await store.enqueue_many([new_job(f"k{i}") for i in range(2)])
    (known,) = await store.claim("w", LEASES, 1)
    thread = HeartbeatThread(tenure_dsn, "w")
    recorded = Recorded(thread)
    thread.start()
    try:
        thread.hold(held(known, time.monotonic()))
        with thread.claiming():
            (arriving,) = await store.claim("w", LEASES, 1)
            since = len(recorded.kinds)
            wait_until(
                lambda: recorded.full_after_session(since),
                timeout=30,
                message="no full extension after a session beat",
            )
            rows = dict(_rows(tenure_dsn, "SELECT id, lease_ms FROM tenure_jobs"))
            assert rows[arriving.id] == LEASE_MS, "a job of a claim on its way was frozen"
        since = len(recorded.kinds)
        wait_until(
            lambda: recorded.full_after_session(since),
            timeout=30,
            message="no full extension after the claim settled",
        )
    finally:
        thread.stop()
    rows = dict(_rows(tenure_dsn, "SELECT id, lease_ms FROM tenure_jobs"))
    assert rows[arriving.id] is None  # never held: frozen, it runs out
    assert rows[known.id] == LEASE_MS
