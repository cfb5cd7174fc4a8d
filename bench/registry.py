"""What the workers registry and the queue charts cost the hot paths, measured.

    python bench/registry.py [--dsn DSN] [--leases 1000] [--beats 300] [--jobs 5000] [--reps 6]

In a scratch schema: (1) the heartbeat's batched extension of ``--leases`` held leases,
as sent (with the registry keep-alive folded in) and with that CTE cut out, interleaved,
``--beats`` times each; (2) enqueueing ``--jobs`` jobs 100 per statement through
``App.enqueue_many`` into a fresh schema with the index ``tenure_jobs_created``
(migration 0011) and into one without it, alternating, ``--reps`` times each. Prints
medians; asserts nothing (figures, never timed asserts). Drops its schemas.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import time
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tenure import App, Context
from tenure._store import QUERIES, migrate

FOLDED = QUERIES["extend_leases"]
SEEN = FOLDED[FOLDED.index("), seen AS (") : FOLDED.index("SELECT h.id")]
UNFOLDED = FOLDED.replace(SEEN, ")\n")

HOLD = """
INSERT INTO tenure_jobs (tool, idempotency_key, payload, payload_hash, max_attempts, position,
                         state, owner, lease_until, token, attempt)
SELECT 'noop', 'held' || g, '{}', 'h', 3, g, 'running', 'bench-worker',
       clock_timestamp() + interval '10 minutes', g, 1
FROM generate_series(1, %(n)s) AS g
"""


def beat(conn: psycopg.Connection[Any], text: str, params: dict[str, Any]) -> float:
    started = time.perf_counter()
    conn.execute(text, params).fetchall()
    return time.perf_counter() - started


def scratch(admin: psycopg.Connection[Any], dsn: str) -> tuple[str, str]:
    """A fresh schema and a DSN whose search_path is it."""
    schema = f"bench_{secrets.token_hex(4)}"
    admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    options = f"{conninfo_to_dict(dsn).get('options') or ''} -c search_path={schema}"
    return schema, make_conninfo(dsn, options=options.strip())


def enqueue_per_job(
    admin: psycopg.Connection[Any], base: str, jobs: int, *, indexed: bool
) -> float:
    """Seconds per job to enqueue ``jobs`` jobs 100 per statement into a fresh schema."""
    schema, dsn = scratch(admin, base)
    try:
        migrate(dsn)
        if not indexed:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("DROP INDEX tenure_jobs_created")
        app = App(dsn)

        @app.tool(lease=30, heartbeat=5, jitter=1)
        async def noop(ctx: Context) -> None: ...

        app.sync.enqueue_many("noop", [{}] * 100)  # connections up, statements prepared
        started = time.perf_counter()
        for batch in range(jobs // 100):
            keys = [f"{batch}-{i}" for i in range(100)]
            app.sync.enqueue_many("noop", [{}] * 100, idempotency_keys=keys)
        elapsed = time.perf_counter() - started
        app.close()
        return elapsed / jobs
    finally:
        admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("TENURE_TEST_DSN", ""))
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--beats", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--reps", type=int, default=6)
    args = parser.parse_args()
    admin = psycopg.connect(args.dsn, autocommit=True)
    schema, dsn = scratch(admin, args.dsn)
    try:
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(HOLD, {"n": args.leases})
            conn.execute(
                QUERIES["register_worker"],
                {"name": "bench-worker", "host": "h", "pid": 1, "version": "b",
                 "tools": ["noop"], "concurrency": 1, "keepalive_ms": 5000},
            )  # fmt: skip
            conn.execute("ANALYZE tenure_jobs")
            ids = [r[0] for r in conn.execute("SELECT id FROM tenure_jobs ORDER BY id")]
            tokens = [r[0] for r in conn.execute("SELECT token FROM tenure_jobs ORDER BY id")]
            params = {"owner": "bench-worker", "ids": ids, "tokens": tokens,
                      "lease_ms": [600_000] * len(ids)}  # fmt: skip
            folded: list[float] = []
            unfolded: list[float] = []
            for _ in range(args.beats):
                folded.append(beat(conn, FOLDED, params))
                unfolded.append(beat(conn, UNFOLDED, params))
        for name, pick in (("median", statistics.median), ("fastest", min)):
            f, u = pick(folded), pick(unfolded)
            print(
                f"extend_leases, {args.leases} leases, {name} of {args.beats}: "
                f"with keep-alive {f * 1000:.2f} ms, without {u * 1000:.2f} ms "
                f"({(f - u) * 1e6:+.0f} µs per beat)"
            )

        with_index: list[float] = []
        without: list[float] = []
        for rep in range(args.reps):
            for indexed in (True, False) if rep % 2 == 0 else (False, True):
                (with_index if indexed else without).append(
                    enqueue_per_job(admin, args.dsn, args.jobs, indexed=indexed)
                )
        print(
            "per run, µs/job: with",
            [round(x * 1e6) for x in with_index],
            "without",
            [round(x * 1e6) for x in without],
        )
        w, wo = statistics.median(with_index), statistics.median(without)
        print(
            f"enqueue_many of {args.jobs} jobs (100 per statement) into a fresh schema, median "
            f"of {args.reps}: with tenure_jobs_created {w * 1e6:.1f} µs/job, "
            f"without {wo * 1e6:.1f} µs/job"
        )
    finally:
        admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
        admin.close()


if __name__ == "__main__":
    main()
