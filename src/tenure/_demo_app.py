"""The tools `tenure demo` runs: simulated calls that take seconds.

Short leases (2 s, renewed every 0.5 s) so that faults show within seconds.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from typing import Any

from ._app import App
from ._context import Context
from ._errors import RetryableError

app = App()

demo_tool = functools.partial(
    app.tool,
    lease=2.0,
    heartbeat=0.5,
    jitter=0.5,
    missed_beats=2,
    time_limit=20.0,
    max_attempts=5,
    backoff=0.2,
)


@demo_tool("fetch_statement")
async def fetch_statement(ctx: Context, invoice_id: str, seconds: float) -> dict[str, Any]:
    """An external API call that takes a while (async)."""
    await asyncio.sleep(seconds)
    ctx.ensure_owned()  # the last check before publishing anything
    return {"invoice_id": invoice_id, "lines": random.randint(1, 40)}  # noqa: S311


@demo_tool("render_report")
def render_report(ctx: Context, report_id: str, seconds: float) -> dict[str, Any]:
    """CPU-ish work in a thread: polls ctx.cancelled so a lost lease stops it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.cancelled:
            raise RetryableError("stopped before the report was complete")
        time.sleep(0.05)
    ctx.ensure_owned()
    return {"report_id": report_id, "pages": 3}
