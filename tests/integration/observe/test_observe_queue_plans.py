"""The statements behind the workers and queues pages read through their indexes.

Planned with EXPLAIN (nothing executed) on tables that look like a busy week's: 70,000
jobs and 140,000 journal rows spread evenly over the last 7 days (a day's window is a
seventh of them), analyzed. A plan that walks either table whole would make every poll of
the page cost a full scan of the retention, not of the window.
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from tenure._observe._doctor import query_plan_scans
from tenure._store import Store

pytestmark = pytest.mark.storage

HOUR = timedelta(hours=1)  # the window's start, taken from the server's clock in the test
DAY = timedelta(days=1)
JOBS = 70_000
EVENTS = 140_000
WEEK_MS = 7 * 86_400_000


def fill(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenure_jobs (tool, state, max_attempts, idempotency_key, payload, "
            "payload_hash, created_at, position, finished_at) "
            "SELECT 't' || (i %% 7), 'succeeded', 1, 'k' || i, '{}', 'h', "
            "clock_timestamp() - i * %(step)s * interval '1 millisecond', i, "
            "clock_timestamp() - i * %(step)s * interval '1 millisecond' "
            "FROM generate_series(1, %(n)s) AS i",
            {"n": JOBS, "step": WEEK_MS // JOBS},
        )
        conn.execute(
            "INSERT INTO tenure_events (at, kind, job_id, token, attempt, worker, tool) "
            "SELECT clock_timestamp() - (%(n)s - i) * %(step)s * interval '1 millisecond', "
            "(ARRAY['job_claimed', 'succeeded', 'failed', 'lease_expired'])[1 + i %% 4], "
            "i, i, 1, 'w', 't' || (i %% 7) FROM generate_series(1, %(n)s) AS i",
            {"n": EVENTS, "step": WEEK_MS // EVENTS},
        )
        conn.execute("ANALYZE tenure_jobs")
        conn.execute("ANALYZE tenure_events")


@pytest.mark.parametrize(
    ("statement", "params", "indexes", "table"),
    [
        ("queue_arrivals", {"since": HOUR, "bucket_ms": 60_000, "tools": 30},
         {"tenure_jobs_created", "tenure_jobs_lease_until"}, "tenure_jobs"),
        ("queue_arrivals", {"since": DAY, "bucket_ms": 60_000, "tools": 30},
         {"tenure_jobs_created", "tenure_jobs_lease_until"}, "tenure_jobs"),
        ("queue_flow", {"since": HOUR, "bucket_ms": 60_000, "tools": 30},
         {"tenure_events_at"}, "tenure_events"),
        ("queue_flow", {"since": DAY, "bucket_ms": 60_000, "tools": 30},
         {"tenure_events_at"}, "tenure_events"),
        ("list_workers", {"limit": 1000, "cap": 100_000},
         {"tenure_jobs_lease_until"}, "tenure_jobs"),
    ],
)  # fmt: skip
async def test_the_pages_statements_use_their_indexes(
    store: Store,
    tenure_dsn: str,
    statement: str,
    params: dict[str, object],
    indexes: set[str],
    table: str,
) -> None:
    fill(tenure_dsn)
    now = await store.db_now()
    bound = {k: now - v if isinstance(v, timedelta) else v for k, v in params.items()}
    used, scanned = query_plan_scans(await store.explain(statement, bound))
    assert indexes <= used, (statement, used)
    assert table not in scanned, (statement, scanned)
