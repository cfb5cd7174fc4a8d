#!/usr/bin/env python
"""One enqueue call, tenure against pgqueuer and raw SQL, interleaved call by call.

    bench/.venv/bin/python bench/enqueue_calls.py [--calls 1000] [--gap-ms 5]

The wake-up phase of bench/run.py runs its systems one after another, so a change in the
machine's other load (or in the disk's fsync time) between them shows up as a difference
between systems. Here every round makes one call of each system, in a rotating order,
after the same idle gap, so drift falls on all of them alike. Durable commits (the
server's defaults). What is timed is the caller's await: tenure `App.enqueue` (a keyed
job of a tool with one string parameter), pgqueuer `Queries.enqueue` on asyncpg, raw SQL
an INSERT and a NOTIFY in one transaction on psycopg (as bench/run.py's latency phase).
No worker runs: each system's queue grows by one job per round.

PostgreSQL: $BENCH_ADMIN_DSN (default host=127.0.0.1 port=5432 user=postgres
dbname=postgres); the database is tenure_enqueue_calls, dropped at the end. Prints
figures; asserts nothing about them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import psycopg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.queries import Queries
from scratch import drop_database, fresh_database

from tenure import App
from tenure._store import migrate

DB = "tenure_enqueue_calls"
BIN = Path(sys.executable).parent


def url_of(dsn: str) -> str:
    """The same database as a postgresql:// URL (pgqueuer's command and asyncpg take one)."""
    p = psycopg.conninfo.conninfo_to_dict(dsn)
    return "postgresql://{}@{}:{}/{}".format(
        p.get("user", "postgres"), p.get("host", "127.0.0.1"), p.get("port", 5432), p["dbname"]
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(calls: int, gap: float) -> None:
    dsn = fresh_database(DB)
    url = url_of(dsn)
    migrate(dsn)
    subprocess.run([str(BIN / "pgq"), "--pg-dsn", url, "install"], check=True, capture_output=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE raw_jobs (LIKE tenure_jobs INCLUDING ALL)")

    app = App(dsn)

    @app.tool("ping", lease=30, heartbeat=10, jitter=5)
    async def ping(ctx, k: str) -> None:  # type: ignore[no-untyped-def]
        return None

    pconn = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(pconn))
    rconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)

    async def tenure_call(k: str) -> None:
        await app.enqueue("ping", {"k": k}, idempotency_key=k)

    async def pgq_call(k: str) -> None:
        await queries.enqueue("ping", k.encode())

    async def raw_call(k: str) -> None:
        async with rconn.transaction():
            await rconn.execute(
                "INSERT INTO raw_jobs (tool, idempotency_key, payload, payload_hash, "
                "max_attempts) VALUES ('ping', %s, jsonb_build_object('k', %s::text), 'x', 5)",
                (k, k),
            )
            await rconn.execute("NOTIFY raw_jobs")

    systems: list[tuple[str, Callable[[str], Awaitable[None]]]] = [
        ("tenure", tenure_call),
        ("pgqueuer", pgq_call),
        ("raw", raw_call),
    ]
    for name, call in systems:  # connections made, statements prepared
        for w in range(20):
            await call(f"warm-{name}-{w}")
    times: dict[str, list[float]] = {name: [] for name, _ in systems}
    load0 = os.getloadavg()[0]
    for i in range(calls):
        shift = i % len(systems)
        for name, call in systems[shift:] + systems[:shift]:
            await asyncio.sleep(gap)
            t0 = time.perf_counter()
            await call(f"{name}-{i}")
            times[name].append(time.perf_counter() - t0)
    load1 = os.getloadavg()[0]
    await app.aclose()
    await pconn.close()
    await rconn.close()
    drop_database(DB)
    print(f"{calls:,} calls per system, interleaved, {gap * 1000:.0f} ms idle gap, durable")
    print(f"load average {load0:.2f} -> {load1:.2f}")
    print("| system | enqueue call p50 ms | p95 ms | p99 ms |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        ms = [1000 * v for v in values]
        print(f"| {name} | {pct(ms, 0.5):.3f} | {pct(ms, 0.95):.3f} | {pct(ms, 0.99):.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    args = parser.parse_args()
    asyncio.run(run(args.calls, args.gap_ms / 1000))


if __name__ == "__main__":
    main()
