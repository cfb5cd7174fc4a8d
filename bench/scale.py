#!/usr/bin/env python
# ruff: noqa: E501, RUF002  (Markdown table rows with math signs)
"""Leases at scale: many worker processes each holding thousands of long calls.

    bench/.venv/bin/python bench/scale.py [--procs 10] [--per-proc 10000] [--seconds 300]
                                          [--enqueue-rate JOBS_PER_S]

Starts ``--procs`` bench/apps/hold_worker.py processes (the real Worker, in-process,
its heartbeat thread's connection counted), queues procs × per-proc ``hold`` calls
(lease 15 s, heartbeat H = 5 s, jitter 4 s: the heartbeat phase's; --lease, --heartbeat and
--jitter change them) with
``enqueue_many``, waits until every one is running, lets one heartbeat period pass,
then measures a window of ``--seconds``: extend statements per process per H (the
target is one), rows extended, row updates and HOT updates, WAL bytes per second, the
CPU of the workers and of the database's backends, leases lost (the journal's
heartbeat_lost rows, the workers' counters, extensions that matched no row) and how many
are still running with a valid lease at the end. SIGTERM (grace 0) releases them.

PostgreSQL: $BENCH_ADMIN_DSN (default host=127.0.0.1 port=5432 user=postgres
dbname=postgres); the database is tenure_scale, dropped at the end. Prints figures;
asserts nothing about them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from scratch import drop_database, fresh_database, proc_cpu, stop_processes

from tenure import App
from tenure._store import migrate

DB = "tenure_scale"
APPS = Path(__file__).parent / "apps"
# The figures for 100,000 leases; tenure's own default policy is 90 / 30 / 20.
LEASE, HEARTBEAT, JITTER = 15.0, 5.0, 4.0
WAL_SAMPLE = 15.0  # seconds of WAL read back at the end of the window


def one(conn: psycopg.Connection[Any], query: str) -> Any:
    row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def own_wal_bytes(conn: psycopg.Connection[Any], start: str, end: str) -> float:
    """WAL bytes between two positions that belong to the current database: records that
    touch its pages, and the commit records of transactions that wrote them."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    dboid = one(conn, "SELECT oid FROM pg_database WHERE datname = current_database()")
    row = conn.execute(
        """WITH r AS (
               SELECT xid, resource_manager, record_length, block_ref
               FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)
           ), ours AS (
               SELECT DISTINCT xid FROM r WHERE block_ref LIKE %s AND xid::text <> '0'
           )
           SELECT coalesce(sum(record_length), 0) FROM r
           WHERE block_ref LIKE %s
              OR (resource_manager = 'Transaction' AND xid IN (SELECT xid FROM ours))""",
        (start, end, f"% rel %/{dboid}/%", f"% rel %/{dboid}/%"),
    ).fetchone()
    assert row is not None
    return float(row[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=10)
    parser.add_argument("--per-proc", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument(
        "--enqueue-rate",
        type=float,
        default=0.0,
        help="jobs queued per second (default 0: as fast as enqueue_many goes); a paced "
        "ramp-up keeps 2 cores from claiming a million calls at once",
    )
    parser.add_argument("--lease", type=float, default=LEASE, help="the hold tool's lease (15)")
    parser.add_argument("--heartbeat", type=float, default=HEARTBEAT, help="its heartbeat H (5)")
    parser.add_argument("--jitter", type=float, default=JITTER, help="its jitter reserve (4)")
    args = parser.parse_args()
    lease, heartbeat, jitter = args.lease, args.heartbeat, args.jitter
    total = args.procs * args.per_proc
    dsn = fresh_database(DB)
    migrate(dsn)
    tmp = Path(tempfile.mkdtemp(prefix="tenure-scale-"))
    env = {
        **os.environ,
        "TENURE_DSN": dsn,
        "PYTHONPATH": str(APPS),
        "BENCH_HOLD_LEASE": str(lease),
        "BENCH_HOLD_HEARTBEAT": str(heartbeat),
        "BENCH_HOLD_JITTER": str(jitter),
    }
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                str(APPS / "hold_worker.py"),
                "--stats",
                str(tmp / f"w{i}.json"),
                "--concurrency",
                str(args.per_proc),
                "--claim-batch",
                "1000",
                "--log-level",
                "WARNING",
            ],
            env=env,
            stderr=open(tmp / f"w{i}.log", "w"),
        )
        for i in range(args.procs)
    ]
    conn = psycopg.connect(dsn, autocommit=True)
    try:
        deadline = time.monotonic() + 60
        while not all((tmp / f"w{i}.json").exists() for i in range(args.procs)):
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                raise RuntimeError(f"workers did not start; logs in {tmp}")
            time.sleep(0.2)
        app = App(dsn)

        @app.tool("hold", lease=lease, heartbeat=heartbeat, jitter=jitter, time_limit=3600)
        async def hold(ctx, seconds: float) -> None:  # type: ignore[no-untyped-def]
            return None

        rate = args.enqueue_rate
        # One statement a second when paced: each enqueue wakes every worker to claim, and
        # 10,000 at once every 5 s made twenty claims race for each batch (a claim of 1,000
        # took 300 ms of a loaded server) where 2,000 a second did not.
        chunk = 10_000 if rate <= 0 else max(1, min(10_000, int(rate)))
        ramp_s = total / rate if rate > 0 else 0.0  # the first call must outlive the window
        hold_for = ramp_s + args.seconds + 4 * lease + 120
        t0 = time.monotonic()

        async def enqueue() -> float:
            started = time.perf_counter()
            for start in range(0, total, chunk):
                n = min(chunk, total - start)
                await app.enqueue_many("hold", [{"seconds": hold_for}] * n)
                if rate > 0:  # the next chunk when the rate says so
                    await asyncio.sleep(started + (start + n) / rate - time.perf_counter())
            elapsed = time.perf_counter() - started
            await app.aclose()
            return elapsed

        enqueue_s = asyncio.run(enqueue())
        while one(conn, "SELECT count(*) FROM tenure_jobs WHERE state = 'running'") < total:
            # 1,000 a second at least (1,000,000 leases: enqueued and claimed in minutes).
            if time.monotonic() - t0 > max(600, total / 1000, ramp_s + 300) or any(
                w.poll() is not None for w in workers
            ):
                raise RuntimeError(f"not all {total} running; logs in {tmp}")
            time.sleep(0.5)
        all_running_s = time.monotonic() - t0
        time.sleep(heartbeat + 0.5)  # one full period: the window sees steady state

        def stats() -> list[dict[str, Any]]:
            return [json.loads((tmp / f"w{i}.json").read_text()) for i in range(args.procs)]

        def backends() -> list[int]:
            return [
                r[0]
                for r in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s", (DB,)
                ).fetchall()
            ]

        def updates() -> tuple[int, int]:
            row = conn.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                "WHERE relname = 'tenure_jobs'"
            ).fetchone()
            assert row is not None
            return int(row[0]), int(row[1])

        conn.execute("SELECT pg_stat_force_next_flush()")
        s0, u0, wal0 = stats(), updates(), one(conn, "SELECT pg_current_wal_lsn()")
        pg0 = {p: proc_cpu(p) for p in backends()}
        w0 = sum(proc_cpu(w.pid) for w in workers)
        load0, t_w0 = os.getloadavg()[0], time.monotonic()
        # This database's own WAL is read back (pg_walinspect) over the window's last
        # WAL_SAMPLE seconds only: the server is shared, and a whole window of everyone's
        # WAL may be recycled by a checkpoint before it could be read.
        time.sleep(max(0.0, args.seconds - WAL_SAMPLE))
        sample0, sample_t0 = one(conn, "SELECT pg_current_wal_insert_lsn()"), time.monotonic()
        time.sleep(min(WAL_SAMPLE, args.seconds))
        sample1 = one(conn, "SELECT pg_current_wal_flush_lsn()")
        sample_s = time.monotonic() - sample_t0
        window = time.monotonic() - t_w0
        pg_cpu = sum(proc_cpu(p) - pg0.get(p, proc_cpu(p)) for p in set(backends()) | set(pg0))
        w_cpu = sum(proc_cpu(w.pid) for w in workers) - w0
        load1 = os.getloadavg()[0]
        time.sleep(1.2)  # the stats files are rewritten twice a second
        conn.execute("SELECT pg_stat_force_next_flush()")
        s1, u1 = stats(), updates()
        wal = one(conn, f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{wal0}')")
        try:
            own_wal = own_wal_bytes(conn, str(sample0), str(sample1)) * window / sample_s
        except psycopg.Error as exc:  # segments recycled by a checkpoint meanwhile
            print(f"this database's WAL could not be read back: {exc}", file=sys.stderr)
            own_wal = float("nan")
        lost_journal = one(conn, "SELECT count(*) FROM tenure_events WHERE kind = 'heartbeat_lost'")
        still = one(
            conn,
            "SELECT count(*) FROM tenure_jobs j LEFT JOIN tenure_sessions s ON s.owner = j.owner"
            " WHERE j.state = 'running'"
            " AND tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at) > clock_timestamp()",
        )
    finally:
        stop_processes(workers, timeout=120)
        conn.close()
        drop_database(DB)

    def beats(snap: dict[str, Any], name: str) -> int:
        return int(snap["statements"].get(name, 0))

    # A beat is a session beat (migration 0023) or a full extension; both count.
    per_h = [
        sum(beats(b, n) - beats(a, n) for n in ("extend_leases", "beat_session"))
        / (window / heartbeat)
        for a, b in zip(s0, s1, strict=True)
    ]
    session_beats = sum(
        beats(b, "beat_session") - beats(a, "beat_session") for a, b in zip(s0, s1, strict=True)
    )
    full_beats = sum(
        beats(b, "extend_leases") - beats(a, "extend_leases") for a, b in zip(s0, s1, strict=True)
    )
    rows = sum(b["rows_extended"] - a["rows_extended"] for a, b in zip(s0, s1, strict=True))
    lost_rows = sum(b["rows_lost"] - a["rows_lost"] for a, b in zip(s0, s1, strict=True))
    lost_counted = sum(b["counts"].get("lease_lost", 0) for b in s1)
    print(
        f"{total:,} leases held by {args.procs} worker processes ({args.per_proc:,} each), "
        f"lease {lease:g} s, H = {heartbeat:g} s, jitter {jitter:g} s; window {window:.0f} s; "
        f"load average {load0:.2f} -> {load1:.2f}"
    )
    print("| figure | value |")
    print("|---|---:|")
    print(
        f"| bulk enqueue of {total:,} (enqueue_many, {chunk:,} per call{', paced' if rate > 0 else ''}) | {total / enqueue_s:,.0f} jobs/s |"
    )
    print(f"| enqueue → all {total:,} running | {all_running_s:.1f} s |")
    print(f"| session beats / full extensions in the window | {session_beats:,} / {full_beats:,} |")
    print(
        f"| extend statements per process per H (min / median / max; target 1) | "
        f"{min(per_h):.2f} / {sorted(per_h)[len(per_h) // 2]:.2f} / {max(per_h):.2f} |"
    )
    print(f"| rows extended per second | {rows / window:,.0f} |")
    print(f"| row updates (HOT) in tenure_jobs | {u1[0] - u0[0]:,} ({u1[1] - u0[1]:,}) |")
    print(
        f"| WAL per second (whole server, other sessions included) | {float(wal) / window / 2**20:.2f} MB/s |"
    )
    print(
        f"| WAL per second of this database (pg_walinspect, the window's last 15 s) | {own_wal / window / 2**20:.3f} MB/s |"
    )
    print(f"| PostgreSQL backends' CPU | {100 * pg_cpu / window:.1f} % of a core |")
    lease_hours = total * window / 3600
    print(
        f"| WAL per held lease per hour (this database) | {own_wal / lease_hours / 1e3:,.2f} kB |"
    )
    print(f"| PostgreSQL CPU per held lease per hour | {1e3 * pg_cpu / lease_hours:,.3f} ms |")
    print(f"| worker processes' CPU (all {args.procs}) | {100 * w_cpu / window:.1f} % of a core |")
    print(
        f"| leases lost (journal heartbeat_lost / workers' counters / extends that matched "
        f"no row) | {lost_journal} / {lost_counted} / {lost_rows} |"
    )
    print(f"| still running with a valid lease at the end | {still:,} / {total:,} |")


if __name__ == "__main__":
    main()
