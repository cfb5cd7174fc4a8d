"""An MCP server whose tool opens support cases at the example case service, once.

Every ``tools/call`` is a tenure job: the case is opened under a lease, with
the job's fencing token and idempotency key, so a worker that dies mid-call is
replaced and the case service still sees one case; the client gets one result
and, meanwhile, progress. Needs ``pip install 'tenure[mcp]'``.

Run it on one machine (``TENURE_DSN`` names the database of all of it)::

    python -m tenure.examples.case_service --dsn "$TENURE_DSN" --port 8080 --insecure &
    CASE_SERVICE_URL=http://127.0.0.1:8080 tenure mcp tenure.examples.mcp_server:app --worker

The last line is what an MCP client launches (stdio); ``--http`` serves
streamable HTTP on 127.0.0.1:8322/mcp instead. ``--worker`` runs a worker in the
server's own process: elsewhere, run ``tenure worker tenure.examples.mcp_server:app``
on as many machines as you like (with ``CASE_SERVICE_URL`` set there).
"""

from __future__ import annotations

import asyncio
import os

import httpx
from pydantic import BaseModel

from tenure import App, Context, OutcomeUnknown, RetryableError
from tenure.fence import raise_for_fence

app = App()  # TENURE_DSN, else the embedded server


class Case(BaseModel):
    case_id: int
    customer_id: str


@app.tool(lease=30, heartbeat=5, jitter=5, time_limit=120, max_attempts=5)
async def open_case(ctx: Context, customer_id: str, summary: str) -> Case:
    """Open a support case for a customer. Opens exactly one case per call, even when
    the call is retried or the worker running it crashes."""
    url = os.environ.get("CASE_SERVICE_URL")
    if not url:
        raise RetryableError("CASE_SERVICE_URL is not set where this worker runs")
    ctx.report_progress(1, 3, "reading the customer's history")
    await asyncio.sleep(1.0)  # stands in for the model or the lookups a real tool waits on
    ctx.report_progress(2, 3, "opening the case")
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        try:
            response = await client.post(
                "/cases",
                json={"title": f"{customer_id}: {summary}"[:200]},
                auth=ctx.http_auth("open_case"),  # fence headers; checks the lease first
            )
        except httpx.TransportError as exc:
            raise OutcomeUnknown("the case service did not answer") from exc
    raise_for_fence(response)
    response.raise_for_status()
    ctx.report_progress(3, 3, "case opened")
    return Case(case_id=response.json()["case_id"], customer_id=customer_id)
