"""Tools for the observability tests: labelled, short leases, and payloads that come back.

Worker processes load ``tests.integration.observe.observe_app:app`` (``TENURE_DSN``); a test
builds its producer with ``build_app(dsn, journal_key=...)``. Most tools put
their payload's text into their result or their error message, so a canary in
the payload proves that neither ever reaches the journal, a log line, /metrics,
the CLI or the dashboard.

Policies keep the interval rule: 1.5 > 2·0.3 + 0.5 for the fast tools, and
3 > 2·1 + 0.5 for ``watched`` (the browser watches its lease bar shrink for a
whole second between heartbeats).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from tenure import App, Context, PermanentError, RetryableError

LEASE = 1.5
HEARTBEAT = 0.3
JITTER = 0.5
LABELS = {"model": "gpt-test", "provider": "acme"}

T = TypeVar("T", bound=Callable[..., Any])


def build_app(dsn: str | None = None, *, journal_key: str | None = None) -> App:
    app = App(dsn, journal_key=journal_key)

    def tool(**overrides: Any) -> Callable[[T], T]:
        policy: dict[str, Any] = {
            "lease": LEASE,
            "heartbeat": HEARTBEAT,
            "jitter": JITTER,
            "missed_beats": 2,
            "backoff": 0.05,
            "max_backoff": 0.2,
            "time_limit": 30.0,
            "max_attempts": 3,
            "labels": LABELS,
        }
        return app.tool(**{**policy, **overrides})

    @tool()
    async def echo(ctx: Context, text: str) -> dict[str, Any]:
        """Succeeds at once; the result repeats the payload."""
        return {"echo": text, "token": ctx.token}

    @tool()
    def refuse(ctx: Context, text: str) -> None:
        """Fails for good; the error message repeats the payload."""
        raise PermanentError(f"refused: {text}")

    @tool()
    def flaky(ctx: Context, text: str) -> dict[str, Any]:
        """Fails its first attempt (message with the payload), then succeeds."""
        if ctx.attempt == 1:
            raise RetryableError(f"transient: {text}")
        return {"echo": text}

    @tool(labels={"model": "slow-model", "provider": "acme"})
    async def slow(
        ctx: Context, seconds: float, text: str = "", only_on: str | None = None
    ) -> dict[str, Any]:
        """Sleeps (only on worker ``only_on``, if given) and returns; no ownership check,
        so after a pause past its lease only the fenced commit stands in its way."""
        if only_on is None or only_on == ctx.worker:
            await asyncio.sleep(seconds)
        return {"echo": text, "worker": ctx.worker}

    @tool()
    async def block_loop(ctx: Context, seconds: float, text: str = "") -> dict[str, Any]:
        """On attempt 1 blocks the event loop (a bad tool): its late result is rejected."""
        if ctx.attempt == 1:
            time.sleep(seconds)
        return {"echo": text, "worker": ctx.worker}

    @tool()
    async def send(ctx: Context, url: str, text: str) -> dict[str, Any]:
        """One fenced side effect: POST the text to a receiver."""
        async with httpx.AsyncClient() as client:
            response = await client.post(url, json={"text": text}, auth=ctx.http_auth("notify"))
        return {"status": response.status_code}

    @tool(lease=3.0, heartbeat=1.0, jitter=0.5, labels={"model": "watch", "provider": "acme"})
    async def watched(ctx: Context, seconds: float, text: str = "") -> dict[str, Any]:
        """A long call for the browser to watch."""
        await asyncio.sleep(seconds)
        return {"echo": text}

    @tool(lease=3.0, heartbeat=1.0, jitter=0.5)
    async def stepped(ctx: Context, total: int, pause: float) -> int:
        """Reports its progress step by step (the browser watches the job page follow)."""
        for done in range(1, total + 1):
            ctx.report_progress(done, total, f"step {done}")
            await asyncio.sleep(pause)
        return total

    return app


app = build_app()
