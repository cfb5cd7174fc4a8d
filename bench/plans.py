"""Print the plans of tenure's hot statements on a loaded table, as workers send them.

    python bench/plans.py [--dsn DSN] [--queued 100000] [--running 1000] [--terminal 100000]
                          [--delayed 0]

Creates a scratch schema, fills it (queued jobs spread over 20 tenants, running jobs
with leases, terminal rows), ANALYZEs, prints `EXPLAIN (COSTS OFF)` of the claim,
the heartbeat's extension, the batched commit and the bulk enqueue, and drops the
schema. Plain EXPLAIN: nothing is executed, so nothing is claimed. Then the claim
once more with ANALYZE, inside a transaction that is rolled back, for its time.

``--delayed N`` puts N jobs due in a day at the head of the line (they keep the
place they were given at enqueue): the claim's index walk steps over them.
"""

from __future__ import annotations

import argparse
import os
import secrets
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tenure._store import QUERIES, migrate

DELAY = """
UPDATE tenure_jobs SET run_after = clock_timestamp() + interval '1 day'
WHERE state = 'queued' AND id <= %(delayed)s
"""

FILL = """
INSERT INTO tenure_jobs (tool, idempotency_key, payload, payload_hash, max_attempts, tenant,
                         position, state, owner, lease_until, token, attempt, finished_at)
SELECT 'noop', 'k' || g, '{}', 'h', 3, 't' || (g %% 20), g / 20,
       s.state,
       CASE WHEN s.state = 'running' THEN 'w' END,
       CASE WHEN s.state = 'running' THEN clock_timestamp() + interval '1 minute' END,
       g, CASE WHEN s.state = 'queued' THEN 0 ELSE 1 END,
       CASE WHEN s.state = 'succeeded' THEN clock_timestamp() END
FROM generate_series(1, %(total)s) AS g
CROSS JOIN LATERAL (SELECT CASE WHEN g <= %(queued)s THEN 'queued'
                                WHEN g <= %(queued)s + %(running)s THEN 'running'
                                ELSE 'succeeded' END AS state) AS s
"""


def explain(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> str:
    query = sql.SQL("EXPLAIN (COSTS OFF) ") + sql.SQL(QUERIES[name])  # type: ignore[arg-type]
    return "\n".join(row[0] for row in conn.execute(query, params).fetchall())


def timed_claim(conn: psycopg.Connection[Any], params: dict[str, Any]) -> str:
    """The claim's execution time and rows, from EXPLAIN ANALYZE, median of 5, rolled back."""
    query = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + sql.SQL(QUERIES["claim"])  # type: ignore[arg-type]
    times, rows = [], 0
    for _ in range(5):
        with conn.transaction(force_rollback=True):
            (plan,) = conn.execute(query, params).fetchone()  # type: ignore[misc]
        times.append(plan[0]["Execution Time"])
        rows = plan[0]["Plan"]["Actual Rows"]
    return f"{sorted(times)[2]:.2f} ms for {rows} rows"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get(
            "BENCH_ADMIN_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
        ),
    )
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--running", type=int, default=1_000)
    parser.add_argument("--terminal", type=int, default=100_000)
    parser.add_argument("--delayed", type=int, default=0)
    args = parser.parse_args()

    schema = f"tenure_plans_{secrets.token_hex(3)}"
    params = conninfo_to_dict(args.dsn)
    params["options"] = f"-c search_path={schema}"
    dsn = make_conninfo(**params)  # type: ignore[arg-type]
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            total = args.queued + args.running + args.terminal
            conn.execute(
                FILL,  # type: ignore[arg-type]
                {"total": total, "queued": args.queued, "running": args.running},
            )
            conn.execute(DELAY, {"delayed": args.delayed})
            conn.execute("ANALYZE tenure_jobs")
            ids = list(range(args.queued + 1, args.queued + 101))
            statements: dict[str, dict[str, Any]] = {
                "claim": {
                    "tools": ["noop"],
                    "lease_ms": [30_000],
                    "limit": 100,
                    "owner": "w",
                },
                "extend_leases": {
                    "ids": ids,
                    "tokens": ids,
                    "lease_ms": [30_000] * len(ids),
                    "owner": "w",
                    "kept": [],
                    "freeze_unnamed": True,
                },
                "finish_many": {
                    "ids": ids,
                    "tokens": ids,
                    "states": ["succeeded"] * len(ids),
                    "results": [None] * len(ids),
                    "errors": [None] * len(ids),
                    "delays_ms": [0] * len(ids),
                    "attempt_refunds": [0] * len(ids),
                    "progress": [None] * len(ids),
                    "owner": "w",
                },
            }
            print(
                f"PostgreSQL {conn.info.server_version}; tenure_jobs: {args.queued:,} queued "
                f"(20 tenants; {args.delayed:,} of them due in a day, at the head of the "
                f"line), {args.running:,} running, {args.terminal:,} terminal; ANALYZEd.\n"
            )
            for name, values in statements.items():
                print(f"-- {name}\n{explain(conn, name, values)}\n")
            timed = timed_claim(conn, statements["claim"])
            print(f"-- claim of 100, executed (rolled back): {timed}")
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
