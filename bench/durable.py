"""What durable runs cost: a checkpoint per model step and per tool call, and runs waiting.

    .venv/bin/python bench/durable.py [--runs 10] [--steps 40] [--waiting 10000] [--window 60]
                                      [--async-commit] [--no-waiting]

1. Checkpoint overhead, p50/p95 (bench/README.md, "Durable runs"): a pydantic-ai agent
   (``bench/apps/durable_app.py``, an offline model answering at once) asks for a function
   tool ``--steps`` times. The model and the tool note when each starts; the interval
   model -> tool holds the model step's checkpoint (the response reduced to JSON by
   pydantic-ai's codec, then ``ctx.step``'s fenced insert), tool -> next model the tool
   call's. The same agent runs as a plain agent (no job, no checkpoint) and as a durable
   run (a job of a worker in this process): the overhead is the difference. A checkpoint
   is one write transaction, so its cost is mostly the commit's WAL flush:
   ``--async-commit`` runs the same with ``synchronous_commit=off`` for tenure's sessions
   (an operator's choice; a step whose record a server crash lost runs again).
2. What ``--waiting`` runs cost while they wait, each after one step: sleeping an hour
   (``ctx.sleep``), and waiting for a child job queued an hour ahead (``ctx.wait_for``).
   They went through a worker process with 1,000 slots and hold nothing now: the
   transactions and rows per second the database does meanwhile, its CPU and the
   worker's, over ``--window`` seconds; and what one backstop sweep of the children waits
   (``resume_children_waits``, every 30 s per worker) costs with them all open.

PostgreSQL: $BENCH_ADMIN_DSN (default the machine's server at 127.0.0.1:5432); a database
of its own, dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

BENCH = Path(__file__).resolve().parent
APPS = BENCH / "apps"
sys.path.insert(0, str(BENCH))
from harness.system import CpuWindow, log, pct  # noqa: E402
from scratch import drop_database, fresh_database  # noqa: E402

DB = "tenure_bench_durable"
TABLES = ("tenure_jobs", "tenure_waitpoints", "tenure_steps", "tenure_events")


def figures(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(pct(values, 50) * 1000, 3),
        "p95_ms": round(pct(values, 95) * 1000, 3),
    }


def intervals(times: list[tuple[str, float]]) -> dict[str, list[float]]:
    """model -> tool and tool -> model gaps, in seconds."""
    found: dict[str, list[float]] = {"model_step": [], "tool_call": []}
    for (what, at), (then, later) in itertools.pairwise(times):
        if (what, then) == ("model", "tool"):
            found["model_step"].append(later - at)
        elif (what, then) == ("tool", "model"):
            found["tool_call"].append(later - at)
    return found


async def overhead(runs: int) -> dict[str, Any]:
    import durable_app

    plain: dict[str, list[float]] = {"model_step": [], "tool_call": []}
    durable: dict[str, list[float]] = {"model_step": [], "tool_call": []}
    for _ in range(runs):
        durable_app.TIMES.clear()
        await durable_app.agent.run("go")
        for kind, gaps in intervals(durable_app.TIMES).items():
            plain[kind] += gaps
    app = durable_app.app
    worker = app.worker(concurrency=4, poll_interval=0.05)
    running = asyncio.create_task(worker.run(handle_signals=False))
    try:
        for n in range(runs):
            durable_app.TIMES.clear()
            await durable_app.durability.run("go", key=f"overhead-{n}", timeout=600)
            for kind, gaps in intervals(durable_app.TIMES).items():
                durable[kind] += gaps
    finally:
        worker.stop()
        await running
    result: dict[str, Any] = {}
    for kind in ("model_step", "tool_call"):
        p, d = figures(plain[kind]), figures(durable[kind])
        result[kind] = {
            "plain": p,
            "durable": d,
            "overhead_p50_ms": round(d["p50_ms"] - p["p50_ms"], 3),
            "overhead_p95_ms": round(d["p95_ms"] - p["p95_ms"], 3),
        }
    return result


def counters(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    conn.execute("SELECT pg_stat_force_next_flush()")
    (xacts,) = conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone() or (0,)
    (rows,) = conn.execute(
        "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables"
        " WHERE relname = ANY(%s)",
        (list(TABLES),),
    ).fetchone() or (0,)
    return int(xacts), int(rows)


def until(conn: psycopg.Connection[Any], query: str, wanted: int, what: str) -> None:
    deadline = time.monotonic() + 900
    while (conn.execute(query).fetchone() or (0,))[0] < wanted:
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.5)


async def waiting_cost(
    app: Any, dsn: str, worker_pid: int, tool: str, runs: int, window: float
) -> dict[str, Any]:
    """``runs`` jobs of ``tool``, each waiting after one step: the cost while they wait."""
    started = time.monotonic()
    for first in range(0, runs, 1000):
        count = min(1000, runs - first)
        await app.enqueue_many(tool, [{"n": first + i} for i in range(count)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = f"SELECT count(*) FROM tenure_jobs WHERE tool = '{tool}' AND state = 'waiting'"
        until(conn, query, runs, f"the {tool} runs never all waited")
        through = time.monotonic() - started
        time.sleep(2)
        x0, r0 = counters(conn)
        cpu = CpuWindow(conn, conninfo_to_dict(dsn)["dbname"], [worker_pid])
        time.sleep(window)
        used = cpu.close()
        time.sleep(1.0)  # pgstat publishes with a delay
        x1, r1 = counters(conn)
        held = conn.execute(
            "SELECT count(*) FILTER (WHERE state = 'running'),"
            " count(*) FILTER (WHERE lease_until IS NOT NULL) FROM tenure_jobs"
        ).fetchone()
        sweep_ms: list[float] = []
        if tool == "parent":
            for _ in range(5):
                t0 = time.perf_counter()
                conn.execute(
                    "SELECT count(*) FROM tenure_waitpoints w WHERE w.state = 'open'"
                    " AND w.kind = 'children' AND NOT EXISTS (SELECT FROM tenure_jobs c"
                    " WHERE c.id = ANY(w.waiting_on)"
                    " AND c.state NOT IN ('succeeded', 'failed', 'cancelled'))"
                )
                sweep_ms.append((time.perf_counter() - t0) * 1000)
        conn.execute("UPDATE tenure_waitpoints SET state = 'cancelled' WHERE state = 'open'")
        conn.execute(
            "UPDATE tenure_jobs SET state = 'cancelled', lease_until = NULL"
            " WHERE state IN ('waiting', 'queued')"
        )
    wall = used["wall_s"]
    assert held is not None
    return {
        "runs": runs,
        "seconds_to_get_them_all_waiting": round(through, 1),
        "running": held[0],
        "leases": held[1],
        "transactions_per_s": round((x1 - x0) / wall, 1),
        "rows_written_per_s": round((r1 - r0) / wall, 1),
        "pg_cpu_pct": round(100 * used["pg_backend_cpu_s"] / wall, 1),
        "worker_cpu_pct": round(100 * used["worker_cpu_s"] / wall, 1),
        "other_load_cores": used["other_load_cores"],
        "backstop_sweep_ms": [round(v, 1) for v in sweep_ms],
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.async_commit:
        os.environ["PGOPTIONS"] = "-c synchronous_commit=off"  # libpq: every session of ours
    dsn = fresh_database(DB)
    os.environ["TENURE_DSN"] = dsn
    os.environ["BENCH_STEPS"] = str(args.steps)
    sys.path.insert(0, str(APPS))
    import durable_app

    results: dict[str, Any] = {"load_start": list(os.getloadavg())}
    try:
        log(f"overhead: {args.runs} runs of {args.steps} model steps and tool calls, each way")
        results["overhead"] = await overhead(args.runs)
        results["synchronous_commit"] = "off" if args.async_commit else "on"
        if args.no_waiting:
            return results
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(APPS), os.environ.get("PYTHONPATH", "")]),
        }
        logs = BENCH / "results" / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / "durable-w.log").open("wb") as out:
            worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tenure",
                    "--log-level",
                    "WARNING",
                    "worker",
                    "durable_app:app",
                    "--concurrency",
                    "1000",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            await asyncio.sleep(3)
            for tool in ("nap", "parent"):
                log(f"waiting: {args.waiting} runs of {tool}, {args.window} s window")
                results[f"waiting_{tool}"] = await waiting_cost(
                    durable_app.app, dsn, worker.pid, tool, args.waiting, args.window
                )
        finally:
            worker.terminate()
            worker.wait(30)
    finally:
        await durable_app.app.aclose()
        drop_database(DB)
    results["load_end"] = list(os.getloadavg())
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40)  # pydantic-ai allows 50 requests
    parser.add_argument("--waiting", type=int, default=10_000)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--async-commit", action="store_true")
    parser.add_argument("--no-waiting", action="store_true")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
