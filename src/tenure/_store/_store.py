"""The store: the only code that speaks SQL to tenure's own database.

One method per named query, typed parameters in, frozen values out. psycopg
errors that mean "bad input" become tenure errors here and nowhere else.
`Store` is async (claims, commits, enqueue, operations); `LeaseConnection` is
the heartbeat thread's own synchronous connection, kept apart on purpose so
that a blocked event loop cannot stop heartbeats.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, LiteralString

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from .._errors import ConfigError, IdempotencyConflict, JobNotFound
from .._job import Job
from ._migrate import migrate as apply_migrations
from ._queries import load_query_folder

QUERIES = load_query_folder("tenure._store.queries")
MIGRATIONS_PACKAGE = "tenure._store.migrations"
MIGRATIONS_TABLE = "tenure_migrations"
MIGRATION_LOCK = 0x7E2E_0001

# libpq settings for every tenure connection: fail fast on connect, notice a dead
# peer through TCP keepalives, and abort writes the network swallows.
CONNECT_OPTIONS: dict[str, Any] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "application_name": "tenure",
}


def _q(name: str) -> LiteralString:
    return QUERIES[name]


LISTEN = _q("listen")


def check_dsn(dsn: str) -> str:
    """Refuse a malformed DSN before any connection attempt, with a typed error."""
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"malformed DSN: {str(exc).splitlines()[0]}") from None
    return dsn


def migrate(dsn: str) -> list[int]:
    """Apply tenure's pending migrations; safe to run twice and concurrently."""
    with psycopg.connect(check_dsn(dsn), autocommit=True, **CONNECT_OPTIONS) as conn:
        return apply_migrations(conn, MIGRATIONS_PACKAGE, MIGRATIONS_TABLE, MIGRATION_LOCK)


@dataclass(frozen=True, slots=True)
class NewJob:
    tool: str
    key: str
    payload_json: str
    payload_hash: str
    max_attempts: int
    priority: int = 0
    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A freshly claimed job: the token, and the lease as the database set it."""

    id: int
    tool: str
    token: int
    attempt: int
    max_attempts: int
    payload: Any
    payload_hash: str
    idempotency_key: str
    lease_until: datetime
    db_now: datetime
    previous_owner: str | None
    previous_token: int | None

    @property
    def lease_remaining(self) -> float:
        return (self.lease_until - self.db_now).total_seconds()


@dataclass(frozen=True, slots=True)
class Finish:
    """One fenced outcome: `state` is succeeded, failed or queued (retry/release)."""

    job_id: int
    token: int
    state: str
    result_json: str | None = None
    error: dict[str, Any] | None = None
    delay_ms: int = 0
    refund_attempt: bool = False


@dataclass(frozen=True, slots=True)
class Extension:
    """One row of a heartbeat's answer: a new lease, or None for zero rows."""

    job_id: int
    lease_until: datetime | None
    db_now: datetime

    @property
    def remaining(self) -> float | None:
        if self.lease_until is None:
            return None
        return (self.lease_until - self.db_now).total_seconds()


class Store:
    """Async access to tenure's tables through a small connection pool."""

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self._pool = AsyncConnectionPool(
            check_dsn(dsn),
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, "row_factory": dict_row, **CONNECT_OPTIONS},
            open=False,
            name="tenure",
        )

    async def open(self) -> None:
        await self._pool.open(wait=True, timeout=30)

    async def close(self) -> None:
        await self._pool.close()

    async def _fetch(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        async with self._pool.connection() as conn:
            cursor = await conn.cursor(row_factory=dict_row).execute(_q(name), params, prepare=True)
            return await cursor.fetchall() if cursor.description else []

    async def _execute(self, name: str, params: dict[str, Any]) -> int:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(_q(name), params, prepare=True)
            return cursor.rowcount

    # -- producers -------------------------------------------------------------

    async def enqueue(self, job: NewJob) -> Job:
        rows = await self._fetch(
            "enqueue",
            {
                "tool": job.tool,
                "key": job.key,
                "payload": Jsonb(job.payload_json, dumps=str),
                "payload_hash": job.payload_hash,
                "max_attempts": job.max_attempts,
                "priority": job.priority,
                "delay_ms": job.delay_ms,
            },
        )
        if not rows:
            # The key is taken. Our statement's snapshot may predate the winner's
            # commit, so read it again with a fresh one.
            rows = await self._fetch("job_by_key", {"key": job.key})
        if not rows:
            raise JobNotFound(f"job with idempotency key {job.key!r} vanished during enqueue")
        found = Job.from_row(rows[0])
        if not found.created and (
            rows[0]["tool"] != job.tool or rows[0]["payload_hash"] != job.payload_hash
        ):
            raise IdempotencyConflict(
                f"idempotency key {job.key!r} already names job {found.id} "
                f"({rows[0]['tool']}) with a different "
                + ("tool" if rows[0]["tool"] != job.tool else "payload")
            )
        return found

    async def enqueue_many(self, jobs: Sequence[NewJob]) -> int:
        """Queue many jobs in one statement; returns how many keys were new."""
        return await self._execute(
            "enqueue_many",
            {
                "tools": [j.tool for j in jobs],
                "keys": [j.key for j in jobs],
                "payloads": [j.payload_json for j in jobs],
                "payload_hashes": [j.payload_hash for j in jobs],
                "max_attempts": [j.max_attempts for j in jobs],
                "priorities": [j.priority for j in jobs],
            },
        )

    # -- workers ---------------------------------------------------------------

    async def claim(
        self, owner: str, lease_ms_by_tool: dict[str, int], limit: int
    ) -> list[ClaimedJob]:
        rows = await self._fetch(
            "claim",
            {
                "owner": owner,
                "tools": list(lease_ms_by_tool),
                "lease_ms": list(lease_ms_by_tool.values()),
                "limit": limit,
            },
        )
        return [ClaimedJob(**row) for row in rows]

    async def finish_many(self, owner: str, outcomes: Sequence[Finish]) -> dict[int, bool]:
        """Fenced commit of many outcomes in one statement: job id → accepted."""
        rows = await self._fetch(
            "finish_many",
            {
                "owner": owner,
                "ids": [o.job_id for o in outcomes],
                "tokens": [o.token for o in outcomes],
                "states": [o.state for o in outcomes],
                "results": [o.result_json for o in outcomes],
                "errors": [None if o.error is None else Jsonb(o.error) for o in outcomes],
                "delays_ms": [o.delay_ms for o in outcomes],
                "attempt_refunds": [1 if o.refund_attempt else 0 for o in outcomes],
            },
        )
        return {row["id"]: row["accepted"] for row in rows}

    async def record_event(
        self,
        kind: str,
        *,
        job_id: int | None = None,
        token: int | None = None,
        attempt: int | None = None,
        worker: str | None = None,
        tool: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        await self._fetch(
            "record_event",
            {
                "kind": kind,
                "job_id": job_id,
                "token": token,
                "attempt": attempt,
                "worker": worker,
                "tool": tool,
                "detail": Jsonb(detail or {}),
            },
        )

    async def fail_exhausted_leases(self, limit: int) -> list[int]:
        rows = await self._fetch("fail_exhausted_leases", {"limit": limit})
        return [row["id"] for row in rows]

    # -- operations ------------------------------------------------------------

    async def get_job(self, job_id: int) -> Job:
        rows = await self._fetch("get_job", {"id": job_id})
        if not rows:
            raise JobNotFound(f"no job {job_id}")
        return Job.from_row(rows[0])

    async def list_jobs(
        self, *, state: str | None = None, tool: str | None = None, limit: int = 50
    ) -> list[Job]:
        rows = await self._fetch("list_jobs", {"state": state, "tool": tool, "limit": limit})
        return [Job.from_row(row) for row in rows]

    async def job_events(self, job_id: int) -> list[dict[str, Any]]:
        return await self._fetch("job_events", {"job_id": job_id})

    async def cancel(self, job_id: int) -> Job | None:
        """Cancel a queued or running job; None when it had already ended."""
        rows = await self._fetch("cancel_job", {"id": job_id})
        return Job.from_row(rows[0]) if rows else None

    async def retry(self, job_id: int) -> Job | None:
        """Queue a failed or cancelled job again; None when it was not in such a state."""
        rows = await self._fetch("retry_job", {"id": job_id})
        return Job.from_row(rows[0]) if rows else None

    async def summary(self) -> dict[str, int]:
        """Counts an operator (and the demo's report) starts from."""
        summary: dict[str, int] = {}
        for row in await self._fetch("state_summary", {}):
            summary[f"jobs_{row['state']}"] = row["n"]
            summary["attempts"] = summary.get("attempts", 0) + int(row["attempts"] or 0)
        for row in await self._fetch("event_summary", {}):
            summary[f"events_{row['kind']}"] = row["n"]
            if row["kind"] == "job_claimed":
                summary["reclaims"] = row["reclaims"]
        summary["duplicate_commits"] = (await self._fetch("duplicate_commits", {}))[0]["n"]
        return summary

    async def db_now(self) -> datetime:
        rows = await self._fetch("db_now", {})
        value: datetime = rows[0]["db_now"]
        return value


class LeaseConnection:
    """The heartbeat thread's own connection: one batched extension per tick.

    A query that the network swallows (a blackholed link) would block the
    thread forever, and no server-side timeout can fire for it; so every call
    runs under a local deadline after which the socket is shut down from a
    watchdog timer, turning the hang into an ordinary connection error.
    """

    def __init__(self, dsn: str) -> None:
        self._dsn = check_dsn(dsn)
        self._conn: psycopg.Connection[dict[str, Any]] | None = None

    def _connection(self, timeout: float) -> psycopg.Connection[dict[str, Any]]:
        if self._conn is None or self._conn.closed:
            options = {**CONNECT_OPTIONS, "connect_timeout": max(2, round(timeout))}
            self._conn = psycopg.connect(
                self._dsn, autocommit=True, row_factory=dict_row, **options
            )
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _run(self, name: str, params: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
        conn = self._connection(timeout)
        watchdog = threading.Timer(timeout, _shutdown_socket, (conn,))
        watchdog.daemon = True
        watchdog.start()
        try:
            cursor = conn.execute(_q(name), params, prepare=True)
            return cursor.fetchall() if cursor.description else []
        except psycopg.Error:
            self.close()
            raise
        finally:
            watchdog.cancel()

    def extend(
        self, owner: str, held: Sequence[tuple[int, int, int]], timeout: float
    ) -> list[Extension]:
        """Extend (job id, token, lease_ms) leases held by ``owner`` in one statement."""
        rows = self._run(
            "extend_leases",
            {
                "owner": owner,
                "ids": [h[0] for h in held],
                "tokens": [h[1] for h in held],
                "lease_ms": [h[2] for h in held],
            },
            timeout,
        )
        return [Extension(row["id"], row["lease_until"], row["db_now"]) for row in rows]

    def states(self, job_ids: Sequence[int], timeout: float) -> dict[int, str]:
        rows = self._run("job_states", {"ids": list(job_ids)}, timeout)
        return {row["id"]: row["state"] for row in rows}

    def record_event(
        self, kind: str, job: ClaimedJob, worker: str, detail: dict[str, Any], timeout: float
    ) -> None:
        self._run(
            "record_event",
            {
                "kind": kind,
                "job_id": job.id,
                "token": job.token,
                "attempt": job.attempt,
                "worker": worker,
                "tool": job.tool,
                "detail": Jsonb(detail),
            },
            timeout,
        )


def _shutdown_socket(conn: psycopg.Connection[Any]) -> None:
    """Unblock a query stuck on a silent network by shutting the socket down."""
    try:
        fd = conn.pgconn.socket
    except psycopg.Error:
        return
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()
