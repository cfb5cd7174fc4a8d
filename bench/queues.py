"""What one refresh of the dashboard's queue charts costs, measured on a busy day's tables.

    python bench/queues.py [--dsn DSN] [--jobs 100000] [--tools 12] [--reps 7]

In a scratch schema: ``--jobs`` jobs created evenly over the last 24 hours across
``--tools`` tools, each claimed once (one in 50 claimed twice, the second a reclaim) and
finished (one in 10 failed), so the journal holds about 2.04 rows per job; ANALYZEd.
Then one refresh of ``/queues`` (``queue_data``: both chart statements, the queue now and
the rendering) per window, ``--reps`` times, and prints the median and fastest time, the
rows the two chart statements return, and the size of the JSON the page polls. Asserts
nothing (figures, never timed asserts). Drops its schema.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from registry import scratch  # bench/registry.py: a fresh schema and a DSN onto it

from tenure._dashboard._queues_page import WINDOWS, queue_data
from tenure._store import Store, migrate

JOBS = """
INSERT INTO tenure_jobs (tool, state, max_attempts, idempotency_key, payload, payload_hash,
                         created_at, position, finished_at, attempt)
SELECT 't' || (g %% %(tools)s), CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'succeeded' END,
       3, 'k' || g, '{}', 'h', clock_timestamp() - g * %(step)s * interval '1 millisecond', g,
       clock_timestamp() - g * %(step)s * interval '1 millisecond' + interval '2 seconds', 1
FROM generate_series(1, %(jobs)s) AS g
"""

EVENTS = """
INSERT INTO tenure_events (at, kind, job_id, token, attempt, worker, tool, detail)
SELECT j.created_at + e.after, e.kind, j.id, j.id, 1, 'w', j.tool, e.detail
FROM tenure_jobs j
CROSS JOIN LATERAL (VALUES
    (interval '1 second', 'job_claimed', '{}'::jsonb),
    (interval '1.5 seconds', CASE WHEN j.id %% 50 = 0 THEN 'job_claimed' END,
     jsonb_build_object('previous_token', j.id)),
    (interval '2 seconds', j.state, '{}'::jsonb)
) AS e(after, kind, detail)
WHERE e.kind IS NOT NULL
"""


class Counting(Store):
    """A store that counts the rows the chart statements hand back."""

    returned: dict[str, int]

    async def _fetch(self, name: str, params: Any) -> Any:
        rows = await super()._fetch(name, params)
        if name in ("queue_flow", "queue_arrivals"):
            self.returned[name] = len(rows)
        return rows

    async def database_time(self) -> datetime:
        """The admin's name for the clock read (`queue_data` reads through the admin's names)."""
        return await self.db_now()


async def refresh(dsn: str, reps: int) -> None:
    store = Counting(dsn, max_size=2)
    store.returned = {}
    await store.open()
    try:
        for window in WINDOWS.values():
            await queue_data(store, window)  # connections up, statements prepared
            times = []
            for _ in range(reps):
                started = time.perf_counter()
                data = await queue_data(store, window)
                times.append(time.perf_counter() - started)
            size = len(json.dumps(data, default=str))
            fragment = len(data["fragments"]["queues"])
            median, fastest = statistics.median(times) * 1000, min(times) * 1000
            print(
                f"window {window.name}: one refresh, median {median:.0f} ms, "
                f"fastest {fastest:.0f} ms of {reps}; rows returned {store.returned}; "
                f"{len(data['buckets'])} buckets, {len(data['tools'])} tools, "
                f"capped={data.get('capped')}, tools_cut={data.get('tools_cut')}; "
                f"JSON {size / 1024:.0f} KiB, fragment {fragment / 1024:.0f} KiB"
            )
    finally:
        await store.close()


SIZES = {"--jobs": 100_000, "--tools": 12, "--reps": 7}


def fill(dsn: str, jobs: int, tools: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(JOBS, {"jobs": jobs, "tools": tools, "step": 86_400_000 // jobs})
        conn.execute(EVENTS, {})
        conn.execute("ANALYZE tenure_jobs")
        conn.execute("ANALYZE tenure_events")
        events = conn.execute("SELECT count(*) FROM tenure_events").fetchone()
    print(f"{jobs} jobs over the last 24 h, {events and events[0]} journal rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("TENURE_TEST_DSN", ""))
    for flag, default in SIZES.items():
        parser.add_argument(flag, type=int, default=default)
    args = parser.parse_args()
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        schema, dsn = scratch(admin, args.dsn)
        try:
            migrate(dsn)
            fill(dsn, args.jobs, args.tools)
            asyncio.run(refresh(dsn, args.reps))
        finally:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
