#!/usr/bin/env python
# ruff: noqa: E501  (Markdown table rows)
"""Churn: jobs run and pruned in a loop; do table and index sizes level off? (issue #26)

    bench/.venv/bin/python bench/churn.py [--jobs 1000000] [--minutes 30] [--every 60]
        [--workers 2] [--retain 60] [--prune-interval 10] [--batch 500]

Starts ``--workers`` bench/apps/churn_worker.py processes (the real Worker, a no-op tool,
tenure's own job pruner and journal pruner every ``--prune-interval`` seconds; the journal
keeps its rows max(60 s, ``--retain``), its floor) and a producer in this process that
queues ``--jobs`` no-op calls with ``enqueue_many`` (``--batch`` per call) at a steady rate
over ``--minutes``, each with ``retain=--retain`` seconds: the workers run them, the
pruners delete them once their retention has passed. Nothing here deletes a row, and
autovacuum is as the server has it (its settings are printed).

Every ``--every`` seconds it samples tenure_jobs (live and dead rows from
pg_stat_user_tables, rows pruned so far, autovacuum runs, ``pg_table_size`` and
``pg_indexes_size``), tenure_events (``pg_total_relation_size``: table, TOAST and indexes),
all of tenure's tables together, and the database. After the last job is queued it waits
for the workers to finish every one (a deadline, not a sleep), then prints the samples
as a Markdown table and a verdict: the growth of tenure's relations over the last third of
the run against the first third, the jobs lost (queued but never finished: must be 0),
the throughput, and the CPU of the workers and of the database's backends.

PostgreSQL: $BENCH_ADMIN_DSN (default host=127.0.0.1 port=5432 user=postgres
dbname=postgres); the database is tenure_churn, dropped at the end. A server with
autovacuum off (a CI configuration) never reclaims the pruned rows' space: the script says
so, and ``--own-server`` runs the whole thing on a private PostgreSQL instead (initdb with
the defaults of the PostgreSQL that ``pg_config`` names, autovacuum on, on a free port of
127.0.0.1; run as the postgres user when this is root; stopped and removed at the end).
Prints figures; asserts nothing about them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import scratch
from scratch import drop_database, fresh_database, proc_cpu, stop_processes

from tenure import App
from tenure._store import migrate

DB = "tenure_churn"
APPS = Path(__file__).parent / "apps"
MB = 2**20

SAMPLE = """
SELECT s.n_live_tup, s.n_dead_tup, s.n_tup_del, s.autovacuum_count,
       (SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = 'tenure_events'::regclass),
       pg_table_size('tenure_jobs'), pg_indexes_size('tenure_jobs'),
       pg_total_relation_size('tenure_events'),
       (SELECT sum(pg_total_relation_size(c.oid))
          FROM pg_class c
         WHERE c.relkind IN ('r', 'p') AND c.relname LIKE 'tenure\\_%'
           AND c.relnamespace = current_schema()::regnamespace),
       pg_database_size(current_database())
FROM pg_stat_user_tables s
WHERE s.relid = 'tenure_jobs'::regclass
"""


@dataclass
class Sample:
    at: float  # seconds since the producer started
    enqueued: int
    finished: int
    live: int
    dead: int
    pruned: int
    autovacuums: int
    events_autovacuums: int
    jobs_table: int
    jobs_indexes: int
    events: int
    tenure: int
    database: int

    def row(self) -> str:
        """This sample as a row of the Markdown table."""
        return (
            f"| {int(self.at) // 60}:{int(self.at) % 60:02d} | {self.enqueued:,} "
            f"| {self.finished:,} | {self.live:,} / {self.dead:,} | {self.pruned:,} "
            f"| {self.autovacuums} / {self.events_autovacuums} | {mb(self.jobs_table)} "
            f"| {mb(self.jobs_indexes)} | {mb(self.events)} | {mb(self.tenure)} "
            f"| {mb(self.database)} |"
        )


@contextlib.contextmanager
def own_server() -> Iterator[str]:
    """A private PostgreSQL with its defaults (autovacuum on) on a free port: its admin DSN."""
    bindir = Path(subprocess.check_output(["pg_config", "--bindir"], text=True).strip())
    root = Path(tempfile.mkdtemp(prefix="tenure-churn-pg-"))
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_postgres:
        shutil.chown(root, "postgres", "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = root / "data"

    def quiet(*command: str | Path) -> None:
        subprocess.run([*as_postgres, *map(str, command)], stdout=subprocess.DEVNULL, check=True)

    quiet(
        bindir / "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"
    )
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1"
    quiet(bindir / "pg_ctl", "-D", data, "-w", "-l", root / "server.log", "-o", options, "start")
    try:
        yield f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    finally:
        quiet(bindir / "pg_ctl", "-D", data, "-w", "-m", "fast", "stop")
        shutil.rmtree(root, ignore_errors=True)


def counts(stats: list[Path]) -> dict[str, int]:
    """The workers' counters summed (each file is rewritten twice a second)."""
    total: dict[str, int] = {}
    for path in stats:
        try:
            data = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            continue
        for key, value in data["counts"].items():
            total[key] = total.get(key, 0) + value
    return total


def mb(n: float) -> str:
    return f"{n / MB:,.1f}"


def at_time(samples: list[Sample], t: float) -> Sample:
    return min(samples, key=lambda s: abs(s.at - t))


async def run(args: argparse.Namespace, dsn: str, tmp: Path) -> None:
    stats = [tmp / f"w{i}.json" for i in range(args.workers)]
    env = {**os.environ, "TENURE_DSN": dsn, "PYTHONPATH": str(APPS)}
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                str(APPS / "churn_worker.py"),
                "--stats",
                str(stats[i]),
                "--retain",
                str(args.retain),
                "--prune-interval",
                str(args.prune_interval),
                "--journal-retention",
                str(args.retain),
            ],
            env=env,
            stderr=open(tmp / f"w{i}.log", "w"),
        )
        for i in range(args.workers)
    ]
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    app = App(dsn, retain=args.retain)

    @app.tool("noop", lease=30, heartbeat=10, jitter=5, retain=args.retain)
    async def noop(ctx) -> None:  # type: ignore[no-untyped-def]
        return None

    enqueued = 0
    # The database's backends' CPU: at the first sample and the last seen, by pid (a
    # backend that appears later counts from 0: it started during the run).
    first_cpu: dict[int, float] = {}
    seen_cpu: dict[int, float] = {}

    async def backends_cpu() -> None:
        cur = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (DB,),
        )
        started = bool(seen_cpu)
        for (pid,) in await cur.fetchall():
            cpu = proc_cpu(pid)
            first_cpu.setdefault(pid, 0.0 if started else cpu)
            seen_cpu[pid] = cpu

    async def sample(t0: float) -> Sample:
        cur = await conn.execute(SAMPLE)
        row = await cur.fetchone()
        assert row is not None
        await backends_cpu()
        taken = Sample(
            time.monotonic() - t0, enqueued, counts(stats).get("succeeded", 0), *map(int, row)
        )
        print(taken.row(), file=sys.stderr, flush=True)  # progress, for a long run
        return taken

    try:
        deadline = time.monotonic() + 60
        while not all(p.exists() for p in stats):
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                raise RuntimeError(f"workers did not start; logs in {tmp}")
            await asyncio.sleep(0.2)
        settings = await (
            await conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum',"
                " 'autovacuum_naptime', 'autovacuum_vacuum_scale_factor',"
                " 'autovacuum_vacuum_threshold', 'autovacuum_vacuum_insert_scale_factor',"
                " 'autovacuum_vacuum_cost_limit', 'autovacuum_vacuum_cost_delay') ORDER BY name"
            )
        ).fetchall()
        seconds = args.minutes * 60
        rate = args.jobs / seconds
        cpu0 = sum(proc_cpu(w.pid) for w in workers)
        t0 = time.monotonic()
        samples = [await sample(t0)]

        async def produce() -> None:
            nonlocal enqueued
            while enqueued < args.jobs:
                n = min(args.batch, args.jobs - enqueued)
                # A batch goes when the rate has caught up with it: the last at --minutes.
                if (wait := t0 + (enqueued + n) / rate - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                await app.enqueue_many("noop", [{}] * n, retain=args.retain)
                enqueued += n

        producer = asyncio.create_task(produce())
        k = 1
        while not producer.done():
            wait = t0 + k * args.every - time.monotonic()
            await asyncio.wait([producer], timeout=max(0.0, wait))
            if producer.done():
                break
            samples.append(await sample(t0))
            if any(w.poll() is not None for w in workers):
                raise RuntimeError(f"a worker exited; logs in {tmp}")
            k += 1
        await producer
        produced_s = time.monotonic() - t0
        # Every job queued: wait (polling, with a deadline) until the workers finished them.
        deadline = time.monotonic() + max(120.0, 4 * args.every)
        while counts(stats).get("succeeded", 0) < enqueued and time.monotonic() < deadline:
            if any(w.poll() is not None for w in workers):
                raise RuntimeError(f"a worker exited; logs in {tmp}")
            await asyncio.sleep(0.5)
        drained_s = time.monotonic() - t0
        await asyncio.sleep(1.0)  # the stats files are rewritten twice a second
        samples.append(await sample(t0))
        worker_cpu = sum(proc_cpu(w.pid) for w in workers) - cpu0
        pg_cpu = sum(seen_cpu[p] - first_cpu[p] for p in seen_cpu)
        cur = await conn.execute(
            "SELECT state, count(*) FROM tenure_jobs GROUP BY state ORDER BY state"
        )
        states = {s: int(n) for s, n in await cur.fetchall()}
        final_counts = counts(stats)
    finally:
        stop_processes(workers, timeout=60)
        await app.aclose()
        await conn.close()

    load = os.getloadavg()
    print(
        f"{args.jobs:,} no-op jobs over {args.minutes:g} min ({rate:,.0f} jobs/s target, "
        f"enqueue_many of {args.batch}), {args.workers} worker processes; retain {args.retain:g} s, "
        f"job and journal pruners every {args.prune_interval:g} s, journal retention "
        f"{max(60.0, args.retain):g} s; load average now {load[0]:.2f}"
    )
    server = "a private PostgreSQL (--own-server)" if args.own_server else scratch.ADMIN
    print(
        f"server: {server}; autovacuum: "
        + ", ".join(f"{n.removeprefix('autovacuum_')}={v}" for n, v in settings)
    )
    if dict(settings).get("autovacuum") == "off":
        print(
            "**autovacuum is off on this server**: nothing reclaims the pruned rows' space "
            "but page pruning and index entry deletion; --own-server runs with it on"
        )
    print()
    print(
        "| min:s | enqueued | finished | tenure_jobs live / dead | pruned | autovacuums jobs / events "
        "| tenure_jobs table MB | its indexes MB | tenure_events (+ indexes) MB "
        "| all tenure relations MB | database MB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in samples:
        print(s.row())
    print()
    third = produced_s / 3
    first = at_time(samples, third).tenure - at_time(samples, 0).tenure
    last = at_time(samples, produced_s).tenure - at_time(samples, 2 * third).tenure
    levelled = last <= first / 4 or (last < MB and last <= first)
    verdict = "levelled off" if levelled else "still growing"
    print(
        f"{verdict}: all tenure relations +{mb(last)} MB in the last {third / 60:.1f} min "
        f"against +{mb(first)} MB in the first {third / 60:.1f} (peak {mb(max(s.tenure for s in samples))} MB, "
        f"end {mb(samples[-1].tenure)} MB)"
    )
    a, b = at_time(samples, 2 * third), samples[-1]
    print(
        f"over the last third: tenure_jobs table +{mb(b.jobs_table - a.jobs_table)} MB, its "
        f"indexes +{mb(b.jobs_indexes - a.jobs_indexes)}, tenure_events "
        f"+{mb(b.events - a.events)}, tenure's other relations "
        f"+{mb((b.tenure - b.jobs_table - b.jobs_indexes - b.events) - (a.tenure - a.jobs_table - a.jobs_indexes - a.events))}"
    )
    finished = final_counts.get("succeeded", 0)
    others = {k: v for k, v in final_counts.items() if k not in ("succeeded", "claimed")}
    unfinished = sum(n for s, n in states.items() if s != "succeeded")
    print(
        f"jobs lost: {enqueued - finished:,} (queued {enqueued:,}, finished {finished:,}; rows "
        f"left not succeeded {unfinished:,}; tenure_jobs by state at the end {states}; "
        f"workers' other counters {others or 'none'})"
    )
    print(
        f"throughput: {enqueued / produced_s:,.0f} jobs/s queued over {produced_s:.0f} s, "
        f"{finished / drained_s:,.0f} jobs/s finished (all within {drained_s - produced_s:.1f} s "
        f"of the last enqueue); CPU: workers {100 * worker_cpu / drained_s:.1f} % of a core, "
        f"the database's backends {100 * pg_cpu / drained_s:.1f} %"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--retain", type=float, default=60.0, help="seconds an ended job is kept")
    parser.add_argument("--prune-interval", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=500, help="jobs per enqueue_many")
    parser.add_argument(
        "--own-server",
        action="store_true",
        help="run on a private PostgreSQL with its defaults (autovacuum on), not $BENCH_ADMIN_DSN",
    )
    args = parser.parse_args()
    with own_server() if args.own_server else contextlib.nullcontext(scratch.ADMIN) as admin:
        scratch.ADMIN = admin
        dsn = fresh_database(DB)
        migrate(dsn)
        tmp = Path(tempfile.mkdtemp(prefix="tenure-churn-"))
        try:
            asyncio.run(run(args, dsn, tmp))
        finally:
            drop_database(DB)


if __name__ == "__main__":
    main()
