"""The tenure app of ``bench/runtime.py``: what the agent-facing runtime costs.

Tools: ``echo`` (a result to wait for), ``spin_async`` and ``spin_thread`` (calls to
cancel; each sends ``stopped KEY TIME`` by UDP the moment it is stopped),
``report_loop`` (a call that reports progress ``rate`` times a second) and
``wait_for_answer`` (a call that suspends at a waitpoint at once). Heartbeats are
every 30 s, so nothing measured here rides on a heartbeat.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time

from tenure import App, Context

app = App()
_PORT = int(os.environ.get("BENCH_UDP_PORT", "0") or 0)
_SOCK = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
POLICY = {"lease": 90, "heartbeat": 30, "jitter": 20, "time_limit": 3600, "max_attempts": 1}


def _send(what: str, key: str) -> None:
    if _PORT:
        _SOCK.sendto(f"{what} {key} {time.time():.6f}".encode(), ("127.0.0.1", _PORT))


@app.tool(**POLICY)
async def echo(ctx: Context, n: int) -> int:
    return n


@app.tool(**POLICY)
async def spin_async(ctx: Context, key: str) -> None:
    _send("started", key)
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        _send("stopped", key)
        raise


@app.tool(**POLICY)
def spin_thread(ctx: Context, key: str) -> None:
    _send("started", key)
    while not ctx.cancelled:
        time.sleep(0.005)  # how often a well-behaved threaded tool looks
    _send("stopped", key)


@app.tool(**POLICY)
async def report_loop(ctx: Context, seconds: float, rate: float) -> None:
    _send("started", str(ctx.job_id))
    end = time.monotonic() + seconds
    done = 0
    while time.monotonic() < end:
        if rate:
            done += 1
            ctx.report_progress(done, None, f"step {done}")
        await asyncio.sleep(1 / rate if rate else 0.5)


@app.tool(**POLICY)
async def wait_for_answer(ctx: Context) -> None:
    wp = ctx.waitpoint("answer", timeout=3600)
    if wp.pending:
        ctx.suspend(wp)
