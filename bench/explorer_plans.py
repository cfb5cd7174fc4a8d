"""The job explorer's statement at 1,000,000 jobs: every filter combination, first page and
a deep cursor page, with EXPLAIN (ANALYZE, BUFFERS), written to bench/plans/explorer.md.

    python bench/explorer_plans.py [--dsn DSN] [--jobs 1000000] [--out bench/plans/explorer.md]

Creates a scratch schema, migrates it, fills it with a realistic spread (a week of jobs,
newest last; 30 tools of very different volume; half the jobs without a tenant, the rest
over 100 tenants of very different size; 90 % succeeded, 5 % failed, 2 % cancelled, queued,
running and waiting the rest), ANALYZEs, then for each case runs the statement exactly as
`App.admin.search` sends it (unprepared, its values bound) under EXPLAIN (ANALYZE, BUFFERS),
the first page and a page deep behind a cursor, and drops the schema. Times are the median
of three runs; the machine is shared, so they are figures, not targets.

`cases()` is also what tests/integration/store/test_explorer.py checks on a small table: each
case must read the index named for it and never scan tenure_jobs whole.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tenure._search import JobSearch, encode_cursor, job_search
from tenure._store import QUERIES, migrate

# A week of jobs: job g of n was created at START + g/n of the week, so ids follow time.
# tool: 'tool-k' with k = floor(30 * u^3) (tool-0 busiest, tool-29 rare);
# tenant: '' for half, else 't-k' with k = floor(100 * u^2);
# state: by g's hash, 90 % succeeded, 5 % failed, 2 % cancelled, 2 % queued,
# 0.5 % running, 0.5 % waiting.
FILL = """
INSERT INTO tenure_jobs (tool, idempotency_key, payload, payload_hash, max_attempts, tenant,
                         position, state, owner, lease_until, token, attempt, created_at,
                         updated_at, finished_at, error)
SELECT 'tool-' || floor(30 * power(random(), 3))::int,
       'key-' || g, '{}', 'h', 3,
       CASE WHEN random() < 0.5 THEN '' ELSE 't-' || floor(100 * power(random(), 2))::int END,
       g, s.state,
       CASE WHEN s.state = 'running' THEN 'worker-' || (g %% 16) END,
       CASE WHEN s.state = 'running' THEN clock_timestamp() + interval '1 minute' END,
       CASE WHEN s.state = 'queued' THEN 0 ELSE g END,
       CASE WHEN s.state = 'queued' THEN 0 ELSE 1 END,
       c.at, c.at,
       CASE WHEN s.state IN ('succeeded', 'failed', 'cancelled') THEN c.at END,
       CASE WHEN s.state = 'failed' THEN '{"code": "tool_error"}'::jsonb END
FROM generate_series(1, %(total)s) AS g
CROSS JOIN LATERAL (SELECT %(start)s::timestamptz
                           + (g::float8 / %(total)s) * interval '7 days' AS at) AS c
CROSS JOIN LATERAL (SELECT abs(hashint4(g)) %% 1000 AS r) AS h
CROSS JOIN LATERAL (SELECT CASE WHEN h.r < 900 THEN 'succeeded'
                                WHEN h.r < 950 THEN 'failed'
                                WHEN h.r < 970 THEN 'cancelled'
                                WHEN h.r < 990 THEN 'queued'
                                WHEN h.r < 995 THEN 'running'
                                ELSE 'waiting' END AS state) AS s
"""
START = datetime(2026, 1, 5, tzinfo=UTC)
WEEK = timedelta(days=7)
PAGE = 50
STATE = "tenure_jobs_state_created"
TOOL = "tenure_jobs_tool_created"
TENANT = "tenure_jobs_tenant_created"
KEY = "tenure_jobs_tenant_key"
DEEP = 1000  # pages: the deep page starts behind the cursor of row DEEP * PAGE (or the last)


@dataclass(frozen=True)
class Case:
    """One filter combination and the indexes its plan may read (one of them at least)."""

    name: str
    filters: dict[str, Any]
    index: str
    also: tuple[str, ...] = ()

    def acceptable(self, used: set[str]) -> bool:
        return bool(used & {self.index, *self.also})


def cases(total: int, acme_key: str | None = None, plain_key: str | None = None) -> list[Case]:
    """The cases on a table of ``total`` jobs; ``acme_key``: a key that tenant t-7 holds,
    ``plain_key``: one of a job without a tenant (so that each finds its job)."""
    day = START + WEEK * (5 / 7)
    some = total // 2
    return [
        Case("no filter", {}, "tenure_jobs_created"),
        Case("state failed", {"state": "failed"}, "tenure_jobs_state_created"),
        # Running jobs are kept out of the explorer's indexes (no entry per heartbeat): the
        # running branch reads them through the held-lease index and sorts them.
        Case("state running", {"state": "running"}, "tenure_jobs_lease_until"),
        # A third of all jobs: walking the newest jobs and keeping a third is as cheap.
        Case(
            "tool (busiest)",
            {"tool": "tool-0"},
            "tenure_jobs_tool_created",
            ("tenure_jobs_created",),
        ),
        Case("tool (rare)", {"tool": "tool-29"}, "tenure_jobs_tool_created"),
        Case("tenant", {"tenant": "t-7"}, "tenure_jobs_tenant_created"),
        # Two filters: one index, whichever the planner finds narrower, and the other as a
        # filter on its rows (the smaller partition bounds the walk).
        Case("state + tool", {"state": "failed", "tool": "tool-3"}, STATE, (TOOL,)),
        Case("state + tenant", {"state": "failed", "tenant": "t-7"}, STATE, (TENANT,)),
        # Few jobs match both: the page never fills, so the walk reads the narrower index's
        # whole partition (the worst case of two filters).
        Case("state + tool, few match", {"state": "waiting", "tool": "tool-29"}, STATE, (TOOL,)),
        Case(
            "time range (1 hour)",
            {"since": day, "until": day + timedelta(hours=1)},
            "tenure_jobs_created",
        ),
        Case(
            "state + time range (1 day)",
            {"state": "failed", "since": day, "until": day + timedelta(days=1)},
            "tenure_jobs_state_created",
        ),
        Case(
            "tool + time range (1 day)",
            {"tool": "tool-29", "since": day, "until": day + timedelta(days=1)},
            "tenure_jobs_tool_created",
        ),
        Case("by id", {"job_id": some}, "tenure_jobs_pkey"),
        Case("by key (no tenant)", {"key": plain_key or f"key-{some}"}, "tenure_jobs_tenant_key"),
        Case(
            "by key + tenant",
            {"key": acme_key or f"key-{some + 1}", "tenant": "t-7"},
            "tenure_jobs_tenant_key",
        ),
    ]


def explain_sql(analyze: bool) -> sql.Composed:
    options = "ANALYZE, BUFFERS, " if analyze else ""
    return sql.SQL(f"EXPLAIN ({options}FORMAT JSON) ") + sql.SQL(QUERIES["search_jobs"])


def plan_of(conn: psycopg.Connection[Any], search: JobSearch, analyze: bool = False) -> Any:
    """The plan (JSON) of the explorer's statement as the store sends it: values bound."""
    (plan,) = conn.execute(explain_sql(analyze), search.params(), prepare=False).fetchone()  # type: ignore[misc]
    return plan


def _walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", ()):
        found.extend(_walk(child))
    return found


def indexes_and_scans(plan: Any) -> tuple[set[str], set[str]]:
    """(indexes read, tables scanned whole) in a JSON plan."""
    indexes, scanned = set(), set()
    for node in _walk(plan[0]["Plan"]):
        if "Index Name" in node:
            indexes.add(node["Index Name"])
        if node["Node Type"] == "Seq Scan":
            scanned.add(node["Relation Name"])
    return indexes, scanned


def text_plan(conn: psycopg.Connection[Any], search: JobSearch) -> str:
    query = sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + sql.SQL(QUERIES["search_jobs"])
    rows = conn.execute(query, search.params(), prepare=False).fetchall()
    return "\n".join(r[0] for r in rows)


def deep_cursor(conn: psycopg.Connection[Any], case: Case) -> tuple[str | None, int]:
    """A cursor DEEP pages into this case's rows (or at its last page): walked page by page
    would take a thousand calls, so the bench reads the row there with an OFFSET once."""
    search = job_search(**case.filters, limit=PAGE)
    params = {**search.params(), "limit": 2 * DEEP * PAGE + 1}
    cursor = conn.execute(sql.SQL(QUERIES["search_jobs"]), params, prepare=False)
    rows = cursor.fetchall()
    names = [c.name for c in cursor.description or ()]
    if len(rows) <= PAGE:
        return None, len(rows)
    depth = min(DEEP * PAGE, len(rows) // 2)
    row = dict(zip(names, rows[depth - 1], strict=True))
    return encode_cursor(row), depth  # type: ignore[arg-type]


def timed(conn: psycopg.Connection[Any], search: JobSearch) -> tuple[float, int, int]:
    """Median execution time (ms), rows, shared buffers hit+read, of three runs."""
    times, rows, buffers = [], 0, 0
    for _ in range(3):
        plan = plan_of(conn, search, analyze=True)
        times.append(plan[0]["Execution Time"])
        top = plan[0]["Plan"]
        rows = top["Actual Rows"]
        buffers = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
    return statistics.median(times), rows, buffers


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get(
            "BENCH_ADMIN_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
        ),
    )
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "plans" / "explorer.md")
    args = parser.parse_args()

    schema = f"tenure_explorer_{secrets.token_hex(3)}"
    params = conninfo_to_dict(args.dsn)
    params["options"] = f"-c search_path={schema}"
    dsn = make_conninfo(**params)  # type: ignore[arg-type]
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    out: list[str] = []
    try:
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            began = time.monotonic()
            conn.execute("ALTER TABLE tenure_jobs DISABLE TRIGGER USER")  # no NOTIFY per fill
            conn.execute(FILL, {"total": args.jobs, "start": START})
            conn.execute("ALTER TABLE tenure_jobs ENABLE TRIGGER USER")
            conn.execute("VACUUM ANALYZE tenure_jobs")
            filled = time.monotonic() - began
            (version,) = conn.execute("SHOW server_version").fetchone()  # type: ignore[misc]
            spread = conn.execute(
                "SELECT state, count(*) FROM tenure_jobs GROUP BY state ORDER BY 2 DESC"
            ).fetchall()
            out += [
                "# The job explorer's plans at 1,000,000 jobs",
                "",
                f"Written by `python bench/explorer_plans.py --jobs {args.jobs}` on "
                f"PostgreSQL {version}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC "
                f"(fill + VACUUM ANALYZE: {filled:.0f} s). One statement, `search_jobs` "
                "(`src/tenure/_store/queries/observe.sql`), sent unprepared with its values "
                f"bound, as `App.admin.search` sends it; pages of {PAGE}. The deep page starts "
                f"behind a cursor {DEEP} pages in (or at the case's last page when it has "
                "fewer rows). Times: median of 3 runs of EXPLAIN ANALYZE on a 2-core machine "
                "shared with other work: figures, not targets.",
                "",
                f"tenure_jobs: {args.jobs:,} rows over a week; "
                + ", ".join(f"{state} {n:,}" for state, n in spread)
                + "; 30 tools (tool-0 busiest, tool-29 rare), half without a tenant, the "
                "rest over 100 tenants (t-0 biggest).",
                "",
                "| case | page | index | rows | buffers | time (ms) |",
                "|---|---|---|---:|---:|---:|",
            ]
            details: list[str] = []
            keys = [
                conn.execute(  # type: ignore[index]
                    "SELECT idempotency_key FROM tenure_jobs WHERE tenant = %s AND id > %s"
                    " ORDER BY id LIMIT 1",
                    (tenant, args.jobs // 2),
                ).fetchone()[0]
                for tenant in ("t-7", "")
            ]
            for case in cases(args.jobs, *keys):
                pages: list[tuple[str, str | None]] = [("first", None)]
                cursor, depth = deep_cursor(conn, case)
                if cursor is not None:
                    pages.append((f"deep (row {depth:,})", cursor))
                for label, after in pages:
                    search = job_search(**case.filters, cursor=after, limit=PAGE)
                    used, scanned = indexes_and_scans(plan_of(conn, search))
                    ms, rows, buffers = timed(conn, search)
                    mark = "" if case.acceptable(used) and not scanned else " **(not intended)**"
                    out.append(
                        f"| {case.name} | {label} | {', '.join(sorted(used)) or '-'}{mark} "
                        f"| {rows} | {buffers:,} | {ms:.2f} |"
                    )
                    details += [
                        f"### {case.name}, {label} page",
                        "",
                        f"filters: `{json.dumps(case.filters, default=str)}`",
                        "",
                        "```",
                        text_plan(conn, search),
                        "```",
                        "",
                    ]
                    print(out[-1], file=sys.stderr)
            out += ["", "## Plans", "", *details]
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(out).rstrip() + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
