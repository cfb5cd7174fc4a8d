"""Tools that misbehave the way real tools do: they exit, raise unprintable errors, return
what cannot be stored, or finish right as their heartbeat goes out.

Worker processes load ``tests.apps.hostile_app:app`` (``TENURE_DSN``); a test builds its
producer with ``build_app(dsn)``. Leases are short (1.5 s renewed every 0.1 s), so that
commits and heartbeats cross often.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from typing import Any

from tenure import App, Context

LEASE = 1.5
HEARTBEAT = 0.1
JITTER = 0.5


class Unprintable(Exception):
    """An exception whose message cannot be turned into text at all."""

    def __str__(self) -> str:
        raise RuntimeError("this __str__ raises")


class Untranslatable(Exception):
    """An exception whose message PostgreSQL cannot store: a NUL and a lone surrogate."""

    def __str__(self) -> str:
        return "broken \x00 text \udcff here"


def build_app(dsn: str | None = None) -> App:
    app = App(dsn)
    tool = functools.partial(
        app.tool,
        lease=LEASE,
        heartbeat=HEARTBEAT,
        jitter=JITTER,
        missed_beats=2,
        backoff=0.05,
        max_backoff=0.1,
        max_attempts=2,
        time_limit=30,
    )

    @tool(max_attempts=1)
    async def exits(ctx: Context, code: int = 2) -> None:
        """Calls sys.exit in the middle of an async call."""
        sys.exit(code)

    @tool(max_attempts=1)
    async def interrupts(ctx: Context) -> None:
        raise KeyboardInterrupt

    @tool(max_attempts=1)
    def exits_in_thread(ctx: Context) -> None:
        sys.exit(3)

    @tool()
    async def raises(ctx: Context, kind: str) -> None:
        raise Unprintable() if kind == "unprintable" else Untranslatable()

    @tool()
    async def returns(ctx: Context, kind: str) -> Any:
        if kind == "huge_int":
            return 10**5000
        if kind == "nul":
            return {"text": "a\x00b"}
        if kind == "surrogate":
            return ["\udcff"]
        return {"ok": True}

    @tool()
    async def quick(ctx: Context, seconds: float) -> dict[str, int]:
        """Ends close to a heartbeat: its commit and the next extension cross."""
        await asyncio.sleep(seconds)
        return {"token": ctx.token}

    @tool()
    def stubborn(ctx: Context, seconds: float) -> str:
        """Ignores ctx.cancelled and returns long after it was told to stop."""
        time.sleep(seconds)
        return "late"

    return app


app = build_app()
