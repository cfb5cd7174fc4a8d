# ruff: noqa: E501  (the report writes long Markdown table rows with math signs)
"""Bloat: tenure's claim throughput on an empty table, beside 1M terminal rows, and after a prune.

Each case measures the full worker draining (drain) and tenure's claim statement alone in
a loop (claim-only, with its plan), so that a slowdown can be pinned on the claim's plan.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from typing import Any

from ..config import Config
from ..core import Harness
from ..phase import Evaluation, Phase, Results
from ..system import loadavg, log, scalar

# Claim parameters for EXPLAIN: 100 noop jobs, as the claim-only loop takes them.
PLAN_PARAMS = {"owner": "plan", "tools": ["noop"], "lease_ms": [30000], "limit": 100}


def claim_only(h: Harness, n: int) -> dict[str, Any]:
    """Claim statements alone (tenure's Store.claim, 100 per statement) over n queued jobs.

    The table is ANALYZEd after the enqueue (the state autovacuum reaches soon after),
    so every case is planned with statistics that know about the queued rows.
    """
    asyncio.run(h.enqueue_bulk("tenure", n))
    c = h.db()
    c.execute("ANALYZE tenure_jobs")
    from tenure._store import QUERIES

    plan_ms, scans, plan_text = None, [], None
    with contextlib.suppress(Exception), c.transaction(force_rollback=True):
        plan_text = "\n".join(
            r[0]
            for r in c.execute(
                "EXPLAIN (ANALYZE, BUFFERS) " + QUERIES["claim"], PLAN_PARAMS
            ).fetchall()
        )
    with contextlib.suppress(Exception), c.transaction(force_rollback=True):
        plan = scalar(c, "EXPLAIN (ANALYZE, FORMAT JSON) " + QUERIES["claim"], PLAN_PARAMS)[0]
        plan_ms = round(plan["Execution Time"], 3)

        def walk(node: dict[str, Any]) -> None:
            if node.get("Relation Name") == "tenure_jobs" and "Scan" in node["Node Type"]:
                scans.append(f"{node['Node Type']}:{node.get('Index Name', '-')}")
            for child in node.get("Plans", []):
                walk(child)

        walk(plan["Plan"])

    async def go() -> list[float]:
        from tenure._store import Store

        store = Store(h.cfg.dsn, max_size=1)
        await store.open()
        times = []
        try:
            while True:
                t = time.perf_counter()
                got = await store.claim("claim-bench", {"noop": 30000}, 100)
                times.append(time.perf_counter() - t)
                if not got:
                    break
        finally:
            await store.close()
        return times

    times = asyncio.run(go())
    total = sum(times[:-1])
    return {
        "claims": len(times) - 1,
        "jobs_per_s": round(n / total, 1) if total else None,
        "claim_ms_median": round(statistics.median(times[:-1]) * 1000, 3),
        "explain_analyze_ms": plan_ms,
        "scans": sorted(set(scans)),
        "plan_text": plan_text,
    }


def measure(h: Harness, case: str) -> dict[str, Any]:
    """One case: drains and claim-only loops on top of the table's rows (kept, not reset)."""
    cfg = h.cfg
    c = h.db()
    drains, claims = [], []
    for rep in range(cfg.bloat_reps):
        log(f"bloat: {case} ({rep + 1}/{cfg.bloat_reps})")
        # Every repetition starts from the same steady state: no dead tuples
        # left by the previous one, fresh statistics.
        c.execute("VACUUM ANALYZE tenure_jobs")
        c.execute("VACUUM tenure_events")
        drains.append(h.drain_once("tenure", "tenure", {}, 1, cfg.bloat_jobs, reset=False))
        c.execute("DELETE FROM tenure_jobs WHERE idempotency_key NOT LIKE 'done-%'")
        c.execute("VACUUM ANALYZE tenure_jobs")
        claims.append(claim_only(h, cfg.bloat_jobs))
        c.execute("DELETE FROM tenure_jobs WHERE idempotency_key NOT LIKE 'done-%'")
    rows = scalar(c, "SELECT count(*) FROM tenure_jobs")
    size = scalar(c, "SELECT pg_total_relation_size('tenure_jobs')")

    def med(xs: list[float]) -> float:
        return round(statistics.median(xs), 1)

    result = {
        "case": case,
        "rows_in_table": rows,
        "table_mb": round(size / 2**20, 1),
        "drain_jobs_per_s": med([d["jobs_per_s"] for d in drains]),
        "drain_runs": [d["jobs_per_s"] for d in drains],
        "claim_jobs_per_s": med([x["jobs_per_s"] for x in claims]),
        "claim_runs": [x["jobs_per_s"] for x in claims],
        "claim_ms_median": med([x["claim_ms_median"] for x in claims]),
        "claim_explain_ms": med([x["explain_analyze_ms"] or 0 for x in claims]),
        "claim_scans": claims[-1]["scans"],
        "claim_plan": claims[-1].get("plan_text"),
        "drain_worker_cpu_us_per_job": med(
            [1e6 * d["cpu"]["worker_cpu_s"] / cfg.bloat_jobs for d in drains]
        ),
        "drain_pg_cpu_us_per_job": med(
            [1e6 * d["cpu"]["pg_backend_cpu_s"] / cfg.bloat_jobs for d in drains]
        ),
        "load": [drains[0]["cpu"]["load_start"][0], loadavg()[0]],
    }
    log(f"  → drain {result['drain_runs']} jobs/s, claim-only {result['claim_runs']} jobs/s")
    return result


def run(h: Harness) -> None:
    cfg = h.cfg
    cases = []
    c = h.db()
    h.reset("tenure")
    c.execute("VACUUM ANALYZE tenure_jobs")
    cases.append(measure(h, "empty table"))
    log(f"bloat: inserting {cfg.bloat_rows} terminal rows")
    t = time.monotonic()
    c.execute(
        "INSERT INTO tenure_jobs (tool, state, idempotency_key, payload, payload_hash, "
        "max_attempts, attempt, token, result, finished_at, created_at, updated_at) "
        "SELECT 'noop', 'succeeded', 'done-' || g, '{}'::jsonb, 'x', 5, 1, g, "
        "'null'::jsonb, now() - interval '1 day', now() - interval '1 day', "
        "now() - interval '1 day' FROM generate_series(1, %s) g",
        (cfg.bloat_rows,),
    )
    c.execute("VACUUM ANALYZE tenure_jobs")
    insert_s = time.monotonic() - t
    cases.append(measure(h, f"{cfg.bloat_rows:,} terminal rows"))
    c.execute("DELETE FROM tenure_jobs WHERE state IN ('succeeded', 'failed', 'cancelled')")
    c.execute("VACUUM ANALYZE tenure_jobs")
    cases.append(measure(h, "after DELETE + VACUUM (pruned)"))
    h.results["bloat"] = {
        "terminal_rows": cfg.bloat_rows,
        "insert_s": round(insert_s, 1),
        "jobs": cfg.bloat_jobs,
        "cases": cases,
    }


def section(cfg: Config, res: Results) -> list[str]:
    bl = res.get("bloat")
    if not bl:
        return []
    lines = [
        f"## 5. Claim throughput vs terminal rows ({bl['jobs']:,} jobs per case, 1 worker, "
        f"median of {cfg.bloat_reps})",
        "",
        "tenure has no pruner yet: the pruned case is `DELETE` of the terminal rows + "
        "`VACUUM ANALYZE`. *Drain* is the full worker; *claim-only* is `Store.claim` of 100 per "
        "statement in a loop (no execution, no commit), after an `ANALYZE` so that every case "
        "is planned with statistics that know the queued rows. Each repetition starts with "
        "`VACUUM ANALYZE` (no dead tuples from the previous one). The claim's plans are in the "
        "JSON (`bloat.cases[].claim_plan`).",
        "",
        "| case | rows in table | table+indexes MB | drain jobs/s | drain CPU µs/job (worker+PG) | claim-only jobs/s | claim ms (median) | EXPLAIN ANALYZE ms | claim's scans | load 1m |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for cse in bl["cases"]:
        lines.append(
            f"| {cse['case']} | {cse['rows_in_table']:,} | {cse['table_mb']} "
            f"| {cse['drain_jobs_per_s']:,} "
            f"| {cse['drain_worker_cpu_us_per_job']}+{cse['drain_pg_cpu_us_per_job']} "
            f"| {cse['claim_jobs_per_s']:,} "
            f"| {cse['claim_ms_median']} | {cse['claim_explain_ms']} "
            f"| {', '.join(cse['claim_scans'])} "
            f"| {cse['load'][0]}→{cse['load'][1]} |"
        )
    lines.append("")
    return lines


def evaluate(cfg: Config, res: Results, ev: Evaluation) -> None:
    bl = res.get("bloat")
    if not bl or len(bl["cases"]) < 2:
        return
    empty, full = bl["cases"][0], bl["cases"][1]
    for key, what in (("drain_jobs_per_s", "drain"), ("claim_jobs_per_s", "claim-only")):
        if empty[key] and full[key]:
            r = full[key] / empty[key]
            ev.target(
                f"{what} with {bl['terminal_rows']:,} terminal rows ≥ 80 % of empty",
                f"{full[key]:,.0f} vs {empty[key]:,.0f} jobs/s = {100 * r:.0f} %",
                r >= 0.8,
            )


PHASE = Phase("bloat", run, section, evaluate)
