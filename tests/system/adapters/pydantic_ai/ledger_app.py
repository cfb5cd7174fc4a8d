"""The tools the adapter tests give to agents: framework-free, so both adapters share them.

``post_entry`` counts each execution in a real table (``ledger_executions``, in the
schema ``LEDGER_DSN`` names) and then holds the call until the test opens the
account's gate (a row in ``ledger_gates``), so a test can kill an agent or a worker
while the call is in the middle. ``refuse`` and ``crash`` fail with text that must
never reach a model. Worker processes load ``tests.system.adapters.pydantic_ai.ledger_app:app``.
"""

from __future__ import annotations

import asyncio
import os
import time

import psycopg

from tenure import App, Context, PermanentError, RetryableError

SECRET = "card 4111-1111-1111-1111 of Jane Roe"  # what a tool's error text may hold
GATE_TIMEOUT = 60.0

DDL = """
CREATE TABLE IF NOT EXISTS ledger_executions (
    id bigserial PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL, account text NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger_gates (account text PRIMARY KEY)
"""


def prepare(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in DDL.split(";"):
            conn.execute(statement)


def open_gate(dsn: str, account: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO ledger_gates VALUES (%s) ON CONFLICT DO NOTHING", (account,))


def executions(dsn: str, account: str) -> list[tuple[int, int]]:
    """(job id, attempt) of every execution of ``post_entry`` for ``account``."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT job_id, attempt FROM ledger_executions WHERE account = %s ORDER BY id",
            (account,),
        ).fetchall()
    return [(int(j), int(a)) for j, a in rows]


def build_app(dsn: str | None = None) -> App:
    """The ledger's tools on an App for ``dsn`` (else ``TENURE_DSN``)."""
    app = App(dsn, poll_interval=0.2)
    app.tool(lease=2.0, heartbeat=0.5, jitter=0.5, time_limit=120, max_attempts=3, backoff=0.1)(
        post_entry
    )
    app.tool(lease=2.0, heartbeat=0.5, jitter=0.5, time_limit=30, max_attempts=3, backoff=0.05)(
        refuse
    )
    app.tool(lease=2.0, heartbeat=0.5, jitter=0.5, time_limit=30, max_attempts=2, backoff=0.05)(
        crash
    )
    return app


def _dsn() -> str:
    return os.environ["LEDGER_DSN"]  # the worker keeps TENURE_DSN to itself


async def post_entry(ctx: Context, account: str, cents: int) -> dict[str, object]:
    """Post a ledger entry of ``cents`` to ``account``; returns the entry's id."""
    async with await psycopg.AsyncConnection.connect(_dsn(), autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO ledger_executions (job_id, attempt, account) VALUES (%s, %s, %s)",
            (ctx.job_id, ctx.attempt, account),
        )
        deadline = time.monotonic() + GATE_TIMEOUT
        while True:
            cursor = await conn.execute("SELECT 1 FROM ledger_gates WHERE account = %s", (account,))
            if await cursor.fetchone():
                break
            if time.monotonic() > deadline:
                raise RetryableError("the gate never opened")
            await asyncio.sleep(0.02)
    return {"entry": f"{account}/{cents}", "job": ctx.job_id}


REFUSED = "the ledger refused this account"  # a PermanentError's words to its caller


async def refuse(ctx: Context, account: str) -> str:
    """Always refused by the ledger (the tool says so to its caller, in its own words)."""
    raise PermanentError(REFUSED)


async def crash(ctx: Context, account: str) -> str:
    """Always crashes."""
    raise RuntimeError(f"unexpected reply about {SECRET}")


app = build_app()  # what worker processes load (nothing connects before first use)
