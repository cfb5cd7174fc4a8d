"""The tenure app the bench runs with ``tenure worker tenure_app:app``.

Tools: ``noop`` (throughput), ``ping`` (wake-up latency), ``hold`` (long calls
for the heartbeat and RSS phases), ``slow`` (the recovery phase). Lease
parameters of ``hold`` and ``slow`` come from the environment so the harness
can size them; every combination still passes tenure's L > R·H + J check.
"""

from __future__ import annotations

import asyncio
import os

from _probe import started

from tenure import App

app = App()


def _f(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


@app.tool("noop", lease=30, heartbeat=10, jitter=5)
async def noop(ctx) -> None:  # type: ignore[no-untyped-def]
    return None


@app.tool("ping", lease=30, heartbeat=10, jitter=5)
async def ping(ctx, k: str) -> None:  # type: ignore[no-untyped-def]
    started(k)


@app.tool(
    "hold",
    lease=_f("BENCH_HOLD_LEASE", 15),
    heartbeat=_f("BENCH_HOLD_HEARTBEAT", 5),
    jitter=_f("BENCH_HOLD_JITTER", 4),
    time_limit=_f("BENCH_HOLD_TIME_LIMIT", 3600),
)
async def hold(ctx, seconds: float) -> None:  # type: ignore[no-untyped-def]
    await asyncio.sleep(seconds)


@app.tool(
    "slow",
    lease=_f("BENCH_SLOW_LEASE", 6),
    heartbeat=_f("BENCH_SLOW_HEARTBEAT", 1.5),
    jitter=_f("BENCH_SLOW_JITTER", 2),
    time_limit=3600,
)
async def slow(ctx, k: str, seconds: float) -> None:  # type: ignore[no-untyped-def]
    started(f"{k}:{ctx.attempt}")
    await asyncio.sleep(seconds)
