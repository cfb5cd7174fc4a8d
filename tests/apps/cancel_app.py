"""Tools whose side effects a test can count (and one that chatters progress), under a
lease renewed only every 40 s.

Worker processes load ``tests.apps.cancel_app:app`` (reading ``TENURE_DSN``); a test
builds its producer with ``build_app(dsn)``. With HEARTBEAT = 40 s, nothing but a
cancel's notification, or the worker reading its calls again when its LISTEN connection
is back, can stop a call within the first half minute of its claim: the heartbeat's
zero rows, the backstop, comes only at the next beat.

Each tool makes one *side effect* every ``every`` seconds until it is stopped: it calls
``ctx.ensure_owned()``, then appends ``job token monotonic`` to the file ``path`` (one
``write`` on a file opened in append mode, and CLOCK_MONOTONIC is the same clock in every
process of the machine), so a test can count the effects that landed after any moment.
"""

from __future__ import annotations

import asyncio
import functools
import time

from tenure import App, Context

LEASE = 120.0
HEARTBEAT = 40.0  # 120 > 2·40 + 1: the interval rule holds
EVERY = 0.01


def effect(ctx: Context, path: str) -> None:
    """One irreversible step: checked first, like every step a tool takes."""
    ctx.ensure_owned()
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{ctx.job_id} {ctx.token} {time.monotonic()}\n")


def effects_after(path: str, job_id: int, moment: float) -> list[float]:
    """When each effect of ``job_id`` recorded in ``path`` after ``moment`` landed."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.split() for line in f]
    except FileNotFoundError:
        return []
    return [float(at) for job, _, at in lines if int(job) == job_id and float(at) > moment]


def build_app(dsn: str | None = None) -> App:
    app = App(dsn)
    tool = functools.partial(
        app.tool, lease=LEASE, heartbeat=HEARTBEAT, jitter=1.0, missed_beats=2, time_limit=600
    )

    @tool()
    def effects(ctx: Context, path: str, every: float = EVERY) -> None:
        """A plain function (a thread): effects until ``ensure_owned()`` refuses."""
        while True:
            effect(ctx, path)
            time.sleep(every)

    @tool()
    async def effects_async(ctx: Context, path: str, every: float = EVERY) -> None:
        """The async twin: stopped by CancelledError, or by ``ensure_owned()``."""
        while True:
            effect(ctx, path)
            await asyncio.sleep(every)

    @tool()
    def stubborn_effects(ctx: Context, path: str, seconds: float, every: float = EVERY) -> None:
        """A badly behaved thread: after its first effect it ignores the cancel (no checks,
        no ctx.cancelled) and writes unchecked for ``seconds``, then returns."""
        effect(ctx, path)
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            time.sleep(every)
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{ctx.job_id} {ctx.token} {time.monotonic()}\n")

    @tool()
    async def chatty(ctx: Context, seconds: float, every: float = 0.05) -> int:
        """Reports its progress every ``every`` seconds for ``seconds``; returns the steps."""
        steps = 0
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            steps += 1
            ctx.report_progress(steps)
            await asyncio.sleep(every)
        return steps

    return app


app = build_app()
