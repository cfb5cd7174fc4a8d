#!/usr/bin/env python
"""PostgreSQL's cost of tenure's claim and commit statements alone, per job.

    bench/.venv/bin/python bench/statements.py [--jobs 30000] [--variants base,no-journal]

One connection claims 100 jobs and commits them (the worker's two statements,
taken from tenure's queries, prepared, arrays bound as the worker binds them)
until the queue is empty, and reports the backend's CPU per job (from /proc)
and the wall time of each statement. No worker, no Python per job: what is
left is the database's own work, so variants of the SQL or the schema can be
compared in isolation. Each variant gets a fresh database with tenure's
migrations. Variants:

  base              as shipped
  no-journal        neither statement writes journal rows
  no-claim-journal  the claim writes none (the commit still does)
  stale-statistics  the queue is never analyzed (what a burst into a fresh
                    table looks like when the enqueue does not analyze)
  no-explorer-indexes  without migration 0013's three job-explorer indexes (what
                    they cost every claim and commit: neither UPDATE is HOT)
  partial-lease-index  tenure_jobs_lease_until only over rows with a lease
  no-lease-index    without tenure_jobs_lease_until (0023's partial lease indexes remain)
  brin-journal-time tenure_events_at as a BRIN index (no B-tree insert per journal row)
  fillfactor-70     tenure_jobs keeps 30 % of each page free (a new row version can stay on
                    its page: never HOT here, since the claim and commit change indexed state)
  no-notify         the commit sends no tenure_done notification
  generic-plans     plan_cache_mode = force_generic_plan (no planning per call)
  no-key-index      without the (tenant, idempotency_key) unique index, which
                    every claim and commit (never HOT) inserts into
  no-indexes        without every index a claim or commit inserts into but the
                    primary keys and the claim's own (queue, lease_until):
                    what the others cost (not a schema tenure could ship)

PostgreSQL: $BENCH_ADMIN_DSN (default host=127.0.0.1 port=5432 user=postgres
dbname=postgres); the database is tenure_statements, dropped at the end.
Prints figures; asserts nothing about them.
"""

from __future__ import annotations

import argparse
import time

import psycopg
from scratch import drop_database, fresh_database, proc_cpu

from tenure._store import QUERIES, migrate

DB = "tenure_statements"
VARIANTS = (
    "base",
    "no-journal",
    "no-claim-journal",
    "stale-statistics",
    "partial-lease-index",
    "no-lease-index",
    "brin-journal-time",
    "fillfactor-70",
    "no-notify",
    "generic-plans",
    "no-key-index",
    "no-indexes",
    "no-explorer-indexes",
)
# Schema changes a variant makes after the migrations (experiments, not tenure's schema).
DDL = {
    "partial-lease-index": [
        "DROP INDEX tenure_jobs_lease_until",
        "CREATE INDEX tenure_jobs_lease_until ON tenure_jobs (lease_until)"
        " WHERE lease_until IS NOT NULL",
    ],
}
DDL["no-lease-index"] = ["DROP INDEX tenure_jobs_lease_until"]
DDL["brin-journal-time"] = [
    "DROP INDEX tenure_events_at",
    "CREATE INDEX tenure_events_at ON tenure_events USING brin (at)",
]
DDL["fillfactor-70"] = ["ALTER TABLE tenure_jobs SET (fillfactor = 70)"]
DDL["no-key-index"] = ["DROP INDEX tenure_jobs_tenant_key"]
DDL["no-explorer-indexes"] = [
    "DROP INDEX tenure_jobs_state_created, tenure_jobs_tool_created, tenure_jobs_tenant_created"
]
DDL["no-indexes"] = [
    "DROP INDEX tenure_jobs_tenant_key",
    "DROP INDEX tenure_jobs_prune",
    "DROP INDEX tenure_events_job",
    "DROP INDEX tenure_events_at",
]
# Session settings a variant makes on the measuring connection.
SETTINGS = {"generic-plans": ["SET plan_cache_mode = force_generic_plan"]}
NOTIFY = "SELECT tenure_notify('tenure_done', array_agg(f.id::text)) AS n"
CLAIM_JOURNAL = "FROM claimed c\n)"
FINISH_JOURNAL = "    FROM finished f\n)"


def statements(variant: str) -> tuple[str, str]:
    claim, finish = QUERIES["claim"], QUERIES["finish_many"]
    if variant in ("no-journal", "no-claim-journal"):
        assert CLAIM_JOURNAL in claim, "the claim's journal CTE moved; update this script"
        claim = claim.replace(CLAIM_JOURNAL, "FROM claimed c WHERE false\n)")
    if variant == "no-journal":
        assert FINISH_JOURNAL in finish, "the commit's journal CTE moved; update this script"
        finish = finish.replace(FINISH_JOURNAL, "    FROM finished f WHERE false\n)")
    if variant == "no-notify":
        assert NOTIFY in finish, "the commit's notify CTE moved; update this script"
        finish = finish.replace(NOTIFY, "SELECT 0 AS n")
    return claim, finish


def measure(variant: str, jobs: int) -> dict[str, float]:
    dsn = fresh_database(DB)
    migrate(dsn)
    claim, finish = statements(variant)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in DDL.get(variant, []):
            conn.execute(statement)
        for statement in SETTINGS.get(variant, []):
            conn.execute(statement)
        conn.execute(
            """INSERT INTO tenure_jobs (tool, idempotency_key, payload, payload_hash,
                                        max_attempts, position)
               SELECT 'noop', 'k' || g, '{}', 'h', 3, g FROM generate_series(1, %(n)s) g""",
            {"n": jobs},
        )
        if variant != "stale-statistics":
            conn.execute("VACUUM ANALYZE tenure_jobs")
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        pid = row[0]
        claim_s = finish_s = 0.0
        done = 0
        cpu0, t0 = proc_cpu(pid), time.perf_counter()
        params = {"owner": "w", "tools": ["noop"], "lease_ms": [30_000], "limit": 100}
        while True:
            t = time.perf_counter()
            rows = conn.execute(claim, params, prepare=True).fetchall()
            claim_s += time.perf_counter() - t
            if not rows:
                break
            n = len(rows)
            t = time.perf_counter()
            conn.execute(
                finish,
                {
                    "owner": "w",
                    "ids": [r[0] for r in rows],
                    "tokens": [r[2] for r in rows],
                    "states": ["succeeded"] * n,
                    "results": ["null"] * n,
                    "errors": [None] * n,
                    "delays_ms": [0] * n,
                    "attempt_refunds": [0] * n,
                    "progress": [None] * n,
                },
                prepare=True,
            ).fetchall()
            finish_s += time.perf_counter() - t
            done += n
        wall, cpu = time.perf_counter() - t0, proc_cpu(pid) - cpu0
    drop_database(DB)
    return {
        "jobs_per_s": done / wall,
        "pg_cpu_us": 1e6 * cpu / done,
        "claim_us": 1e6 * claim_s / done,
        "commit_us": 1e6 * finish_s / done,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds per variant")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for variant in variants:
            results[variant].append(measure(variant, args.jobs))
    print(f"{args.jobs:,} jobs, claim 100 + commit 100 per round trip, one connection")
    print("| variant | jobs/s | PG CPU µs/job | claim µs/job | commit µs/job |")
    print("|---|---:|---:|---:|---:|")
    for variant, runs in results.items():
        cells = [sorted(r[k] for r in runs)[len(runs) // 2] for k in runs[0]]
        print(f"| {variant} | {cells[0]:,.0f} | {cells[1]:.1f} | {cells[2]:.1f} | {cells[3]:.1f} |")


if __name__ == "__main__":
    main()
