"""Typed tools the way an agent developer writes them: pydantic models in and out, progress
reported from inside, calls that run long enough to be cancelled.

Worker processes load ``tests.apps.agent_app:app`` (``TENURE_DSN``); a test builds its
producer with ``build_app(dsn)``. Heartbeats are every 30 s (lease 90 s), so anything a
test sees happen within a few seconds did not wait for a heartbeat.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Literal

from pydantic import BaseModel

from tenure import App, Context

POLL = 0.01  # how often threaded tools look at ctx.cancelled


class Report(BaseModel):
    title: str
    pages: int
    tags: list[str] = []


@dataclasses.dataclass
class Page:
    number: int
    words: int


def note(path: str | None, what: str) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{what} {time.monotonic():.6f}\n")


def build_app(dsn: str | None = None, *, poll_interval: float = 1.0) -> App:
    app = App(dsn, poll_interval=poll_interval)

    @app.tool(lease=90, heartbeat=30, jitter=20, time_limit=600)
    async def build_report(
        ctx: Context, title: str, pages: int, style: Literal["short", "long"] = "short"
    ) -> Report:
        """Build a report of ``pages`` pages."""
        return Report(title=title, pages=pages, tags=[style])

    @app.tool(lease=90, heartbeat=30, jitter=20, time_limit=600)
    async def count_words(ctx: Context, report: Report, first: Page) -> dict[str, int]:
        """Count words, given typed arguments that arrive as objects."""
        assert isinstance(report, Report) and isinstance(first, Page)
        return {"pages": report.pages, "first": first.words}

    @app.tool(lease=90, heartbeat=30, jitter=20, time_limit=600, max_attempts=1)
    async def long_async(ctx: Context, seconds: float, marker: str) -> str:
        note(marker, "started")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            note(marker, "stopped")
            raise
        note(marker, "finished")
        return "done"

    @app.tool(lease=90, heartbeat=30, jitter=20, time_limit=600, max_attempts=1)
    def long_thread(ctx: Context, seconds: float, marker: str) -> str:
        note(marker, "started")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ctx.cancelled:
                note(marker, "stopped")
                return "stopped"
            time.sleep(POLL)
        note(marker, "finished")
        return "done"

    @app.tool(lease=90, heartbeat=30, jitter=20, time_limit=600)
    async def steps(ctx: Context, total: int, pause: float) -> int:
        """Reports progress in a tight loop; only the latest report matters."""
        for done in range(1, total + 1):
            ctx.report_progress(done, total, f"step {done} of {total}")
            await asyncio.sleep(pause)
        return total

    @app.tool(lease=90, heartbeat=30, jitter=20, time_limit=600, max_attempts=2)
    async def refuse(ctx: Context) -> None:
        from tenure import PermanentError

        raise PermanentError("the receiver refused this request")

    return app


app = build_app()
