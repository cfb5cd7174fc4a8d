"""Jobs: enqueue, claim, the fenced commit, and an operator's view and actions.

See queries/jobs.sql: every method here runs one of its named statements.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from .._errors import IdempotencyConflict, JobNotFound, QuotaExceeded
from .._job import Enqueued, Job
from ._base import StoreBase
from ._connection import (
    ADMIT_IDLE_TIMEOUT_MS,
    BULK_ANALYZE_LOCK_MS,
    BULK_ANALYZE_MIN,
    CLAIM_TIMEOUT,
    FINISH_TIMEOUT,
    MAX_CLAIM,
    SMALL_CLAIM,
    deadline,
    rows_of,
    typed_errors,
)
from ._rows import (
    Cancellation,
    ClaimedJob,
    Finish,
    JobStatus,
    NewJob,
    StopCheck,
)


async def _analyze_if_outnumbered(conn: psycopg.AsyncConnection[Any], inserted: int) -> None:
    """ANALYZE tenure_jobs inside a bulk enqueue's transaction when the batch outnumbers
    what the planner believes the table holds (see tenure._maintenance._statistics for
    why stale statistics make every claim sort the whole queue).

    Inside the transaction, ANALYZE counts the batch's own rows as live, so the new
    statistics are committed together with the jobs: the first claim that a NOTIFY
    wakes is planned with them. It waits for no one: the try-lock skips it while
    another producer analyzes, and a short lock timeout while autovacuum holds the
    table (in a savepoint, so that neither failure touches the batch)."""
    seen = (await rows_of(conn, "jobs_statistics", {}))[0]
    if 0 <= seen["analyzed_rows"] and inserted <= seen["analyzed_rows"] / 2:
        return
    with contextlib.suppress(psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
        async with conn.transaction():
            await rows_of(conn, "set_local_lock_timeout", {"ms": BULK_ANALYZE_LOCK_MS})
            await try_analyze(conn)


async def try_analyze(conn: psycopg.AsyncConnection[Any]) -> bool:
    """ANALYZE tenure_jobs unless another session is at it (an advisory lock that ends
    with the transaction); True if this one did."""
    if not (await rows_of(conn, "try_statistics_lock", {}))[0]["locked"]:
        return False
    await rows_of(conn, "analyze_jobs", {})
    return True


def enqueued(job: NewJob, rows: list[dict[str, Any]]) -> Job:
    """The job an enqueue created or found under its key (``rows``: what `enqueue`, else
    `job_by_key`, returned); IdempotencyConflict when the key names another call."""
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


class JobStatements(StoreBase):
    """Producers, workers and operators: one method per statement of queries/jobs.sql."""

    # -- producers -------------------------------------------------------------

    async def enqueue(self, job: NewJob) -> Job:
        try:
            with typed_errors():  # the quota, as the tenure error it is, to catch here
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
        return enqueued(job, rows)

    async def enqueue_many(
        self, jobs: Sequence[NewJob], trace_context: dict[str, str] | None = None
    ) -> list[Enqueued]:
        """Queue many jobs of one tenant in one transaction: one per job given, in order.

        A key that already names a job returns that job (``created`` False); one that
        names a job of another tool or payload raises IdempotencyConflict and the whole
        batch is rolled back, as over the tenant's quota. ``trace_context`` is the batch's
        (one producer span queued them all).
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
            "trace_context": None if trace_context is None else Jsonb(trace_context),
        }
        async with self._pool.connection() as conn, conn.transaction():
            rows = await rows_of(conn, "enqueue_many", params)
            new = {row["idempotency_key"]: int(row["id"]) for row in rows}
            if len(new) >= BULK_ANALYZE_MIN:
                await _analyze_if_outnumbered(conn, len(new))
            repeated = sorted({j.key for j in jobs} - new.keys())
            found = {}
            if repeated:
                params = {"tenant": tenant, "keys": repeated}
                found = {
                    row["idempotency_key"]: row
                    for row in await rows_of(conn, "jobs_by_keys", params)
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
        if not 1 <= limit <= MAX_CLAIM:
            raise ValueError(f"a claim takes 1 to {MAX_CLAIM} jobs, not {limit}")
        params = {
            "owner": owner,
            "tools": list(lease_ms_by_tool),
            "lease_ms": list(lease_ms_by_tool.values()),
            "limit": limit,
        }
        claim = "claim" if limit <= SMALL_CLAIM else "claim_large"
        async with self._pool.connection() as conn:
            # The lease's local clock starts now, with a connection in hand: a claim that
            # waited out an outage for its connection must not start with its lease spent.
            sent_at = time.monotonic()
            with deadline(conn, CLAIM_TIMEOUT):
                if not limited:
                    rows = await rows_of(conn, claim, params)
                else:
                    async with conn.transaction():
                        admit = {**params, "idle_ms": ADMIT_IDLE_TIMEOUT_MS}
                        admitted = [row["id"] for row in await rows_of(conn, "admit_held", admit)]
                        rows = await rows_of(conn, claim, params)
                        if admitted:
                            await rows_of(conn, "hold_again", {"ids": admitted})
        return [ClaimedJob(**row, sent_at=sent_at) for row in rows]

    async def next_expiry(self, owner: str, tools: Sequence[str]) -> float | None:
        """Seconds until another owner's earliest lease on ``tools`` ends (None: none)."""
        rows = await self._fetch(
            "next_expiry", {"owner": owner, "tools": list(tools)}, CLAIM_TIMEOUT
        )
        return None if not rows else float(rows[0]["seconds"])

    async def finish_many(self, owner: str, outcomes: Sequence[Finish]) -> dict[int, bool]:
        """Fenced commit of many outcomes in one statement: job id → accepted. A database
        error is raised as its StoreError (the completer acts on its verdict)."""
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
        """Journal one event (the completer's rejected results); errors as StoreErrors."""
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
        # Then stale sessions: a statement of its own, since it rewrites rows the one above
        # may have failed (PostgreSQL refuses a row changed twice by one statement).
        await self._fetch("reap_sessions", {})
        return [row["id"] for row in rows]

    # -- operations ------------------------------------------------------------

    # What a caller reads to follow a job (get_job, job_by_key, job_status) raises
    # ConnectionLost, never a driver error, when the link breaks: `App.wait` reads again.

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

    async def cancel(self, job_id: int) -> Cancellation | None:
        """Cancel a queued, running or waiting job; None when it had already ended. Database
        errors as StoreErrors (a read-only role's: PermissionDenied)."""
        rows = await self._fetch("cancel_job", {"id": job_id})
        return Cancellation(Job.from_row(rows[0]), rows[0]["held_until"]) if rows else None

    async def cancelled_among(self, held: Mapping[int, int]) -> list[tuple[int, int]]:
        """(id, token) of the held calls (id → token) whose job was cancelled."""
        rows = await self._fetch(
            "cancelled_among", {"ids": list(held), "tokens": list(held.values())}
        )
        return [(row["id"], row["token"]) for row in rows]

    async def record_stop(
        self, job: ClaimedJob, worker: str, duration_ms: int, timeout: float | None = None
    ) -> None:
        """Journal that this owner's cancelled call has stopped, and tell its waiters."""
        params = {
            "id": job.id,
            "token": job.token,
            "attempt": job.attempt,
            "worker": worker,
            "duration_ms": duration_ms,
        }
        await self._fetch("record_stop", params, timeout)

    async def stop_check(self, job_id: int, token: int, held_until: datetime) -> StopCheck:
        """Whether the call (job, token) cancelled while it held its lease until
        ``held_until`` is over (see queries/jobs.sql, stop_settled)."""
        rows = await self._fetch(
            "stop_settled", {"id": job_id, "token": token, "held_until": held_until}
        )
        return StopCheck(rows[0]["stopped"], rows[0]["left"])

    async def retry(self, job_id: int) -> Job | None:
        """Queue a failed or cancelled job again; None when it was not in such a state.
        Database errors as StoreErrors (a read-only role's: PermissionDenied)."""
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
            summary[f"owners_{row['kind']}"] = row["owners"]
            if row["kind"] == "job_claimed":
                summary["reclaims"] = row["reclaims"]
        summary["duplicate_commits"] = (await self._fetch("duplicate_commits", {}))[0]["n"]
        return summary

    async def db_now(self) -> datetime:
        rows = await self._fetch("db_now", {})
        value: datetime = rows[0]["db_now"]
        return value
