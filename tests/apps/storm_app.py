"""The tool the storms run: think for a while, then cause one fenced effect at the receiver.

Worker processes load ``tests.apps.storm_app:app`` (``TENURE_DSN``); the storm
producer builds its own with ``build_app(dsn)``. The receiver is the example
case service, at ``STORM_RECEIVER_URL`` (a worker's own FaultProxy, or the
service itself).

Every call posts ``/cases`` once through ``ctx.http_auth("case")`` — the key
``tool-job:{job}:case`` is the same on every attempt, so a repeat after a
crash is replayed, never applied twice — and returns its token and the key,
which the checker compares with the row and the receiver's table.

Leases are short so that every fault shows within seconds, and keep
``L > R·H + J`` (3 > 2·1 + 0.5). The heartbeat is not shorter because the
worker withholds every lease of a process whose event loop stalled for a
beat, and a 2-core CI machine running PostgreSQL, a receiver and four
workers does stall for a few hundred milliseconds now and then. Attempts are
plentiful: a storm may kill the same job's owner several times, and "failed
after too many crashes" is not what a storm is about.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import anyio._backends._asyncio  # noqa: F401 - imported now, not on the loop at the first call
import httpcore
import httpx

from tenure import App, Context, OutcomeUnknown
from tenure.fence import raise_for_fence

LEASE = 3.0
HEARTBEAT = 1.0
JITTER = 0.5
MAX_ATTEMPTS = 40
HTTP_TIMEOUT = 10.0
OPERATION = "case"

# One client per event loop: building an httpx client loads an SSL context, which
# blocks the loop for 50-200 ms on a busy 2-core machine. A fresh client per call,
# eight calls at once, stalls the loop past a heartbeat and the worker (rightly)
# withholds every lease.
_clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}


def _client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = httpx.AsyncClient(
            base_url=os.environ["STORM_RECEIVER_URL"], timeout=HTTP_TIMEOUT
        )
    return client


assert httpcore  # the transport, imported with httpx; its anyio backend is above


def build_app(dsn: str | None = None) -> App:
    app = App(dsn)

    @app.tool(
        "storm_call",
        lease=LEASE,
        heartbeat=HEARTBEAT,
        jitter=JITTER,
        missed_beats=2,
        time_limit=30.0,
        max_attempts=MAX_ATTEMPTS,
        backoff=0.05,
        max_backoff=0.5,
    )
    async def storm_call(ctx: Context, n: int, work: float) -> dict[str, Any]:
        await asyncio.sleep(work)
        try:
            response = await _client().post(
                "/cases", json={"title": f"storm case {n}"}, auth=ctx.http_auth(OPERATION)
            )
        except httpx.TransportError as exc:
            raise OutcomeUnknown("the receiver did not answer") from exc
        raise_for_fence(response)
        response.raise_for_status()
        return {
            "token": ctx.token,
            "worker": ctx.worker,
            "effect_key": ctx.idempotency_key(OPERATION),
            "case_id": response.json()["case_id"],
            "replayed": response.headers.get("x-idempotent-replay") == "true",
        }

    return app


app = build_app()
