"""What the agent-facing runtime costs and how fast it answers, in one run.

    bench/.venv/bin/python bench/runtime.py [--waits 200] [--cancels 30] [--jobs 1000]

Three figures (bench/README.md, "The agent-facing runtime"):

1. commit -> waiter returned, p50/p95: a worker process commits a job; a waiter in this
   process returns. tenure `App.wait` (pushed by NOTIFY, polling set to once a minute so
   that only the push can answer) against pgqueuer's `CompletionWatcher` (its nearest
   equivalent: LISTEN plus a status query), at its default 50 ms debounce and at 1 ms.
   The commit time is the database's own record of it (tenure `finished_at`, pgqueuer
   `pgqueuer_log.created`); same machine, same clock as this process's `time.time()`.
2. cancel returned -> tool stopped, p50/p95: an async tool (CancelledError) and a threaded
   one (polling `ctx.cancelled` every 5 ms), whose heartbeat is 30 s away.
3. `report_progress` at `--rate` reports/s per job across `--jobs` running jobs: the
   statements, rows and PostgreSQL CPU per second it adds to the same jobs without it.

PostgreSQL: $BENCH_ADMIN_DSN (default the machine's server at 127.0.0.1:5432); a
database of its own, dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
from pgqueuer.core.completion import CompletionWatcher
from pgqueuer.db import AsyncpgDriver
from pgqueuer.queries import Queries
from psycopg.conninfo import conninfo_to_dict, make_conninfo

BENCH = Path(__file__).resolve().parent
APPS = BENCH / "apps"
sys.path.insert(0, str(BENCH))
from harness.system import CpuWindow, backend_pids, log, pct  # noqa: E402

import tenure  # noqa: E402


def dsn_for(admin: str, db: str) -> str:
    params = conninfo_to_dict(admin)
    params["dbname"] = db
    return make_conninfo(**params)  # type: ignore[arg-type]


def url_for(dsn: str) -> str:
    p = conninfo_to_dict(dsn)
    host = p.get("host", "127.0.0.1")
    return f"postgresql://{p.get('user', 'postgres')}@{host}:{p.get('port', 5432)}/{p['dbname']}"


class Udp:
    """Datagrams from the tools: ``what key time``."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self.seen: dict[tuple[str, str], float] = {}

    async def wait(self, what: str, key: str, timeout: float = 30.0) -> float:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + timeout
        while (what, key) not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {what} {key}")
            try:
                data = await asyncio.wait_for(loop.sock_recv(self.sock, 200), left)
            except TimeoutError:
                continue
            kind, k, at = data.decode().split()
            self.seen[(kind, k)] = float(at)
        return self.seen[(what, key)]


def spawn(cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    out = open(log_path, "wb")
    return subprocess.Popen(cmd, env=env, cwd=APPS, stdout=out, stderr=subprocess.STDOUT)


def stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()


def figures(samples: Sequence[float]) -> dict[str, Any]:
    ms = [s * 1000 for s in samples]
    return {"n": len(ms), "p50_ms": round(pct(ms, 50), 2), "p95_ms": round(pct(ms, 95), 2)}


async def tenure_waits(app: tenure.App, dsn: str, n: int) -> list[float]:
    samples = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(n):
            job = await app.enqueue("echo", {"n": i})
            await app.wait(job.id, timeout=30)
            returned = time.time()
            row = conn.execute(
                "SELECT extract(epoch FROM finished_at) FROM tenure_jobs WHERE id = %s", (job.id,)
            ).fetchone()
            assert row is not None
            samples.append(returned - float(row[0]))
    return samples


async def pgqueuer_waits(url: str, n: int, debounce_ms: float) -> list[float]:
    samples = []
    conn = await asyncpg.connect(url)
    driver = AsyncpgDriver(conn)
    queries = Queries(driver)
    probe = await asyncpg.connect(url)
    try:
        async with CompletionWatcher(
            driver, queries=queries, debounce=timedelta(milliseconds=debounce_ms)
        ) as watcher:
            for _ in range(n):
                (job_id,) = await queries.enqueue("noop", None)
                await asyncio.wait_for(watcher.wait_for(job_id), 30)
                returned = time.time()
                created = await probe.fetchval(
                    "SELECT extract(epoch FROM created) FROM pgqueuer_log"
                    " WHERE job_id = $1 AND status = 'successful'",
                    job_id,
                )
                samples.append(returned - float(created))
    finally:
        await probe.close()
        await conn.close()
    return samples


async def cancels(app: tenure.App, udp: Udp, tool: str, n: int) -> list[float]:
    samples = []
    for i in range(n):
        key = f"{tool}-{i}"
        job = await app.enqueue(tool, {"key": key})
        await udp.wait("started", key)
        await app.cancel(job.id)
        returned = time.time()
        samples.append(await udp.wait("stopped", key) - returned)
    return samples


async def progress_cost(
    app: tenure.App, dsn: str, worker_pids: list[int], jobs: int, rate: float, window: float
) -> dict[str, Any]:
    """Statements, rows and CPU per second while ``jobs`` calls run, reporting ``rate``/s."""
    await app.enqueue_many(
        "report_loop", [{"seconds": window + 20, "rate": rate} for _ in range(jobs)]
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 60
        while (
            conn.execute("SELECT count(*) FROM tenure_jobs WHERE state = 'running'").fetchone()[0]
            < jobs
        ):
            if time.monotonic() > deadline:
                raise TimeoutError("the jobs never all ran")
            await asyncio.sleep(0.2)
        await asyncio.sleep(3)  # past the start-up burst: claims, first beats

        def counters() -> tuple[int, int]:
            row = conn.execute(
                "SELECT d.xact_commit, t.n_tup_upd FROM pg_stat_database d,"
                " pg_stat_user_tables t WHERE d.datname = current_database()"
                " AND t.relname = 'tenure_jobs'"
            ).fetchone()
            assert row is not None
            return int(row[0]), int(row[1])

        conn.execute("SELECT pg_stat_force_next_flush()")
        x0, u0 = counters()
        cpu = CpuWindow(conn, conninfo_to_dict(dsn)["dbname"], worker_pids)
        await asyncio.sleep(window)
        used = cpu.close()
        conn.execute("SELECT pg_stat_force_next_flush()")
        await asyncio.sleep(1.0)  # pgstat publishes with a delay
        x1, u1 = counters()
        conn.execute(
            "UPDATE tenure_jobs SET state = 'cancelled', lease_until = NULL"
            " WHERE state IN ('queued', 'running')"
        )
    wall = used["wall_s"]
    return {
        "jobs": jobs,
        "rate_per_job": rate,
        "transactions_per_s": round((x1 - x0) / wall, 1),
        "rows_updated_per_s": round((u1 - u0) / wall, 1),
        "pg_cpu_pct": round(100 * used["pg_backend_cpu_s"] / wall, 1),
        "worker_cpu_pct": round(100 * used["worker_cpu_s"] / wall, 1),
        "other_load_cores": used["other_load_cores"],
    }


async def waiting_cost(
    app: tenure.App, dsn: str, worker_pids: list[int], jobs: int, window: float, slots: int
) -> dict[str, Any]:
    """What ``jobs`` calls waiting at waitpoints cost while they wait: they went through a
    worker with far fewer slots, and now hold no lease, send no heartbeat."""
    await app.enqueue_many("wait_for_answer", [{} for _ in range(jobs)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 300
        while (
            conn.execute("SELECT count(*) FROM tenure_jobs WHERE state = 'waiting'").fetchone()[0]
            < jobs
        ):
            if time.monotonic() > deadline:
                raise TimeoutError("the calls never all suspended")
            await asyncio.sleep(0.5)
        await asyncio.sleep(2)
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute(
            "SELECT d.xact_commit, t.n_tup_upd FROM pg_stat_database d, pg_stat_user_tables t"
            " WHERE d.datname = current_database() AND t.relname = 'tenure_jobs'"
        ).fetchone()
        cpu = CpuWindow(conn, conninfo_to_dict(dsn)["dbname"], worker_pids)
        await asyncio.sleep(window)
        used = cpu.close()
        conn.execute("SELECT pg_stat_force_next_flush()")
        await asyncio.sleep(1.0)
        after = conn.execute(
            "SELECT d.xact_commit, t.n_tup_upd FROM pg_stat_database d, pg_stat_user_tables t"
            " WHERE d.datname = current_database() AND t.relname = 'tenure_jobs'"
        ).fetchone()
        running = conn.execute(
            "SELECT count(*) FROM tenure_jobs WHERE state = 'running'"
        ).fetchone()[0]
        conn.execute("UPDATE tenure_jobs SET state = 'cancelled' WHERE state = 'waiting'")
        conn.execute("UPDATE tenure_waitpoints SET state = 'cancelled' WHERE state = 'open'")
    wall = used["wall_s"]
    assert row is not None and after is not None
    return {
        "waiting": jobs,
        "slots": slots,
        "running": running,
        "transactions_per_s": round((after[0] - row[0]) / wall, 1),
        "rows_updated_per_s": round((after[1] - row[1]) / wall, 1),
        "pg_cpu_pct": round(100 * used["pg_backend_cpu_s"] / wall, 1),
        "worker_cpu_pct": round(100 * used["worker_cpu_s"] / wall, 1),
    }


async def run(args: argparse.Namespace, dsn: str) -> dict[str, Any]:
    udp = Udp()
    env = {
        **os.environ,
        "TENURE_DSN": dsn,
        "BENCH_DSN_URL": url_for(dsn),
        "BENCH_UDP_PORT": str(udp.port),
        "PYTHONPATH": str(APPS),
    }
    logs = BENCH / "results" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    results: dict[str, Any] = {}
    os.environ["TENURE_DSN"] = dsn
    sys.path.insert(0, str(APPS))
    import runtime_app

    app = runtime_app.app
    app.poll_interval = 60  # only the push can answer a waiter within the run
    workers = [
        spawn(
            [
                py,
                "-m",
                "tenure",
                "--log-level",
                "WARNING",
                "worker",
                "runtime_app:app",
                "--concurrency",
                str(max(args.jobs, 50)),
            ],
            env,
            logs / "runtime-w.log",
        ),
        spawn(
            [
                py,
                str(APPS / "pgq_run.py"),
                "--factory",
                "pgq_app:factory",
                "--log-level",
                "WARNING",
            ],
            env,
            logs / "runtime-pgq.log",
        ),
    ]
    try:
        await asyncio.sleep(3)  # both workers connected and idle
        log(f"waits: {args.waits} each")
        results["wait_tenure"] = figures(await tenure_waits(app, dsn, args.waits))
        results["wait_pgqueuer_debounce_50ms"] = figures(
            await pgqueuer_waits(url_for(dsn), args.waits, 50)
        )
        results["wait_pgqueuer_debounce_1ms"] = figures(
            await pgqueuer_waits(url_for(dsn), args.waits, 1)
        )
        log(f"cancels: {args.cancels} each")
        results["cancel_async"] = figures(await cancels(app, udp, "spin_async", args.cancels))
        results["cancel_thread"] = figures(await cancels(app, udp, "spin_thread", args.cancels))
        log(f"progress: {args.jobs} jobs, {args.window} s with and without reports")
        with psycopg.connect(dsn, autocommit=True) as conn:
            pids = [workers[0].pid]
            assert backend_pids(conn, conninfo_to_dict(dsn)["dbname"])
        results["progress_off"] = await progress_cost(app, dsn, pids, args.jobs, 0, args.window)
        results["progress_on"] = await progress_cost(
            app, dsn, pids, args.jobs, args.rate, args.window
        )
        log(f"waiting: {args.waiting} calls at waitpoints, {args.window} s")
        results["waiting"] = await waiting_cost(
            app, dsn, pids, args.waiting, args.window, max(args.jobs, 50)
        )
    finally:
        stop(workers)
        await app.aclose()
    return results


def report(r: dict[str, Any]) -> str:
    on, off, w = r["progress_on"], r["progress_off"], r["waiting"]
    lines = [
        "| figure | p50 | p95 |",
        "|---|---:|---:|",
        f"| commit → waiter returned, tenure `wait` (push) | {r['wait_tenure']['p50_ms']} ms | "
        f"{r['wait_tenure']['p95_ms']} ms |",
        "| commit → waiter returned, pgqueuer `CompletionWatcher` (50 ms debounce, its default) "
        f"| {r['wait_pgqueuer_debounce_50ms']['p50_ms']} ms "
        f"| {r['wait_pgqueuer_debounce_50ms']['p95_ms']} ms |",
        "| commit → waiter returned, pgqueuer `CompletionWatcher` (1 ms debounce) "
        f"| {r['wait_pgqueuer_debounce_1ms']['p50_ms']} ms "
        f"| {r['wait_pgqueuer_debounce_1ms']['p95_ms']} ms |",
        f"| cancel returned → async tool stopped | {r['cancel_async']['p50_ms']} ms | "
        f"{r['cancel_async']['p95_ms']} ms |",
        f"| cancel returned → threaded tool stopped (polls every 5 ms) | "
        f"{r['cancel_thread']['p50_ms']} ms | {r['cancel_thread']['p95_ms']} ms |",
        "",
        f"`report_progress` at {on['rate_per_job']:g}/s per job, {on['jobs']} running jobs "
        "(heartbeat every 30 s):",
        "",
        "| | transactions/s | rows updated/s | PostgreSQL CPU | worker CPU |",
        "|---|---:|---:|---:|---:|",
        f"| without progress | {off['transactions_per_s']} | {off['rows_updated_per_s']} | "
        f"{off['pg_cpu_pct']} % | {off['worker_cpu_pct']} % |",
        f"| with progress | {on['transactions_per_s']} | {on['rows_updated_per_s']} | "
        f"{on['pg_cpu_pct']} % | {on['worker_cpu_pct']} % |",
        "",
        f"{w['waiting']:,} calls waiting at waitpoints (they went through a worker with "
        f"{w['slots']} slots; {w['running']} running now):",
        "",
        "| transactions/s | rows updated/s | PostgreSQL CPU | worker CPU |",
        "|---:|---:|---:|---:|",
        f"| {w['transactions_per_s']} | {w['rows_updated_per_s']} | {w['pg_cpu_pct']} % | "
        f"{w['worker_cpu_pct']} % |",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waits", type=int, default=200)
    parser.add_argument("--cancels", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--waiting", type=int, default=10_000)
    parser.add_argument("--db", default="tenure_bench_runtime")
    args = parser.parse_args(argv)
    admin = os.environ.get(
        "BENCH_ADMIN_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
    )
    dsn = dsn_for(admin, args.db)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{args.db}"')
    try:
        subprocess.run([sys.executable, "-m", "tenure", "--dsn", dsn, "migrate"], check=True)
        subprocess.run(
            [str(Path(sys.executable).parent / "pgq"), "--pg-dsn", url_for(dsn), "install"],
            check=True,
            capture_output=True,
        )
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        load = os.getloadavg()
        results = asyncio.run(run(args, dsn))
        results["meta"] = {"started": started, "load_start": load, "load_end": os.getloadavg()}
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
    print(report(results))
    out = BENCH / "results" / "runtime-latest.json"
    out.write_text(json.dumps(results, indent=2))
    log(f"figures in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
