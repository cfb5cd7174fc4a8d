"""The tools `tenure demo` runs: simulated agent calls that take seconds.

Short leases (2 s, renewed every 0.5 s) so that faults show within seconds.
Two of the tools cause side effects at the example case service (its URL in
``TENURE_DEMO_RECEIVER``), fenced with the job's token and idempotency key.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import ssl
import time
from typing import Any

import httpx

from ._app import App
from ._context import Context
from ._errors import OutcomeUnknown, RetryableError
from .fence import raise_for_fence

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


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client the tools open: building one (loading the CA
    bundle) costs tens of milliseconds of CPU, which per call stalled the event loop."""
    return httpx.create_ssl_context()


def _receiver() -> str:
    url = os.environ.get("TENURE_DEMO_RECEIVER")
    if not url:
        raise RetryableError("TENURE_DEMO_RECEIVER is not set")
    return url


@demo_tool("fetch_statement")
async def fetch_statement(ctx: Context, invoice_id: str, seconds: float) -> dict[str, Any]:
    """A read-only external call that takes a while."""
    await asyncio.sleep(seconds)
    ctx.ensure_owned()
    return {"invoice_id": invoice_id, "lines": random.randint(1, 40)}  # noqa: S311


@demo_tool("create_case")
async def create_case(ctx: Context, customer_id: str, seconds: float) -> dict[str, Any]:
    """Think for a while, then open a case at the receiver: a side effect to fence."""
    await asyncio.sleep(seconds)
    async with httpx.AsyncClient(base_url=_receiver(), timeout=5, verify=_tls()) as client:
        try:
            response = await client.post(
                "/cases",
                json={"title": f"Check the invoice discrepancy of {customer_id}"},
                auth=ctx.http_auth("create_case"),
            )
        except httpx.TransportError as exc:
            raise OutcomeUnknown("the case service did not answer") from exc
    raise_for_fence(response)
    response.raise_for_status()
    return {"case_id": response.json()["case_id"]}


@demo_tool("capture_payment")
def capture_payment(ctx: Context, payment_id: str, seconds: float) -> dict[str, Any]:
    """Threaded work that polls ``ctx.cancelled``, then captures a payment."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.cancelled:
            raise RetryableError("stopped before the payment was prepared")
        time.sleep(0.05)
    with httpx.Client(base_url=_receiver(), timeout=5, verify=_tls()) as client:
        try:
            response = client.post(
                "/payments/capture",
                json={"payment_id": payment_id, "amount_cents": 1250},
                auth=ctx.http_auth("capture"),
            )
        except httpx.TransportError as exc:
            raise OutcomeUnknown("the payment service did not answer") from exc
    raise_for_fence(response)
    response.raise_for_status()
    return {"capture_id": response.json()["capture_id"]}
