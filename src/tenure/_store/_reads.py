"""The read model: what operators read of jobs, the journal, queues, runs and the
server, for the CLI, the dashboard, metrics and the doctor; with the journal's own batch
insert and pruning, which share its statements (queries/observe.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from psycopg import sql
from psycopg.rows import dict_row

from .._errors import JobNotFound
from .._search import JobListing, JobSearch
from ._base import StoreBase
from ._connection import (
    rows_of,
    statement,
)
from ._rows import (
    AppliedMigration,
    EventQuery,
    HeldLease,
    JobDetail,
    JournalCount,
    JournalEntry,
    JournalRow,
    OpenWaitpointRow,
    OutcomeBucket,
    QueueArrivals,
    QueueDepth,
    QueueFlow,
    RunningSummary,
    RunSummary,
    ServerInfo,
    TableIndex,
    WaitingSummary,
    journal_params,
)

SEARCH_TIMEOUT = 10.0  # a search past this is cut off (its connection dropped), not awaited

MAX_BIGINT = 2**63 - 1  # above every id


class ReadStatements(StoreBase):
    """One method per statement of queries/observe.sql."""

    # -- observability: the journal writer, pruner, metrics, dashboard and CLI --

    async def record_events(self, rows: Sequence[JournalRow]) -> int:
        """Journal many events in one statement (the journal writer's batches), each dated
        from when it was observed, measured once a connection is in hand."""
        async with self._pool.connection() as conn:
            cursor = await conn.execute(statement("record_events"), journal_params(rows))
            return cursor.rowcount

    async def prune_events(self, older_than_ms: int, limit: int, timeout_ms: int) -> int:
        """Delete one batch of journal rows older than the retention; returns how many."""
        async with self._pool.connection() as conn, conn.transaction():
            await rows_of(conn, "set_local_timeout", {"ms": timeout_ms})
            params = {"older_than_ms": older_than_ms, "limit": limit}
            rows = await rows_of(conn, "prune_events", params)
        return int(rows[0]["n"])

    async def count_old_events(self, older_than_ms: int, cap: int) -> int:
        rows = await self._fetch("count_old_events", {"older_than_ms": older_than_ms, "cap": cap})
        return int(rows[0]["n"])

    async def find_events(self, query: EventQuery) -> list[JournalEntry]:
        """Journal rows matching ``query``, newest first."""
        rows = await self._fetch(
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
        return cast(list[JournalEntry], rows)

    async def notable_events(self, limit: int) -> list[JournalEntry]:
        return cast(list[JournalEntry], await self._fetch("notable_events", {"limit": limit}))

    async def job_timeline(self, job_id: int, limit: int = 1000) -> list[JournalEntry]:
        rows = await self._fetch("job_timeline", {"job_id": job_id, "limit": limit})
        return cast(list[JournalEntry], rows)

    async def search_jobs(self, search: JobSearch) -> list[JobListing]:
        """A page of the job explorer (one row more than the page), planned with its values."""
        rows = await self._fetch("search_jobs", search.params(), SEARCH_TIMEOUT, prepare=False)
        return cast(list[JobListing], rows)

    async def job_detail(self, job_id: int) -> JobDetail:
        """The job without payload, result or error message (what an operator may see)."""
        rows = await self._fetch("job_detail", {"id": job_id})
        if not rows:
            raise JobNotFound(f"no job {job_id}")
        return cast(JobDetail, rows[0])

    async def running_leases(self, limit: int) -> list[HeldLease]:
        return cast(list[HeldLease], await self._fetch("running_leases", {"limit": limit}))

    async def running_summary(self, cap: int) -> list[RunningSummary]:
        return cast(list[RunningSummary], await self._fetch("running_summary", {"cap": cap}))

    async def open_waitpoints(self, limit: int) -> list[OpenWaitpointRow]:
        rows = await self._fetch("open_waitpoints", {"limit": limit})
        return cast(list[OpenWaitpointRow], rows)

    async def waiting_summary(self, cap: int) -> list[WaitingSummary]:
        return cast(list[WaitingSummary], await self._fetch("waiting_summary", {"cap": cap}))

    async def queue_depth(self, cap: int) -> list[QueueDepth]:
        return cast(list[QueueDepth], await self._fetch("queue_depth", {"cap": cap}))

    async def throughput(self, window_ms: int, bucket_ms: int, cap: int) -> list[OutcomeBucket]:
        rows = await self._fetch(
            "throughput", {"window_ms": window_ms, "bucket_ms": bucket_ms, "cap": cap}
        )
        return cast(list[OutcomeBucket], rows)

    async def queue_flow(self, since: datetime, bucket_ms: int, tools: int) -> list[QueueFlow]:
        """Per tool and bucket since ``since``: claims, reclaims and outcomes, counted by the
        server (at most ``tools`` tools x buckets rows)."""
        rows = await self._fetch(
            "queue_flow", {"since": since, "bucket_ms": bucket_ms, "tools": tools}
        )
        return cast(list[QueueFlow], rows)

    async def queue_arrivals(
        self, since: datetime, bucket_ms: int, tools: int
    ) -> list[QueueArrivals]:
        """Per tool and bucket since ``since``: jobs created, counted by the server."""
        rows = await self._fetch(
            "queue_arrivals", {"since": since, "bucket_ms": bucket_ms, "tools": tools}
        )
        return cast(list[QueueArrivals], rows)

    async def journal_head(self) -> int:
        """The newest journal row's id (0 for an empty journal)."""
        return int((await self._fetch("journal_head", {}))[0]["id"])

    async def journal_counts_since(self, after_id: int, cap: int) -> list[JournalCount]:
        rows = await self._fetch("journal_counts_since", {"after_id": after_id, "cap": cap})
        return cast(list[JournalCount], rows)

    async def pipeline_runs(self, limit: int, before: int = MAX_BIGINT) -> list[RunSummary] | None:
        """The newest pipeline runs with ids below ``before``, with their stages; None while
        there are no pipeline tables."""
        if not (await self._fetch("pipelines_exist", {}))[0]["present"]:
            return None
        params = {"limit": limit, "before": before}
        return cast(list[RunSummary], await self._fetch("pipeline_runs", params))

    async def pipeline_run(self, run_id: int) -> RunSummary | None:
        """One run as `pipeline_runs` shows it, or None (no such run, or no pipelines)."""
        if not 0 < run_id < MAX_BIGINT:
            return None
        found = await self.pipeline_runs(1, before=run_id + 1)
        return found[0] if found and found[0]["run_id"] == run_id else None

    async def server_info(self) -> ServerInfo:
        return cast(ServerInfo, (await self._fetch("server_info", {}))[0])

    async def applied_migrations(self) -> list[AppliedMigration] | None:
        """Rows of tenure_migrations, or None when the schema was never migrated."""
        if not (await self._fetch("migrations_table_exists", {}))[0]["present"]:
            return None
        return cast(list[AppliedMigration], await self._fetch("applied_migrations", {}))

    async def table_indexes(self) -> list[TableIndex]:
        return cast(list[TableIndex], await self._fetch("table_indexes", {}))

    async def explain(self, name: str, params: dict[str, Any]) -> Any:
        """The planner's JSON plan for a named statement exactly as workers send it.

        Plain EXPLAIN plans without executing, so explaining the claim claims nothing.
        """
        explained = sql.SQL("EXPLAIN (FORMAT JSON) ") + sql.SQL(statement(name))
        async with self._pool.connection() as conn:
            cursor = await conn.cursor(row_factory=dict_row).execute(explained, params)
            row = await cursor.fetchone()
        return None if row is None else row["QUERY PLAN"]
