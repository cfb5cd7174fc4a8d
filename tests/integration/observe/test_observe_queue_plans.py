"""The statements behind the workers and queues pages read through their indexes.

Planned with EXPLAIN (nothing executed) on tables that look like a busy day's: 30,000
jobs and 60,000 journal rows, nearly all older than the window, analyzed. A plan that
walks either table whole would make every poll of the page cost a full scan.
"""

from __future__ import annotations

import psycopg
import pytest

from tenure._observe._doctor import query_plan_scans
from tenure._store import Store

pytestmark = pytest.mark.storage

JOBS = 30_000
EVENTS = 60_000


def fill(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenure_jobs (tool, state, max_attempts, idempotency_key, payload, "
            "payload_hash, created_at, position, finished_at) "
            "SELECT 't' || (i %% 7), 'succeeded', 1, 'k' || i, '{}', 'h', "
            "clock_timestamp() - interval '3 days' + i * interval '1 second', i, "
            "clock_timestamp() - interval '2 days' "
            "FROM generate_series(1, %(n)s) AS i",
            {"n": JOBS},
        )
        conn.execute(
            "INSERT INTO tenure_events (at, kind, job_id, token, attempt, worker, tool) "
            "SELECT clock_timestamp() - interval '3 days' + i * interval '1 second', "
            "(ARRAY['job_claimed', 'succeeded', 'failed', 'lease_expired'])[1 + i %% 4], "
            "i, i, 1, 'w', 't' || (i %% 7) FROM generate_series(1, %(n)s) AS i",
            {"n": EVENTS},
        )
        conn.execute("ANALYZE tenure_jobs")
        conn.execute("ANALYZE tenure_events")


@pytest.mark.parametrize(
    ("statement", "params", "indexes", "table"),
    [
        ("queue_arrivals", {"window_ms": 3_600_000, "bucket_ms": 60_000, "cap": 200_000},
         {"tenure_jobs_created", "tenure_jobs_lease_until"}, "tenure_jobs"),
        ("queue_arrivals", {"window_ms": 86_400_000, "bucket_ms": 600_000, "cap": 200_000},
         {"tenure_jobs_created", "tenure_jobs_lease_until"}, "tenure_jobs"),
        ("queue_flow", {"window_ms": 3_600_000, "bucket_ms": 60_000, "cap": 200_000},
         {"tenure_events_at"}, "tenure_events"),
        ("list_workers", {"limit": 1000, "cap": 100_000},
         {"tenure_jobs_lease_until"}, "tenure_jobs"),
    ],
)  # fmt: skip
async def test_the_pages_statements_use_their_indexes(
    store: Store,
    tenure_dsn: str,
    statement: str,
    params: dict[str, int],
    indexes: set[str],
    table: str,
) -> None:
    fill(tenure_dsn)
    used, scanned = query_plan_scans(await store.explain(statement, params))
    assert indexes <= used, (statement, used)
    assert table not in scanned, (statement, scanned)
