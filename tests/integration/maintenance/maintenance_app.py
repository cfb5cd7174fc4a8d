"""The app that worker processes of the maintenance tests load (``TENURE_DSN`` from the test).

``TENURE_TEST_MARKS`` names a file each call appends ``name job token worker`` to (one
``write`` in append mode, so lines from several processes never interleave);
``TENURE_TEST_SCHEDULES`` lists the schedules to declare (none by default). Policies keep
the interval rule: 1.5 > 2·0.3 + 0.5.
"""

from __future__ import annotations

import asyncio
import os
from typing import TypedDict

from tenure import App, Context

MARKS = os.environ.get("TENURE_TEST_MARKS", os.devnull)
SCHEDULES = set(filter(None, os.environ.get("TENURE_TEST_SCHEDULES", "").split(",")))


class Policy(TypedDict):
    lease: float
    heartbeat: float
    jitter: float
    max_attempts: int
    backoff: float


POLICY: Policy = {"lease": 1.5, "heartbeat": 0.3, "jitter": 0.5, "max_attempts": 3, "backoff": 0.05}


def note(marks: str, what: str, ctx: Context) -> None:
    with open(marks, "a", encoding="utf-8") as f:
        f.write(f"{what} {ctx.job_id} {ctx.token} {ctx.worker}\n")


def build_app(dsn: str | None = None) -> App:
    app = App(dsn)
    app.limit("user:*", 2)

    @app.tool(**POLICY)
    async def tick(ctx: Context, marks: str = os.devnull) -> None:
        """A periodic call: notes that it ran."""
        note(marks, "tick", ctx)

    @app.tool(
        concurrency_key=lambda p: None if p.get("user") is None else f"user:{p['user']}",
        **POLICY,
    )
    async def hold(ctx: Context, seconds: float, user: int | None = None) -> None:
        """Holds a slot for ``seconds``."""
        await asyncio.sleep(seconds)

    if "every" in SCHEDULES:
        app.schedule("tick", every=1, name="every_second", payload={"marks": MARKS})
    if "minute" in SCHEDULES:
        app.schedule("tick", cron="* * * * *", name="minute_once", payload={"marks": MARKS})
        app.schedule(
            "tick", cron="* * * * *", name="minute_skip", catch_up="skip", payload={"marks": MARKS}
        )
    return app


app = build_app()
