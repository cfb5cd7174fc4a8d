"""The store: the only code that speaks SQL to tenure's own database.

One method per named query, typed parameters in, frozen values out. psycopg
errors that mean "bad input" become tenure errors here and nowhere else.
`Store` is async (claims, commits, enqueue, operations); `LeaseConnection` is
the heartbeat thread's own synchronous connection, kept apart on purpose so
that a blocked event loop cannot stop heartbeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any, LiteralString, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from .._dsn import check_dsn as check_dsn  # its home; imported from here too
from .._errors import ConfigError, IdempotencyConflict, JobNotFound, QuotaExceeded
from .._job import Enqueued, Job
from ._migrate import migrate as apply_migrations
from ._queries import load_query_folder

QUERIES = load_query_folder("tenure._store.queries")
T = TypeVar("T")
MIGRATIONS_PACKAGE = "tenure._store.migrations"
MIGRATIONS_TABLE = "tenure_migrations"
MIGRATION_LOCK = 0x7E2E_0001
# How long a claiming transaction that admits keyed jobs may sit idle holding its keys.
ADMIT_IDLE_TIMEOUT_MS = 5000
# A claim takes milliseconds; one without an answer after this long was swallowed by
# the network. Rows it may have claimed expire with their lease and are reclaimed.
CLAIM_TIMEOUT = 2.0
# Likewise for a batch of fenced commits: every later commit of the worker waits
# behind it, so a swallowed answer must not hold them for long. (The outcome of
# such a commit is uncertain; the completer checks the row before calling it lost.)
FINISH_TIMEOUT = 2.0
# The longest pause between two attempts to reconnect a pool to a server that went away.
MAX_RECONNECT_DELAY = 0.25
# A bulk enqueue of at least this many jobs analyzes tenure_jobs in its own transaction
# when it outnumbers what the planner believes is there; the lock wait is bounded.
BULK_ANALYZE_MIN = 1000
BULK_ANALYZE_LOCK_MS = 100
# Raised by tenure_place (migration 0005) when an enqueue would pass its tenant's quota.
QUOTA_SQLSTATE = "TQ001"

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


def prepared_statements() -> bool:
    """Whether tenure's connections prepare their statements (the default: every statement
    is prepared on first use). ``TENURE_PREPARED_STATEMENTS=off`` turns them off for a
    pooler in transaction mode (PgBouncer before 1.21, or without max_prepared_statements),
    which hands each transaction a server connection that never saw the PREPARE."""
    value = os.environ.get("TENURE_PREPARED_STATEMENTS", "on").strip().lower()
    if value not in ("on", "off", "1", "0", "true", "false", "yes", "no"):
        raise ConfigError(f"TENURE_PREPARED_STATEMENTS must be on or off, got {value!r}")
    return value in ("on", "1", "true", "yes")


def connect_options() -> dict[str, Any]:
    """CONNECT_OPTIONS plus the prepared-statement setting, for every pooled or heartbeat
    connection; statements then run with psycopg's default ``prepare=None``."""
    return {**CONNECT_OPTIONS, "prepare_threshold": 0 if prepared_statements() else None}


def _q(name: str) -> LiteralString:
    return QUERIES[name]


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
    payload_hmac: str | None = None  # keyed hash for the journal; None without a journal key
    concurrency_key: str | None = None  # jobs sharing a key run at most concurrency_limit at once
    concurrency_limit: int | None = None
    tenant: str = ""  # '' is the jobs no caller assigned to a tenant
    quota: int | None = None  # the tenant's queued-job quota; None: unlimited
    retain_ms: int = 7 * 24 * 3600 * 1000  # kept this long once it ended (the key's window)

    def params(self) -> dict[str, Any]:
        """The parameters of the `enqueue` statement."""
        return {
            "tool": self.tool,
            "key": self.key,
            "payload": Jsonb(self.payload_json, dumps=str),
            "payload_hash": self.payload_hash,
            "max_attempts": self.max_attempts,
            "priority": self.priority,
            "delay_ms": self.delay_ms,
            "payload_hmac": self.payload_hmac,
            "concurrency_key": self.concurrency_key,
            "concurrency_limit": self.concurrency_limit,
            "tenant": self.tenant,
            "quota": self.quota,
            "retain_ms": self.retain_ms,
        }


# ClaimedJob and Finish are made for every job a worker runs; nothing assigns to them
# after construction, but they are not frozen: a frozen dataclass's __init__ sets each
# field through object.__setattr__, which cost ~2.5 µs per claimed job here.
@dataclass(slots=True, eq=False)
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
    payload_hmac: str | None = None
    run_after: datetime | None = None
    waitpoints: dict[str, Any] | None = None  # answered or timed out, by name
    # When the claim statement was sent on its connection (this process's monotonic clock):
    # the lease's local clock starts here, never earlier (not while waiting for a connection).
    sent_at: float = 0.0

    @property
    def lease_remaining(self) -> float:
        return (self.lease_until - self.db_now).total_seconds()


@dataclass(slots=True)
class Finish:
    """One fenced outcome: `state` is succeeded, failed or queued (retry/release)."""

    job_id: int
    token: int
    state: str
    result_json: str | None = None
    error: dict[str, Any] | None = None
    delay_ms: int = 0
    refund_attempt: bool = False
    progress_json: str | None = None  # the last progress report, if not written yet
    waitpoint: OpenWaitpoint | None = None  # state "waiting": where the call suspended


@dataclass(frozen=True, slots=True)
class OpenWaitpoint:
    """What a suspending call opens (see queries/waitpoints.sql, suspend_job)."""

    name: str
    token_hash: str
    timeout_ms: int
    on_timeout: str
    request_json: str | None


@dataclass(frozen=True, slots=True)
class JournalRow:
    """One event for the journal writer's batch. ``observed_at`` is when it was seen (this
    process's monotonic clock); the row is dated that long before the database's clock at
    the moment the batch is sent, however long the batch waited for a connection."""

    kind: str
    job_id: int | None
    token: int | None
    attempt: int | None
    worker: str | None
    tool: str | None
    code: str | None
    duration_ms: int | None
    detail: dict[str, Any]
    observed_at: float


@dataclass(frozen=True, slots=True)
class JobStatus:
    """The few columns a waiter reads each time it is told to look again."""

    id: int
    state: str
    attempt: int
    progress: dict[str, Any] | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class EventQuery:
    """Filters of `tenure events`; None means "any". ``reclaims`` adds job_claimed rows
    that took a job over from an expired lease."""

    kinds: tuple[str, ...] = ()
    reclaims: bool = False
    job_id: int | None = None
    tool: str | None = None
    worker: str | None = None
    since_ms: int | None = None
    since_at: datetime | None = None
    limit: int = 100


@dataclass(frozen=True, slots=True)
class Extension:
    """One row of a heartbeat's answer: a new lease, or None for zero rows."""

    job_id: int
    lease_until: datetime | None
    db_now: datetime
    sent_at: float = 0.0  # when the extension was sent (monotonic, connection in hand)

    @property
    def remaining(self) -> float | None:
        if self.lease_until is None:
            return None
        return (self.lease_until - self.db_now).total_seconds()


# -- pipelines (see queries/pipeline.sql) ----------------------------------------


@dataclass(frozen=True, slots=True)
class RunRow:
    """One run as stored: its own copy of the graph, its context, where it stands."""

    id: int
    pipeline: str
    state: str
    idempotency_key: str
    input: Any
    input_hash: str
    graph: dict[str, Any]
    context: dict[str, Any]
    result: Any
    error: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class StageRow:
    """One stage execution (or outbox intent) and what its job says right now."""

    id: int
    run_id: int
    name: str
    round: int
    kind: str
    state: str
    arrived: list[str]
    tool: str | None
    job_key: str | None
    payload: Any
    payload_hash: str | None
    max_attempts: int | None
    job_id: int | None
    decision: str | None
    created_at: datetime
    decided_at: datetime | None
    job_exists: bool
    job_state: str | None
    job_token: int | None
    job_result: Any
    job_error: dict[str, Any] | None
    job_finished_at: datetime | None
    db_now: datetime


@dataclass(frozen=True, slots=True)
class NewStage:
    """A stage execution a transition opens, or a join's row it waits at."""

    name: str
    round: int
    kind: str = "stage"
    state: str = "open"
    arrived: tuple[str, ...] = ()
    tool: str | None = None
    payload_json: str | None = None
    payload_hash: str | None = None
    max_attempts: int | None = None
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Transition:
    """Everything one transition writes, in one statement (apply_transition).

    ``mode`` says what decides it: ``commit`` (the stage's job, fenced by
    ``owner`` + ``token``), ``adopt`` (a job that already ended in
    ``expect_state``) or ``none`` (nothing: a start or a re-dispatch).
    None in a run field means "unchanged".
    """

    run_id: int
    mode: str = "none"
    stage_id: int | None = None
    stage_name: str | None = None
    job_id: int | None = None
    token: int | None = None
    owner: str | None = None
    expect_state: str | None = None
    job_state: str | None = None
    result_json: str | None = None
    error: dict[str, Any] | None = None
    stage_state: str | None = None
    decision: str | None = None
    context_json: str | None = None
    run_state: str | None = None
    run_result_json: str | None = None
    run_error: dict[str, Any] | None = None
    new: tuple[NewStage, ...] = ()
    stop_open: bool = False


def _from_row(cls: type[T], row: dict[str, Any]) -> T:
    return cls(**{f.name: row[f.name] for f in fields(cls)})  # type: ignore[arg-type]


async def _rows(
    conn: psycopg.AsyncConnection[Any], name: str, params: dict[str, Any]
) -> list[dict[str, Any]]:
    cursor = await conn.cursor(row_factory=dict_row).execute(_q(name), params)
    return await cursor.fetchall() if cursor.description else []


def _journal_params(rows: Sequence[JournalRow]) -> dict[str, Any]:
    """Call right before the statement is sent: each row's delay is measured from now."""
    now = time.monotonic()
    return {
        "kinds": [r.kind for r in rows],
        "job_ids": [r.job_id for r in rows],
        "tokens": [r.token for r in rows],
        "attempts": [r.attempt for r in rows],
        "workers": [r.worker for r in rows],
        "tools": [r.tool for r in rows],
        "codes": [r.code for r in rows],
        "durations_ms": [r.duration_ms for r in rows],
        "details": [Jsonb(r.detail) for r in rows],
        "delays_ms": [max(0, round((now - r.observed_at) * 1000)) for r in rows],
    }


@contextlib.contextmanager
def _typed_errors() -> Iterator[None]:
    """The errors tenure's own SQL raises on purpose, as tenure errors."""
    try:
        yield
    except psycopg.Error as exc:
        if exc.sqlstate == QUOTA_SQLSTATE:
            detail = exc.diag.message_detail or ""
            raise QuotaExceeded(detail or "tenant quota exceeded") from None
        raise


async def _analyze_if_outnumbered(conn: psycopg.AsyncConnection[Any], inserted: int) -> None:
    """ANALYZE tenure_jobs inside a bulk enqueue's transaction when the batch outnumbers
    what the planner believes the table holds (see tenure._maintenance._statistics for
    why stale statistics make every claim sort the whole queue).

    Inside the transaction, ANALYZE counts the batch's own rows as live, so the new
    statistics are committed together with the jobs: the first claim that a NOTIFY
    wakes is planned with them. It waits for no one: the try-lock skips it while
    another producer analyzes, and a short lock timeout while autovacuum holds the
    table (in a savepoint, so that neither failure touches the batch)."""
    seen = (await _rows(conn, "jobs_statistics", {}))[0]
    if 0 <= seen["analyzed_rows"] and inserted <= seen["analyzed_rows"] / 2:
        return
    with contextlib.suppress(psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
        async with conn.transaction():
            await _rows(conn, "set_local_lock_timeout", {"ms": BULK_ANALYZE_LOCK_MS})
            await _try_analyze(conn)


async def _try_analyze(conn: psycopg.AsyncConnection[Any]) -> bool:
    """ANALYZE tenure_jobs unless another session is at it (an advisory lock that ends
    with the transaction); True if this one did."""
    if not (await _rows(conn, "try_statistics_lock", {}))[0]["locked"]:
        return False
    await _rows(conn, "analyze_jobs", {})
    return True


def _jsonb(text: str | None) -> Jsonb | None:
    return None if text is None else Jsonb(text, dumps=str)


def _bulk_outcome(
    jobs: Sequence[NewJob], new: dict[str, int], found: dict[str, dict[str, Any]]
) -> list[Enqueued]:
    """Each job's id and whether it was created; IdempotencyConflict for a key whose job
    (already there, or earlier in the batch) is another call."""
    first: dict[str, NewJob] = {}
    outcome: list[Enqueued] = []
    for job in jobs:
        earlier = first.setdefault(job.key, job)
        if job.key in new:
            same = earlier.tool == job.tool and earlier.payload_hash == job.payload_hash
            created, job_id, tool = earlier is job, new[job.key], earlier.tool
        else:
            row = found.get(job.key)
            if row is None:
                raise JobNotFound(f"job with idempotency key {job.key!r} vanished during enqueue")
            same = row["tool"] == job.tool and row["payload_hash"] == job.payload_hash
            created, job_id, tool = False, int(row["id"]), row["tool"]
        if not same:
            raise IdempotencyConflict(
                f"idempotency key {job.key!r} already names job {job_id} ({tool}) with a "
                "different "
                + ("tool" if tool != job.tool else "payload")
                + "; nothing in this batch was queued"
            )
        outcome.append(Enqueued(job_id, job.key, created))
    return outcome


class RunTransaction:
    """The statements of one transaction that moves runs on (see `Store.transaction`).

    Every writer of a run's stages calls `lock_run` first, so two transitions of
    one run serialise and each plans from a current picture of the run.
    """

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn

    async def insert_run(
        self, *, pipeline: str, key: str, input_json: str, input_hash: str, graph: dict[str, Any]
    ) -> int | None:
        """A new run's id, or None when the key is taken (the caller reads that run)."""
        rows = await _rows(
            self._conn,
            "insert_run",
            {
                "pipeline": pipeline,
                "key": key,
                "input": Jsonb(input_json, dumps=str),
                "input_hash": input_hash,
                "graph": Jsonb(graph),
            },
        )
        return rows[0]["id"] if rows else None

    async def lock_run(self, run_id: int, *, skip_locked: bool = False) -> RunRow | None:
        """The run, locked until the transaction ends (None: no such run, or it is
        locked by another transaction and ``skip_locked`` says not to wait)."""
        name = "try_lock_run" if skip_locked else "lock_run"
        rows = await _rows(self._conn, name, {"id": run_id})
        return _from_row(RunRow, rows[0]) if rows else None

    async def stages(self, run_id: int) -> list[StageRow]:
        rows = await _rows(self._conn, "run_stages", {"run_id": run_id})
        return [_from_row(StageRow, row) for row in rows]

    async def apply(self, t: Transition) -> tuple[bool, bool]:
        """(the stage was open for this job, the transition was written)."""
        new = t.new
        rows = await _rows(
            self._conn,
            "apply_transition",
            {
                "mode": t.mode,
                "run_id": t.run_id,
                "stage_id": t.stage_id,
                "stage_name": t.stage_name,
                "job_id": t.job_id,
                "token": t.token,
                "owner": t.owner,
                "expect_state": t.expect_state,
                "job_state": t.job_state,
                "result": _jsonb(t.result_json),
                "error": None if t.error is None else Jsonb(t.error),
                "stage_state": t.stage_state,
                "decision": t.decision,
                "context": _jsonb(t.context_json),
                "run_state": t.run_state,
                "run_result": _jsonb(t.run_result_json),
                "run_error": None if t.run_error is None else Jsonb(t.run_error),
                "stop_open": t.stop_open,
                "names": [n.name for n in new],
                "rounds": [n.round for n in new],
                "kinds": [n.kind for n in new],
                "states": [n.state for n in new],
                "arrived": [Jsonb(list(n.arrived)) for n in new],
                "tools": [n.tool for n in new],
                "payloads": [n.payload_json for n in new],
                "payload_hashes": [n.payload_hash for n in new],
                "max_attempts": [n.max_attempts for n in new],
                "priorities": [n.priority for n in new],
            },
        )
        return bool(rows[0]["owned"]), bool(rows[0]["applied"])

    async def fail_exhausted_leases(self, limit: int) -> list[int]:
        rows = await _rows(self._conn, "fail_exhausted_leases", {"limit": limit})
        return [row["id"] for row in rows]

    async def runs_to_rescue(self, limit: int, resend_after_ms: int) -> list[int]:
        rows = await _rows(
            self._conn, "runs_to_rescue", {"limit": limit, "resend_after_ms": resend_after_ms}
        )
        return [row["id"] for row in rows]

    async def retry_job(self, job_id: int) -> bool:
        """Queue a failed job again with one more attempt (an outbox delivery re-sent)."""
        return bool(await _rows(self._conn, "retry_job", {"id": job_id}))


class _PromptReconnect(AttemptWithBackoff):
    """psycopg_pool's reconnection schedule, made prompt: a worker must be back within a
    fraction of a second of the server answering again, not after a backoff that had
    grown to seconds during the outage (+0.02, +1.0, +2.8 s was measured)."""

    INITIAL_DELAY = 0.05
    DELAY_BACKOFF = 1.5

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, MAX_RECONNECT_DELAY)


class _Pool(AsyncConnectionPool[psycopg.AsyncConnection[Any]]):
    """The pool every Store uses: psycopg_pool's, reconnecting on `_PromptReconnect`'s
    schedule. (``_add_connection`` is the pool's own hook for each new connection; the
    tests pin its behaviour, so an upgrade that changes it fails loudly.)"""

    async def _add_connection(
        self, attempt: AttemptWithBackoff | None, growing: bool = False
    ) -> None:
        if attempt is None:
            attempt = _PromptReconnect(timeout=self.reconnect_timeout)
        await super()._add_connection(attempt, growing)


def _readable(conn: psycopg.AsyncConnection[Any]) -> bool:
    try:
        fd = conn.pgconn.socket
    except psycopg.Error:
        return True
    return bool(select.select([fd], [], [], 0)[0])


# When each pooled connection was last given back (for `Store`'s ``check_idle``).
_last_used: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = (
    weakref.WeakKeyDictionary()
)


async def _mark_used(conn: psycopg.AsyncConnection[Any]) -> None:
    _last_used[conn] = time.monotonic()


class Store:
    """Async access to tenure's tables through a small connection pool.

    ``check_idle`` (seconds; None: no checks): a producer's connections may sit in the
    pool through a database restart, and without a check the first statement after it
    fails on a connection that died meanwhile. So a connection is checked with one
    round trip before it is handed out when its socket shows the server hung up, or
    when it sat idle longer than ``check_idle``; a busy producer pays nothing for this.
    """

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        check_idle: float | None = None,
    ) -> None:
        self._check_idle = check_idle
        self._pool = _Pool(
            check_dsn(dsn),
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, "row_factory": dict_row, **connect_options()},
            open=False,
            name="tenure",
            check=None if check_idle is None else self._check,
            reset=None if check_idle is None else _mark_used,
        )

    async def _check(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """A round trip only for a connection that may have died while it sat in the pool:
        one whose socket has something to read (an idle connection is sent nothing but
        the server's goodbye when it shuts down or restarts), or that sat there longer
        than ``check_idle`` (a peer that vanished without a goodbye)."""
        used = _last_used.get(conn)
        idle = self._check_idle is not None and (
            used is None or time.monotonic() - used >= self._check_idle
        )
        if idle or _readable(conn):
            await AsyncConnectionPool.check_connection(conn)

    async def open(self) -> None:
        await self._pool.open(wait=True, timeout=30)

    async def close(self) -> None:
        await self._pool.close()

    async def _fetch(
        self, name: str, params: dict[str, Any], timeout: float | None = None
    ) -> list[dict[str, Any]]:
        async with self._pool.connection() as conn:
            with _deadline(conn, timeout), _typed_errors():
                cursor = await conn.cursor(row_factory=dict_row).execute(_q(name), params)
                return await cursor.fetchall() if cursor.description else []

    async def _execute(self, name: str, params: dict[str, Any]) -> int:
        async with self._pool.connection() as conn:
            with _typed_errors():
                cursor = await conn.execute(_q(name), params)
            return cursor.rowcount

    # -- producers -------------------------------------------------------------

    async def enqueue(self, job: NewJob) -> Job:
        try:
            rows = await self._fetch("enqueue", job.params())
        except QuotaExceeded:
            # A replay of a job already queued is answered, not refused: it takes no new slot.
            rows = await self._fetch("job_by_key", {"key": job.key, "tenant": job.tenant})
            if not rows:
                raise
        if not rows:
            # The key is taken. Our statement's snapshot may predate the winner's
            # commit, so read it again with a fresh one.
            rows = await self._fetch("job_by_key", {"key": job.key, "tenant": job.tenant})
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

    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """Queue many jobs of one tenant in one transaction: one per job given, in order.

        A key that already names a job returns that job (``created`` False); one that
        names a job of another tool or payload raises IdempotencyConflict and the whole
        batch is rolled back, as over the tenant's quota.
        """
        if not jobs:
            return []
        tenant, quota = jobs[0].tenant, jobs[0].quota
        if any(j.tenant != tenant for j in jobs):
            raise ValueError("enqueue_many takes the jobs of one tenant per statement")
        params = {
            "tenant": tenant,
            "quota": quota,
            "tools": [j.tool for j in jobs],
            "keys": [j.key for j in jobs],
            "payloads": [j.payload_json for j in jobs],
            "payload_hashes": [j.payload_hash for j in jobs],
            "max_attempts": [j.max_attempts for j in jobs],
            "priorities": [j.priority for j in jobs],
            "payload_hmacs": [j.payload_hmac for j in jobs],
            "concurrency_keys": [j.concurrency_key for j in jobs],
            "concurrency_limits": [j.concurrency_limit for j in jobs],
            "retains_ms": [j.retain_ms for j in jobs],
        }
        async with self._pool.connection() as conn, conn.transaction():
            with _typed_errors():
                rows = await _rows(conn, "enqueue_many", params)
            new = {row["idempotency_key"]: int(row["id"]) for row in rows}
            if len(new) >= BULK_ANALYZE_MIN:
                await _analyze_if_outnumbered(conn, len(new))
            repeated = sorted({j.key for j in jobs} - new.keys())
            found = {}
            if repeated:
                params = {"tenant": tenant, "keys": repeated}
                found = {
                    row["idempotency_key"]: row for row in await _rows(conn, "jobs_by_keys", params)
                }
            return _bulk_outcome(jobs, new, found)

    # -- workers ---------------------------------------------------------------

    async def claim(
        self, owner: str, lease_ms_by_tool: dict[str, int], limit: int, *, limited: bool = False
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` jobs; ``limited`` also takes keyed jobs, within their limits.

        Unkeyed jobs are claimed by one statement, exactly as fast whether or not any
        limits exist. ``limited`` wraps that statement in a transaction: held jobs are
        admitted under their keys' locks first (``admit_held``), the same `claim`
        statement then takes them in priority order with everything else, and the
        admitted ones are held again before the locks are released at commit.
        """
        params = {
            "owner": owner,
            "tools": list(lease_ms_by_tool),
            "lease_ms": list(lease_ms_by_tool.values()),
            "limit": limit,
        }
        async with self._pool.connection() as conn:
            # The lease's local clock starts now, with a connection in hand: a claim that
            # waited out an outage for its connection must not start with its lease spent.
            sent_at = time.monotonic()
            with _deadline(conn, CLAIM_TIMEOUT), _typed_errors():
                if not limited:
                    rows = await _rows(conn, "claim", params)
                else:
                    async with conn.transaction():
                        admit = {**params, "idle_ms": ADMIT_IDLE_TIMEOUT_MS}
                        admitted = [row["id"] for row in await _rows(conn, "admit_held", admit)]
                        rows = await _rows(conn, "claim", params)
                        if admitted:
                            await _rows(conn, "hold_again", {"ids": admitted})
        return [ClaimedJob(**row, sent_at=sent_at) for row in rows]

    async def next_expiry(self, owner: str, tools: Sequence[str]) -> float | None:
        """Seconds until another owner's earliest lease on ``tools`` ends (None: none)."""
        rows = await self._fetch(
            "next_expiry", {"owner": owner, "tools": list(tools)}, CLAIM_TIMEOUT
        )
        return None if not rows else float(rows[0]["seconds"])

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
                "progress": [o.progress_json for o in outcomes],
            },
            FINISH_TIMEOUT,
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
        duration_ms: int | None = None,
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
                "duration_ms": duration_ms,
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

    async def job_by_key(self, key: str, tenant: str) -> Job:
        """The job of ``tenant`` under ``key`` (keys are unique per tenant)."""
        rows = await self._fetch("job_by_key", {"key": key, "tenant": tenant})
        if not rows:
            shown = key if len(key) <= 80 else key[:77] + "..."
            raise JobNotFound(
                f"no job with idempotency key {shown!r}"
                + (f" for tenant {tenant!r}" if tenant else "")
            )
        return replace(Job.from_row(rows[0]), created=True)

    async def job_status(self, job_ids: Sequence[int]) -> dict[int, JobStatus]:
        """State, attempt and progress of each job that exists: what a waiter looks at."""
        rows = await self._fetch("job_status", {"ids": list(job_ids)})
        return {
            row["id"]: JobStatus(
                row["id"], row["state"], row["attempt"], row["progress"], row["updated_at"]
            )
            for row in rows
        }

    # -- waitpoints ----------------------------------------------------------------

    async def waitpoint_secret(self) -> bytes:
        """The key waitpoint tokens are derived with (made by migration 0008)."""
        rows = await self._fetch("waitpoint_secret", {})
        return str(rows[0]["value"]).encode()

    async def suspend(self, owner: str, finish: Finish) -> bool:
        """The fenced commit of a call that suspends; False: the lease was lost."""
        wp = finish.waitpoint
        assert wp is not None
        rows = await self._fetch(
            "suspend_job",
            {
                "id": finish.job_id,
                "token": finish.token,
                "owner": owner,
                "name": wp.name,
                "token_hash": wp.token_hash,
                "timeout_ms": wp.timeout_ms,
                "on_timeout": wp.on_timeout,
                "request": wp.request_json,
                "progress": finish.progress_json,
            },
            FINISH_TIMEOUT,
        )
        return bool(rows)

    async def complete_waitpoint(self, token_hash: str, answer_json: str) -> Job | None:
        """Answer an open waitpoint (compare-and-set); its job as the answer left it (queued
        again), or None when no open waitpoint has this token (unknown, answered, timed
        out or cancelled)."""
        rows = await self._fetch(
            "complete_waitpoint", {"token_hash": token_hash, "answer": answer_json}
        )
        return Job.from_row(rows[0]) if rows else None

    async def expire_waitpoints(self, limit: int) -> list[int]:
        """Resume or fail the jobs of open waitpoints past their deadline (one batch)."""
        return [int(row["id"]) for row in await self._fetch("expire_waitpoints", {"limit": limit})]

    async def job_waitpoints(self, job_id: int) -> list[dict[str, Any]]:
        return await self._fetch("job_waitpoints", {"job_id": job_id})

    async def notify(self, channel: str, payload: str) -> None:
        """Send one notification (a listener's probe)."""
        await self._fetch("notify", {"channel": channel, "payload": payload})

    async def list_jobs(
        self,
        *,
        state: str | None = None,
        tool: str | None = None,
        tenant: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        rows = await self._fetch(
            "list_jobs", {"state": state, "tool": tool, "tenant": tenant, "limit": limit}
        )
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

    # -- maintenance: periodic schedules and the job pruner ----------------------

    async def schedule_marks(self, names: Sequence[str]) -> tuple[datetime, dict[str, datetime]]:
        """The scheduler's clock (the database's) and each schedule's latest decided slot."""
        rows = await self._fetch("schedule_marks", {"names": list(names)})
        marks = {row["name"]: row["last_slot"] for row in rows if row["name"] is not None}
        return rows[0]["now"], marks

    async def decide_slot(
        self, name: str, slot: datetime, job: NewJob | None
    ) -> tuple[bool, int | None]:
        """Advance schedule ``name`` to ``slot`` and queue ``job`` with it, in one transaction.

        Returns (advanced, job id): advanced is False when another worker decided
        this slot first; the job id is None when nothing was queued.
        """
        async with self._pool.connection() as conn, conn.transaction():
            if not await _rows(conn, "advance_schedule", {"name": name, "slot": slot}):
                return False, None
            if job is None:
                return True, None
            rows = await _rows(conn, "enqueue", job.params())
            return True, rows[0]["id"] if rows else None

    async def prune_jobs(self, tools: Sequence[str] | None, limit: int, timeout_ms: int) -> int:
        """Delete one batch of terminal jobs whose own retention has passed: of ``tools``
        only, or of every application when ``tools`` is None."""
        async with self._pool.connection() as conn, conn.transaction():
            await _rows(conn, "set_local_timeout", {"ms": timeout_ms})
            if tools is None:
                rows = await _rows(conn, "prune_all_jobs", {"limit": limit})
            else:
                rows = await _rows(conn, "prune_jobs", {"tools": list(tools), "limit": limit})
        return int(rows[0]["n"])

    async def jobs_statistics(self) -> dict[str, float]:
        """The planner's view of tenure_jobs at its last ANALYZE, and the table now."""
        rows = await self._fetch("jobs_statistics", {}, CLAIM_TIMEOUT)
        return {k: float(v) for k, v in rows[0].items()}

    async def analyze_jobs(self, timeout_ms: int) -> bool:
        """ANALYZE tenure_jobs unless another worker is at it; True if this one did."""
        async with self._pool.connection() as conn, conn.transaction():
            await _rows(conn, "set_local_timeout", {"ms": timeout_ms})
            return await _try_analyze(conn)

    # -- observability: the journal writer, pruner, metrics, dashboard and CLI --

    async def record_events(self, rows: Sequence[JournalRow]) -> int:
        """Journal many events in one statement (the journal writer's batches), each dated
        from when it was observed, measured once a connection is in hand."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(_q("record_events"), _journal_params(rows))
            return cursor.rowcount

    async def prune_events(self, older_than_ms: int, limit: int, timeout_ms: int) -> int:
        """Delete one batch of journal rows older than the retention; returns how many."""
        async with self._pool.connection() as conn, conn.transaction():
            await _rows(conn, "set_local_timeout", {"ms": timeout_ms})
            params = {"older_than_ms": older_than_ms, "limit": limit}
            rows = await _rows(conn, "prune_events", params)
        return int(rows[0]["n"])

    async def count_old_events(self, older_than_ms: int, cap: int) -> int:
        rows = await self._fetch("count_old_events", {"older_than_ms": older_than_ms, "cap": cap})
        return int(rows[0]["n"])

    async def find_events(self, query: EventQuery) -> list[dict[str, Any]]:
        """Journal rows matching ``query``, newest first."""
        return await self._fetch(
            "find_events",
            {
                "kinds": list(query.kinds) if query.kinds else None,
                "reclaims": query.reclaims,
                "job_id": query.job_id,
                "tool": query.tool,
                "worker": query.worker,
                "since_ms": query.since_ms,
                "since_at": query.since_at,
                "limit": query.limit,
            },
        )

    async def notable_events(self, limit: int) -> list[dict[str, Any]]:
        return await self._fetch("notable_events", {"limit": limit})

    async def job_timeline(self, job_id: int, limit: int = 1000) -> list[dict[str, Any]]:
        return await self._fetch("job_timeline", {"job_id": job_id, "limit": limit})

    async def job_detail(self, job_id: int) -> dict[str, Any]:
        """The job without payload, result or error message (what an operator may see)."""
        rows = await self._fetch("job_detail", {"id": job_id})
        if not rows:
            raise JobNotFound(f"no job {job_id}")
        return rows[0]

    async def running_leases(self, limit: int) -> list[dict[str, Any]]:
        return await self._fetch("running_leases", {"limit": limit})

    async def running_summary(self, cap: int) -> list[dict[str, Any]]:
        return await self._fetch("running_summary", {"cap": cap})

    async def open_waitpoints(self, limit: int) -> list[dict[str, Any]]:
        return await self._fetch("open_waitpoints", {"limit": limit})

    async def waiting_summary(self, cap: int) -> list[dict[str, Any]]:
        return await self._fetch("waiting_summary", {"cap": cap})

    async def queue_depth(self, cap: int) -> list[dict[str, Any]]:
        return await self._fetch("queue_depth", {"cap": cap})

    async def throughput(self, window_ms: int, bucket_ms: int, cap: int) -> list[dict[str, Any]]:
        return await self._fetch(
            "throughput", {"window_ms": window_ms, "bucket_ms": bucket_ms, "cap": cap}
        )

    async def journal_head(self) -> int:
        """The newest journal row's id (0 for an empty journal)."""
        return int((await self._fetch("journal_head", {}))[0]["id"])

    async def journal_counts_since(self, after_id: int, cap: int) -> list[dict[str, Any]]:
        return await self._fetch("journal_counts_since", {"after_id": after_id, "cap": cap})

    async def pipeline_runs(self, limit: int) -> list[dict[str, Any]] | None:
        """Recent pipeline runs with their stages, or None while there are no pipeline tables."""
        if not (await self._fetch("pipelines_exist", {}))[0]["present"]:
            return None
        return await self._fetch("pipeline_runs", {"limit": limit})

    async def server_info(self) -> dict[str, Any]:
        return (await self._fetch("server_info", {}))[0]

    async def applied_migrations(self) -> list[dict[str, Any]] | None:
        """Rows of tenure_migrations, or None when the schema was never migrated."""
        if not (await self._fetch("migrations_table_exists", {}))[0]["present"]:
            return None
        return await self._fetch("applied_migrations", {})

    async def table_indexes(self) -> list[dict[str, Any]]:
        return await self._fetch("table_indexes", {})

    async def explain(self, name: str, params: dict[str, Any]) -> Any:
        """The planner's JSON plan for a named statement exactly as workers send it.

        Plain EXPLAIN plans without executing, so explaining the claim claims nothing.
        """
        statement = sql.SQL("EXPLAIN (FORMAT JSON) ") + sql.SQL(_q(name))
        async with self._pool.connection() as conn:
            cursor = await conn.cursor(row_factory=dict_row).execute(statement, params)
            row = await cursor.fetchone()
        return None if row is None else row["QUERY PLAN"]

    # -- pipelines -------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def transaction(self, timeout: float) -> AsyncIterator[RunTransaction]:
        """One transaction in which no statement may run longer than ``timeout`` seconds."""
        async with self._pool.connection() as conn, conn.transaction():
            await _rows(conn, "set_local_timeout", {"ms": max(1, round(timeout * 1000))})
            yield RunTransaction(conn)

    async def get_run(self, run_id: int) -> RunRow | None:
        rows = await self._fetch("get_run", {"id": run_id})
        return _from_row(RunRow, rows[0]) if rows else None

    async def run_by_key(self, key: str) -> RunRow | None:
        rows = await self._fetch("run_by_key", {"key": key})
        return _from_row(RunRow, rows[0]) if rows else None

    async def run_stages(self, run_id: int) -> list[StageRow]:
        rows = await self._fetch("run_stages", {"run_id": run_id})
        return [_from_row(StageRow, row) for row in rows]

    async def jobs_by_ids(self, ids: Sequence[int]) -> list[Job]:
        rows = await self._fetch("jobs_by_ids", {"ids": list(ids)})
        return [Job.from_row(row) for row in rows]


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
            options = {**connect_options(), "connect_timeout": max(2, round(timeout))}
            self._conn = psycopg.connect(
                self._dsn, autocommit=True, row_factory=dict_row, **options
            )
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _run(
        self, name: str, params: Callable[[], dict[str, Any]], timeout: float
    ) -> tuple[float, list[dict[str, Any]]]:
        """Run one statement; returns when it was sent (monotonic, measured once the
        connection is up, so a reconnect is not counted against a lease) and its rows.
        ``params`` is built at that moment too (journal rows are dated from it)."""
        conn = self._connection(timeout)
        watchdog = threading.Timer(timeout, _shutdown_socket, (conn,))
        watchdog.daemon = True
        watchdog.start()
        try:
            sent_at = time.monotonic()
            cursor = conn.execute(_q(name), params())
            return sent_at, cursor.fetchall() if cursor.description else []
        except psycopg.Error:
            self.close()
            raise
        finally:
            watchdog.cancel()

    def extend(
        self, owner: str, held: Sequence[tuple[int, int, int]], timeout: float
    ) -> list[Extension]:
        """Extend (job id, token, lease_ms) leases held by ``owner`` in one statement;
        one answer per lease, each carrying when the statement was sent."""
        sent_at, rows = self._run(
            "extend_leases",
            lambda: {
                "owner": owner,
                "ids": [h[0] for h in held],
                "tokens": [h[1] for h in held],
                "lease_ms": [h[2] for h in held],
            },
            timeout,
        )
        return [Extension(row["id"], row["lease_until"], row["db_now"], sent_at) for row in rows]

    def report_progress(
        self, owner: str, reports: Sequence[tuple[int, int, str]], timeout: float
    ) -> set[int]:
        """Write (job id, token, progress JSON) reports held by ``owner``, fenced like an
        extension; returns the ids whose report was accepted."""
        _, rows = self._run(
            "report_progress",
            lambda: {
                "owner": owner,
                "ids": [r[0] for r in reports],
                "tokens": [r[1] for r in reports],
                "progress": [Jsonb(r[2], dumps=str) for r in reports],
            },
            timeout,
        )
        return {row["id"] for row in rows}

    def states(self, job_ids: Sequence[int], timeout: float) -> dict[int, str]:
        _, rows = self._run("job_states", lambda: {"ids": list(job_ids)}, timeout)
        return {row["id"]: row["state"] for row in rows}

    def record_events(self, rows: Sequence[JournalRow], timeout: float) -> None:
        """Journal many events in one statement."""
        self._run("record_events", lambda: _journal_params(rows), timeout)


@contextlib.contextmanager
def _deadline(conn: psycopg.AsyncConnection[Any], timeout: float | None) -> Iterator[None]:
    """Turn a statement the network swallowed into a connection error after ``timeout``.

    Cancelling the awaiting task instead would make psycopg send a cancel request
    and then wait for an answer that may never come; shutting the socket down
    fails the statement at once, and the pool discards the broken connection.
    """
    if timeout is None:
        yield
        return
    handle = asyncio.get_running_loop().call_later(timeout, _shutdown_socket, conn)
    try:
        yield
    finally:
        handle.cancel()


def _shutdown_socket(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
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
