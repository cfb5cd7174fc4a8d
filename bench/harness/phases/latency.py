# ruff: noqa: E501, RUF001  (the report writes long Markdown table rows with math signs)
"""Wake-up latency: enqueue → tool start on an idle queue, every system, one job at a time.

The tool sends its start time back over UDP (bench/apps); the harness takes its own just
before the enqueue call. A commit floor, measured before and after, shows what two commits
cost on this server. A second pass with ``synchronous_commit=off`` on the bench's own
sessions shows the queue machinery without the WAL flush.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from ..config import SYSTEMS, Config
from ..core import Harness
from ..phase import Evaluation, Phase, Results
from ..procs import Procs
from ..system import loadavg, log, pct
from ..systems import worker_cmd

Enqueue = Callable[[str], Awaitable[None]]
Close = Callable[[], Awaitable[Any]]


async def single_enqueuer(cfg: Config, system: str, pg_options: str) -> tuple[Enqueue, Close]:
    """The system's own one-job enqueue (its ``ping`` tool, keyed k) and how to close it."""
    if system == "tenure":
        from tenure_app import app

        async def enqueue_tenure(k: str) -> None:
            await app.enqueue("ping", {"k": k}, idempotency_key=k)

        return enqueue_tenure, app.aclose
    if system == "pgqueuer":
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        settings = {"synchronous_commit": "off"} if "synchronous_commit=off" in pg_options else {}
        pconn = await asyncpg.connect(cfg.dsn_url, server_settings=settings)
        queries = Queries(AsyncpgDriver(pconn))

        async def enqueue_pgq(k: str) -> None:
            await queries.enqueue("ping", k.encode())

        return enqueue_pgq, pconn.close
    if system == "procrastinate":
        from procr_app import app as papp

        await papp.open_async()
        ping = papp.tasks["ping"]

        async def enqueue_procr(k: str) -> None:
            await ping.defer_async(k=k)

        return enqueue_procr, papp.close_async
    rconn = await psycopg.AsyncConnection.connect(cfg.dsn, autocommit=True)

    async def enqueue_raw(k: str) -> None:
        async with rconn.transaction():
            await rconn.execute(
                "INSERT INTO raw_jobs (tool, idempotency_key, payload, payload_hash, "
                "max_attempts) VALUES ('ping', %s, jsonb_build_object('k', %s::text), "
                "'x', 5)",
                (k, k),
            )
            await rconn.execute("NOTIFY raw_jobs")

    return enqueue_raw, rconn.close


async def measure(
    h: Harness, system: str, n: int, sock: socket.socket, pg_options: str
) -> dict[str, Any]:
    """n jobs, one at a time after an idle gap of 10 to 30 ms, each awaited until its tool starts."""
    loop = asyncio.get_running_loop()
    arrivals: dict[str, tuple[float, int]] = {}
    waiters: dict[str, asyncio.Future[None]] = {}

    class Proto(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: Any) -> None:
            key, t, pid = data.decode().split()
            arrivals[key] = (float(t), int(pid))
            fut = waiters.get(key)
            if fut is not None and not fut.done():
                fut.set_result(None)

    transport, _ = await loop.create_datagram_endpoint(Proto, sock=sock)
    enqueue_one, close = await single_enqueuer(h.cfg, system, pg_options)
    lat, enq, after, missed = [], [], [], 0
    try:
        # A few unrecorded warm-up jobs: connections, prepared statements, caches.
        for i in range(-5, n):
            k = f"lat-{system}-{h.seq}-{i}"
            await asyncio.sleep(random.uniform(0.01, 0.03))  # the queue is idle
            fut = loop.create_future()
            waiters[k] = fut
            t0 = time.time()
            await enqueue_one(k)
            t1 = time.time()
            try:
                await asyncio.wait_for(fut, 10.0)
            except TimeoutError:
                missed += 1
                continue
            if i >= 0:
                lat.append((arrivals[k][0] - t0) * 1000)
                enq.append((t1 - t0) * 1000)
                after.append((arrivals[k][0] - t1) * 1000)
    finally:
        await close()
        transport.close()
    return {
        "system": system,
        "jobs": len(lat),
        "missed": missed,
        "p50_ms": round(pct(lat, 50), 2),
        "p95_ms": round(pct(lat, 95), 2),
        "p99_ms": round(pct(lat, 99), 2),
        "max_ms": round(max(lat), 2) if lat else None,
        "enqueue_call_p50_ms": round(pct(enq, 50), 2),
        "start_after_enqueue_returned_p50_ms": round(pct(after, 50), 2),
    }


def commit_floor(cfg: Config, pg_options: str, n: int = 100) -> dict[str, float]:
    """One-row INSERT commit on this server, after the same idle gaps as the jobs get.

    It includes what every hop of a wake-up pays on this machine: the WAL flush (when
    durable) and the scheduler's delay in waking an idle process on shared cores.
    """
    with psycopg.connect(cfg.dsn, autocommit=True, options=pg_options or None) as c:
        c.execute("CREATE TABLE IF NOT EXISTS bench_commit_probe (x int)")
        times = []
        for _ in range(n):
            time.sleep(random.uniform(0.01, 0.03))
            t = time.perf_counter()
            c.execute("INSERT INTO bench_commit_probe VALUES (1)")
            times.append((time.perf_counter() - t) * 1000)
        c.execute("TRUNCATE bench_commit_probe")
    return {"p50_ms": round(pct(times, 50), 3), "p95_ms": round(pct(times, 95), 3)}


def run_system(h: Harness, name: str, options: str, system: str) -> dict[str, Any]:
    """One system's worker, with a small claim batch, measured from this process."""
    h.reset(system)
    h.seq += 1
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    env = {**h.env, "BENCH_UDP_PORT": str(sock.getsockname()[1])}
    if options:
        env["PGOPTIONS"] = options
        env["BENCH_PG_OPTIONS"] = options
    variant: dict[str, Any] = {"batch": 10} if system == "pgqueuer" else {}
    if system == "tenure":
        variant = {"concurrency": 10, "claim_batch": 10}
    log(f"latency ({name}): {system}")
    cmd = [worker_cmd(h.cfg, system, variant)]
    with Procs(h.cfg, f"lat-{name}-{system}", cmd, env) as ws:
        ws.wait_ready(h.pg_port)
        load0 = loadavg()
        n = h.cfg.latency_jobs if not options else max(50, h.cfg.latency_jobs // 3)
        r = asyncio.run(measure(h, system, n, sock, options))
        r["load"] = [load0[0], loadavg()[0]]
    log(f"  → p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms, p99 {r['p99_ms']} ms")
    return r


def run(h: Harness) -> None:
    variants = [("durable", "")]
    if h.cfg.latency_nofsync:
        variants.append(("no-fsync", "-c synchronous_commit=off"))
    result: dict[str, Any] = {}
    for name, options in variants:
        floor0 = commit_floor(h.cfg, options)
        out = []
        saved = os.environ.get("PGOPTIONS")
        if options:
            os.environ["PGOPTIONS"] = options
        try:
            for system in [x for x in SYSTEMS if x in h.cfg.systems]:
                out.append(run_system(h, name, options, system))
        finally:
            if saved is None:
                os.environ.pop("PGOPTIONS", None)
            else:
                os.environ["PGOPTIONS"] = saved
        floor1 = commit_floor(h.cfg, options)
        result[name] = {
            "pg_options": options or "(server defaults: synchronous_commit=on)",
            "commit_floor_before": floor0,
            "commit_floor_after": floor1,
            "systems": out,
        }
    h.results["latency"] = result


def section(cfg: Config, res: Results) -> list[str]:
    lat = res.get("latency")
    if not lat:
        return []
    lines = [
        f"## 2. Wake-up latency: enqueue → tool start, idle queue ({cfg.latency_jobs} jobs; "
        f"no-fsync variant {max(50, cfg.latency_jobs // 3)})",
        "",
        "Enqueuer (this harness) and worker are separate processes; both sides take "
        "`time.time()` on the same machine (enqueuer just before the enqueue call, tool as its "
        "first action, sent back over UDP). 10–30 ms idle gap between jobs. Every system "
        "needs two commits before a tool starts (the enqueue, then the claim), so the "
        "*commit floor* (one-row INSERT commit on this server, same session settings) is "
        "shown: with durable commits, two of them bound the latency from below. The "
        "*no-fsync* variant sets `synchronous_commit=off` on the bench's own sessions "
        "(enqueuer and workers) to show the queue machinery alone; it is not a safe setting "
        "for claims (a crash could hand out a fencing token twice).",
        "",
    ]
    for name, v in lat.items():
        lines += [
            f"**{name}** ({v['pg_options']}); commit floor p50 {v['commit_floor_before']['p50_ms']}"
            f" ms before, {v['commit_floor_after']['p50_ms']} ms after "
            f"(p95 {v['commit_floor_before']['p95_ms']} / {v['commit_floor_after']['p95_ms']} ms)",
            "",
            "| system | p50 ms | p95 ms | p99 ms | max ms | enqueue call p50 ms | start − enqueue returned p50 ms | missed | load 1m |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in v["systems"]:
            lines.append(
                f"| {r['system']} | {r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | {r['max_ms']} "
                f"| {r['enqueue_call_p50_ms']} | {r['start_after_enqueue_returned_p50_ms']} "
                f"| {r['missed']} | {r['load'][0]}→{r['load'][1]} |"
            )
        lines.append("")
    return lines


def evaluate(cfg: Config, res: Results, ev: Evaluation) -> None:
    for name, v in (res.get("latency") or {}).items():
        t = next((r for r in v["systems"] if r["system"] == "tenure"), None)
        floor = v["commit_floor_before"]["p50_ms"]
        if t:
            ev.target(
                f"wake-up p50 ≤ 3 ms ({name})",
                f"{t['p50_ms']} ms (commit floor {floor} ms)",
                t["p50_ms"] <= 3,
            )
            ev.target(f"wake-up p95 ≤ 10 ms ({name})", f"{t['p95_ms']} ms", t["p95_ms"] <= 10)


PHASE = Phase("latency", run, section, evaluate)
