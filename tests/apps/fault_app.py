"""Tools for fault-injection tests: short leases so that every fault shows within seconds.

Worker processes load ``tests.apps.fault_app:app``, which reads ``TENURE_DSN``;
a test builds its own producer with ``build_app(dsn)`` (same tools, its own DSN).

Every policy keeps the interval rule ``L > R·H + J``: a 1.5 s lease renewed every
0.3 s survives two missed beats and 0.5 s of jitter (1.5 > 2·0.3 + 0.5).

Tools that take a ``marker`` append one line per milestone to that file —
``started``, ``finished``, ``cancelled``, ``observed_cancel`` — followed by
``job token worker``, so a test can prove which owner ran (or stopped) what,
without trusting the worker's own report. A marker line is written with one
``write`` call on a file opened in append mode, so lines from several processes
never interleave.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from typing import Any

from tenure import App, Context, PermanentError, RetryableError

LEASE = 1.5
HEARTBEAT = 0.3
JITTER = 0.5
BACKOFF = 0.05
TIME_LIMIT = 30.0
LONG_LIMIT = 2.5  # above the lease: only heartbeats can carry a call this far
POLL = 0.02  # how often threaded tools look at ctx.cancelled


def note(path: str | None, what: str, ctx: Context) -> None:
    """Append ``what job token worker`` to ``path`` (no-op without a path)."""
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{what} {ctx.job_id} {ctx.token} {ctx.worker}\n")


def identity(ctx: Context) -> dict[str, Any]:
    return {"worker": ctx.worker, "token": ctx.token, "attempt": ctx.attempt}


def _duration(ctx: Context, seconds: float, only_on: str | None) -> float:
    """``seconds``, unless the call is meant to be slow only on worker ``only_on``."""
    return seconds if only_on is None or only_on == ctx.worker else 0.0


def build_app(dsn: str | None = None) -> App:
    """An App with every fault tool registered (``dsn`` None: ``TENURE_DSN``)."""
    app = App(dsn)
    tool = functools.partial(
        app.tool,
        lease=LEASE,
        heartbeat=HEARTBEAT,
        jitter=JITTER,
        missed_beats=2,
        backoff=BACKOFF,
        max_backoff=1.0,
        time_limit=TIME_LIMIT,
        max_attempts=3,
    )

    @tool()
    async def sleepy(
        ctx: Context, seconds: float, marker: str | None = None, only_on: str | None = None
    ) -> dict[str, Any]:
        """Awaits ``seconds``; cancellation is noted, the code after the sleep is not run."""
        note(marker, "started", ctx)
        try:
            await asyncio.sleep(_duration(ctx, seconds, only_on))
        except asyncio.CancelledError:
            note(marker, "cancelled", ctx)
            raise
        note(marker, "finished", ctx)
        return identity(ctx)

    @tool()
    def sleepy_thread(
        ctx: Context,
        seconds: float,
        marker: str | None = None,
        stop_message: str = "stopped because ctx.cancelled was set",
    ) -> dict[str, Any]:
        """Runs in a thread for ``seconds``, polling ctx.cancelled like a well-behaved tool;
        once told to stop it raises RetryableError(stop_message)."""
        note(marker, "started", ctx)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ctx.cancelled:
                note(marker, "observed_cancel", ctx)
                raise RetryableError(stop_message)
            time.sleep(POLL)
        note(marker, "finished", ctx)
        return identity(ctx)

    @tool()
    def stubborn(ctx: Context, seconds: float, marker: str | None = None) -> dict[str, Any]:
        """A badly behaved threaded tool: sleeps ``seconds`` and never looks at ctx.cancelled."""
        note(marker, "started", ctx)
        time.sleep(seconds)
        note(marker, "finished", ctx)
        return identity(ctx)

    @tool()
    async def block_loop(
        ctx: Context,
        seconds: float,
        marker: str | None = None,
        block_attempt: int = 1,
        other_seconds: float = 0.05,
    ) -> dict[str, Any]:
        """On attempt ``block_attempt``, blocks the event loop with time.sleep (a bad tool);
        other attempts await ``other_seconds`` politely."""
        note(marker, "started", ctx)
        if ctx.attempt == block_attempt:
            time.sleep(seconds)  # deliberately blocking: no await, no heartbeat from this loop
        else:
            await asyncio.sleep(other_seconds)
        note(marker, "finished", ctx)
        return identity(ctx)

    @tool()
    def record(
        ctx: Context, seconds: float, path: str, only_on: str | None = None
    ) -> dict[str, Any]:
        """Works for ``seconds`` in a thread, checks ownership, then appends
        ``job token worker`` to ``path``.

        The append is the irreversible step, guarded by ensure_owned() only: the
        work before it deliberately ignores ctx.cancelled (a thread cannot be
        killed), so a stale owner that reaches the append is stopped by nothing else.
        """
        time.sleep(_duration(ctx, seconds, only_on))
        ctx.ensure_owned()
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{ctx.job_id} {ctx.token} {ctx.worker}\n")
        return identity(ctx)

    @tool()
    def fail_n(ctx: Context, n: int, marker: str) -> dict[str, Any]:
        """Fails with a retryable error on the first ``n`` calls (counted in ``marker``)."""
        note(marker, "called", ctx)
        with open(marker, encoding="utf-8") as f:
            calls = sum(1 for _ in f)
        if calls <= n:
            raise RetryableError(f"transient failure {calls} of {n}")
        return {**identity(ctx), "calls": calls}

    @tool()
    def permanent(ctx: Context, marker: str | None = None) -> None:
        """Always refuses: retrying cannot help."""
        note(marker, "called", ctx)
        raise PermanentError("the receiver refused this request")

    @tool(time_limit=LONG_LIMIT, max_attempts=1)
    async def long_limit(ctx: Context, marker: str, seconds: float = 60.0) -> dict[str, Any]:
        """Sleeps far past its time limit; the code after the sleep must never run."""
        note(marker, "started", ctx)
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            note(marker, "cancelled", ctx)
            raise
        note(marker, "finished", ctx)
        return identity(ctx)

    @tool(time_limit=LONG_LIMIT, max_attempts=1)
    def long_limit_thread(ctx: Context, marker: str, seconds: float = 60.0) -> dict[str, Any]:
        """The threaded twin of long_limit: stops once ctx.cancelled says so."""
        note(marker, "started", ctx)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ctx.cancelled:
                note(marker, "observed_cancel", ctx)
                raise RetryableError("stopped because ctx.cancelled was set")
            time.sleep(POLL)
        note(marker, "finished", ctx)
        return identity(ctx)

    @tool()
    async def gated(ctx: Context, gate: str, marker: str | None = None) -> dict[str, Any]:
        """Waits until the file ``gate`` exists, then returns: the call ends when the test
        says so, however loaded the machine is."""
        note(marker, "started", ctx)
        while not os.path.exists(gate):
            await asyncio.sleep(POLL)
        note(marker, "finished", ctx)
        return identity(ctx)

    return app


app = build_app()
