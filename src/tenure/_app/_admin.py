"""The App's admin: what an operator reads (jobs, the explorer, the journal, workers),
acts on (retry, cancel in bulk) and runs (doctor, migrate, prune). Reads never carry a
payload, result or error message."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Unpack

from .._errors import ConfigError, Conflict, JobNotFound, PolicyError, StoreError, one_line
from .._job import Job
from .._search import JobPage, JobSearch, SearchFilters, job_search, page_of
from .._store import EventQuery, JobDetail, JobWaitpoint, JournalEntry, WorkerInfo, migrate

if TYPE_CHECKING:
    from .._observe._doctor import Check
    from .._store import _rows
    from ._client import Client
    from ._connection import Connection
    from ._registry import Registry

NO_SCHEMA = "no tenure schema in this database; run `tenure migrate`"
PRUNE_COUNT_CAP = 10_000_000
WORKER_LEASE_CAP = 100_000  # running jobs read to count the leases workers hold
MAX_BULK = 1000
# What a bulk action did to each job (`Admin.cancel_many`, `Admin.retry_many`).
BulkOutcome = Literal["cancelled", "retried", "ended", "not-failed", "missing"]


class Admin:
    """What an operator reads and does: ``app.admin`` (blocking: ``app.sync.admin``)."""

    def __init__(self, registry: Registry, connection: Connection, client: Client) -> None:
        self._registry = registry
        self._connection = connection
        self._client = client

    async def jobs(
        self,
        *,
        state: str | None = None,
        tool: str | None = None,
        tenant: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        return await (await self._connection.store()).list_jobs(
            state=state, tool=tool, tenant=tenant, limit=max(1, min(limit, 10_000))
        )

    async def search(self, **filters: Unpack[SearchFilters]) -> JobPage:
        """One page of jobs, newest first (by created_at, then id), every filter optional:
        ``job_id``, idempotency ``key`` (of ``tenant``, '' if not given), ``state``,
        ``tool``, ``tenant``, created in [``since``, ``until``), ``limit`` (1-500, 50).
        Pass the page's ``next_cursor`` as ``cursor`` for the next page: a keyset cursor,
        as fast a thousand pages deep as on the first. Rows carry no payload, result or
        error message. InvalidSearch on a bad filter or cursor, before anything is read."""
        return await self.search_page(job_search(**filters))

    async def search_page(self, search: JobSearch) -> JobPage:
        """One page of jobs for a search already checked (`search`, the explorer)."""
        return page_of(await (await self._connection.store()).search_jobs(search), search)

    async def events(self, job_id: int) -> list[JournalEntry]:
        """The job's journal: claims, losses, rejections and outcomes, oldest first by the
        database's time, then id (its first 1,000 entries)."""
        return await (await self._connection.store()).job_timeline(job_id)

    async def job(self, job_id: int) -> JobDetail:
        """The job as an operator may see it: state, owner, token, lease, error code,
        progress, key; never its payload, result or error message."""
        return await (await self._connection.store()).job_detail(job_id)

    async def waitpoints(self, job_id: int) -> list[JobWaitpoint]:
        """The job's waitpoints: name, state, deadline, what each asks."""
        return await (await self._connection.store()).job_waitpoints(job_id)

    async def find_events(
        self,
        *,
        kinds: Sequence[str] = (),
        job_id: int | None = None,
        tool: str | None = None,
        worker: str | None = None,
        since: float | datetime | None = None,
        limit: int = 100,
    ) -> list[JournalEntry]:
        """Journal rows, newest first (by the database's time, then id): of these ``kinds``
        (``job_reclaimed`` selects claims that took a job over from an expired lease), of a
        job, a tool or a worker, from ``since`` (seconds back, or a time) on."""
        query = EventQuery(
            kinds=tuple(k for k in kinds if k != "job_reclaimed"),
            reclaims="job_reclaimed" in kinds,
            job_id=job_id,
            tool=tool,
            worker=worker,
            since_ms=round(since * 1000) if isinstance(since, int | float) else None,
            since_at=since if isinstance(since, datetime) else None,
            limit=max(1, min(limit, 10_000)),
        )
        return await (await self._connection.store()).find_events(query)

    async def workers(self, *, limit: int = 1000) -> list[WorkerInfo]:
        """Registered worker processes, alive first, then silent, then stopped: name, host,
        pid, version, tools, concurrency, when started and last seen, and the leases each
        holds (counted from the jobs it owns, never stored twice)."""
        store = await self._connection.store()
        return await store.list_workers(max(1, min(limit, 10_000)), WORKER_LEASE_CAP)

    async def summary(self) -> dict[str, int]:
        """Counts of jobs by state (``jobs_<state>``), of journal events by kind
        (``events_<kind>``) and of the owners they name (``owners_<kind>``: distinct job
        and token pairs), plus claims that took a lease over (``reclaims``) and duplicate
        commits."""
        return await (await self._connection.store()).summary()

    async def database_time(self) -> datetime:
        """The database's clock, the one every lease is judged by."""
        return await (await self._connection.store()).db_now()

    # -- what the dashboard's pages draw (each read capped by its caller, as the store's) --

    async def held_leases(self, limit: int) -> list[_rows.HeldLease]:
        """Running jobs and the leases held on them, by the database's clock."""
        return await (await self._connection.store()).running_leases(limit)

    async def open_waitpoints(self, limit: int) -> list[_rows.OpenWaitpointRow]:
        """Waitpoints still waiting for an answer, soonest deadline first."""
        return await (await self._connection.store()).open_waitpoints(limit)

    async def notable_events(self, limit: int) -> list[JournalEntry]:
        """The latest journal rows an operator should see (losses, rejections, failures)."""
        return await (await self._connection.store()).notable_events(limit)

    async def outcomes(self, window_ms: int, bucket_ms: int, cap: int) -> list[_rows.OutcomeBucket]:
        """Jobs ended per tool, outcome and bucket over the last ``window_ms``."""
        return await (await self._connection.store()).throughput(window_ms, bucket_ms, cap)

    async def pipeline_runs(self, limit: int) -> list[_rows.RunSummary] | None:
        """The latest pipeline runs, newest first; None when no pipeline was ever run."""
        return await (await self._connection.store()).pipeline_runs(limit)

    async def pipeline_run(self, run_id: int) -> _rows.RunSummary | None:
        """One pipeline run with its stages, or None."""
        return await (await self._connection.store()).pipeline_run(run_id)

    async def steps(self, job_id: int, limit: int) -> list[_rows.StepRow]:
        """A durable run's recorded steps, in order (no result)."""
        return await (await self._connection.store()).job_step_rows(job_id, limit)

    async def children(self, job_id: int, limit: int) -> list[_rows.ChildRow]:
        """The jobs a run started (its tools' jobs), oldest first."""
        return await (await self._connection.store()).job_children(job_id, limit)

    async def queue_flow(
        self, since: datetime, bucket_ms: int, tools: int
    ) -> list[_rows.QueueFlow]:
        """Per tool and bucket since ``since``: jobs started and ended, wait and run times."""
        return await (await self._connection.store()).queue_flow(since, bucket_ms, tools)

    async def queue_arrivals(
        self, since: datetime, bucket_ms: int, tools: int
    ) -> list[_rows.QueueArrivals]:
        """Per tool and bucket since ``since``: jobs enqueued."""
        return await (await self._connection.store()).queue_arrivals(since, bucket_ms, tools)

    async def queue_depth(self, cap: int) -> list[_rows.QueueDepth]:
        """Per tool: jobs queued now, and the oldest one's age."""
        return await (await self._connection.store()).queue_depth(cap)

    async def running_summary(self, cap: int) -> list[_rows.RunningSummary]:
        """Per tool: jobs running now."""
        return await (await self._connection.store()).running_summary(cap)

    async def retry(self, job_id: int) -> Job:
        """Queue a failed or cancelled job again with one more attempt. The tool is called
        from the top with the answers it had and the steps it recorded (replayed, not run
        again); a waitpoint that closed unanswered (timed out, or cancelled with its job)
        is asked again, as is a sleep it was cancelled in (in full, from then); a sleep
        that ended stays over."""
        store = await self._connection.store()
        retried = await store.retry(job_id)
        if retried is None:
            job = await store.get_job(job_id)
            raise PolicyError(f"job {job_id} is {job.state}; only failed or cancelled jobs retry")
        return retried

    async def verify_schema(self) -> None:
        """ConfigError unless tenure's schema is in this database and up to date."""
        from .._observe._doctor import check_schema

        store = await self._connection.probed_store()
        if await store.applied_migrations() is None:
            raise ConfigError(NO_SCHEMA)
        [schema] = await check_schema(store)
        if schema.status == "fail":
            raise ConfigError(f"tenure schema: {schema.detail}")

    async def doctor(
        self, *, check_tools: bool = True, on_step: Callable[[str], None] | None = None
    ) -> list[Check]:
        """Check the server, schema, clock, this app's tool policies (unless not
        ``check_tools``) and the indexes and query plans; ``on_step(label)`` before each. A server
        that cannot be reached is one failed check, not an exception."""
        from .._observe._doctor import Check, doctor_steps

        try:
            store = await self._connection.probed_store()
        except (StoreError, OSError) as exc:
            return [Check("connectivity", "fail", f"{type(exc).__name__}: {one_line(exc)}")]
        checks: list[Check] = []
        for label, run in doctor_steps(store, self._registry if check_tools else None):
            if on_step is not None:
                on_step(label)
            checks.extend(await run())
        return checks

    async def prune_journal(
        self,
        older_than: float,
        *,
        dry_run: bool = False,
        on_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Delete journal rows older than ``older_than`` seconds, in bounded batches (or,
        with ``dry_run``, count them); how many. Jobs keep their own retention."""
        from .._maintenance._journal_pruner import JournalPruner, JournalPrunerConfig

        store = await self._connection.store()
        pruner = JournalPruner(store, JournalPrunerConfig(retention=older_than))
        if dry_run:
            return await store.count_old_events(pruner.retention_ms, PRUNE_COUNT_CAP)
        return await pruner.run_once(on_batch)

    async def cancel_many(self, job_ids: Sequence[int]) -> dict[int, BulkOutcome]:
        """Cancel each job (as `App.cancel`), one by one; what happened to each:
        ``"cancelled"``, ``"ended"`` (it had already ended) or ``"missing"``."""
        return await _each(job_ids, self._client.cancel, "cancelled", Conflict, "ended")

    async def retry_many(self, job_ids: Sequence[int]) -> dict[int, BulkOutcome]:
        """Retry each job (as `retry`), one by one; what happened to each: ``"retried"``,
        ``"not-failed"`` (only failed or cancelled jobs retry) or ``"missing"``."""
        return await _each(job_ids, self.retry, "retried", PolicyError, "not-failed")

    async def migrate(self) -> list[int]:
        """Apply the pending schema migrations; the numbers of those applied (none: up to date)."""
        dsn = await asyncio.to_thread(lambda: self._connection.dsn)
        return await asyncio.to_thread(migrate, dsn)


async def _each(
    job_ids: Sequence[int],
    act: Callable[[int], Awaitable[Job]],
    done: BulkOutcome,
    refusal: type[Exception],
    refused: BulkOutcome,
) -> dict[int, BulkOutcome]:
    """``act`` on each job in turn (at most MAX_BULK), and what came of it."""
    ids = list(dict.fromkeys(job_ids))
    if len(ids) > MAX_BULK:
        raise PolicyError(f"at most {MAX_BULK} jobs at once, got {len(ids)}")
    outcomes: dict[int, BulkOutcome] = {}
    for job_id in ids:
        try:
            await act(job_id)
            outcomes[job_id] = done
        except JobNotFound:
            outcomes[job_id] = "missing"
        except refusal:
            outcomes[job_id] = refused
    return outcomes
