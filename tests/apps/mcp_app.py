"""Tools the MCP adapter's tests call through an MCP client.

Worker processes and ``tenure mcp`` subprocesses load ``tests.apps.mcp_app:app``
(``TENURE_DSN``); in-process tests build their own with ``build_app(dsn)``.
Leases are short (1.5 s, heartbeat 0.3 s: L > 2·0.3 + 0.5) so that a SIGKILLed
worker's call is taken over within seconds.

``open_case`` opens a case at the example case service (its URL in
``MCP_APP_RECEIVER``), fenced with the job's token and key. With ``hold``, the
first attempt stops right after the case was opened and waits forever: the
test kills its worker there, mid-call, after the side effect and before the
commit, the worst moment for exactly-once.

``approve`` waits at a waitpoint for a person: it hands the token out by
writing it to ``marker`` and suspends; called again with the answer, it
returns it. ``confirm`` asks its caller instead (``answered_by="caller"``), for
a typed answer (`Size`): over MCP its client is asked, with a form.

``MCP_APP_QUOTA`` (an integer) gives every MCP caller's tenant that quota of
queued jobs (``app.quota("mcp:*", N)``).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Literal, NotRequired

import httpx
from typing_extensions import TypedDict

from tenure import App, Context
from tenure.fence import raise_for_fence


class Lease(TypedDict):
    lease: float
    heartbeat: float
    jitter: float
    time_limit: float


LEASE: Lease = {"lease": 1.5, "heartbeat": 0.3, "jitter": 0.5, "time_limit": 60.0}


def note(path: str, what: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{what}\n")


class Size(TypedDict):
    """What ``confirm`` asks its caller."""

    approved: bool
    size: Literal["S", "M", "L"]
    note: NotRequired[str]


def build_app(dsn: str | None = None, quota: int | None = None) -> App:
    app = App(dsn)
    if quota is None and os.environ.get("MCP_APP_QUOTA"):
        quota = int(os.environ["MCP_APP_QUOTA"])
    if quota is not None:
        app.quota("mcp:*", quota)

    @app.tool(**LEASE, max_attempts=5, backoff=0.05)
    async def open_case(
        ctx: Context, title: str, hold: bool = False, gate: str = ""
    ) -> dict[str, int]:
        """Open a case at the example case service, exactly once.

        Args:
            title: The case's title.
            hold: Stop the first attempt right after the case was opened, for good.
            gate: A file to wait for before opening it (none: open it at once).
        """
        while gate and not Path(gate).exists():
            await asyncio.sleep(0.05)  # the test opens the gate when it is ready
        async with httpx.AsyncClient(base_url=os.environ["MCP_APP_RECEIVER"], timeout=10) as c:
            response = await c.post(
                "/cases", json={"title": title}, auth=ctx.http_auth("open_case")
            )
        raise_for_fence(response)
        response.raise_for_status()
        ctx.report_progress(1, 2, "case opened")
        if hold and ctx.attempt == 1:
            await asyncio.Event().wait()  # the test SIGKILLs this worker here
        return {"case_id": response.json()["case_id"], "attempt": ctx.attempt}

    @app.tool(**LEASE, max_attempts=1)
    async def wait_for_cancel(ctx: Context, marker: str, third: bool = False) -> str:
        """Run until cancelled, noting in ``marker`` when it started and stopped (``third``:
        having reported a third done)."""
        if third:
            ctx.report_progress(1, 3, "one third")
        note(marker, "started")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            note(marker, "stopped")
            raise
        return "never"

    @app.tool(**LEASE, max_attempts=1)
    async def count(ctx: Context, steps: int, pause: float = 0.3) -> int:
        """Count to ``steps``, reporting each step."""
        for step in range(1, steps + 1):
            await asyncio.sleep(pause)
            ctx.report_progress(step, steps, f"step {step}")
        await asyncio.sleep(pause)  # so the last report is written before the commit
        return steps

    @app.tool(**LEASE, max_attempts=1)
    def echo(ctx: Context, text: str, seconds: float = 0.0) -> str:
        """Return ``text`` after ``seconds``."""
        time.sleep(seconds)
        return text

    @app.tool(**LEASE, max_attempts=2, backoff=0.05)
    async def refuse(ctx: Context, reason: str, permanent: bool = True) -> str:
        """Fail on purpose: permanently (with its reason) or with an unclassified error."""
        from tenure import PermanentError

        if permanent:
            raise PermanentError(reason)
        raise RuntimeError(f"internal detail {reason}")

    @app.tool(**LEASE, max_attempts=1)
    async def approve(ctx: Context, amount: int, marker: str) -> str:
        """Ask a person to approve paying ``amount``; return their answer."""
        wp = ctx.waitpoint("approval", timeout=600)
        if wp.pending:
            note(marker, wp.token)  # handed to whoever decides
            ctx.suspend(wp, request={"amount": amount})
        return f"{amount}: {wp.answer}"

    @app.tool(**LEASE, max_attempts=1)
    async def confirm(ctx: Context, item: str) -> dict[str, object]:
        """Ask the caller to confirm ``item`` and its size; return its typed answer."""
        wp = ctx.waitpoint("size", timeout=600, answered_by="caller", answer=Size)
        if wp.pending:
            ctx.suspend(wp, request={"item": item})
        return {"item": item, **wp.answer}

    return app


app = build_app()
