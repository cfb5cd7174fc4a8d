"""The worker app `tenure demo` starts its workers on: simulated agent calls that take seconds.

Short leases (2 s, renewed every 0.5 s) so that faults show within seconds.
Two of the tools cause side effects at the example case service (its URL in
``TENURE_DEMO_RECEIVER``), fenced with the job's token and idempotency key.

``freeze`` makes the worst moments happen on purpose: on its first attempt the
worker process stops itself (SIGSTOP, as a long GC pause or a VM migration
would freeze it) at that point of the call, and `tenure demo` continues it once
another worker has taken the lease over: ``at_start`` (the stale owner wakes in
the middle of its call), ``before_request`` (after its last ownership check,
its request still to leave), ``before_commit`` (its work done, its commit
still to be sent).
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import signal
import ssl
import threading
import time
from collections.abc import Generator
from typing import Any, Literal

import httpx

from ._app import App
from ._errors import OutcomeUnknown, RetryableError
from ._worker._context import Context
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


Freeze = Literal["at_start", "before_request", "before_commit"]


def _freeze(ctx: Context, here: Freeze, asked: Freeze | None) -> None:
    """Stop this whole process here on the call's first attempt (see the module's doc).

    Sent to this thread, not the process: a process-wide SIGSTOP goes to the main thread,
    and a tool thread could run on (and send its request) until that thread is scheduled;
    a stop sent to the calling thread takes it down before its next instruction."""
    if asked == here and ctx.attempt == 1:
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


class _FreezeBeforeSending(httpx.Auth):
    """The fenced auth, then a freeze: the ownership check has passed and the fence
    headers carry this attempt's token, but the request has not left yet."""

    requires_request_body = True

    def __init__(self, ctx: Context, operation: str) -> None:
        self._ctx = ctx
        self._fenced = ctx.http_auth(operation)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        checked = next(self._fenced.auth_flow(request))
        _freeze(self._ctx, "before_request", "before_request")
        yield checked


def _receiver() -> str:
    url = os.environ.get("TENURE_DEMO_RECEIVER")
    if not url:
        raise RetryableError("TENURE_DEMO_RECEIVER is not set")
    return url


@demo_tool("fetch_statement")
async def fetch_statement(
    ctx: Context, invoice_id: str, seconds: float, freeze: Freeze | None = None
) -> dict[str, Any]:
    """A read-only external call that takes a while."""
    _freeze(ctx, "at_start", freeze)
    await asyncio.sleep(seconds)
    ctx.ensure_owned()
    return {"invoice_id": invoice_id, "lines": random.randint(1, 40)}  # noqa: S311


@demo_tool("create_case")
async def create_case(
    ctx: Context, customer_id: str, seconds: float, freeze: Freeze | None = None
) -> dict[str, Any]:
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
    _freeze(ctx, "before_commit", freeze)
    return {"case_id": response.json()["case_id"]}


@demo_tool("capture_payment")
def capture_payment(
    ctx: Context, payment_id: str, seconds: float, freeze: Freeze | None = None
) -> dict[str, Any]:
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
                auth=(
                    _FreezeBeforeSending(ctx, "capture")
                    if freeze == "before_request"
                    else ctx.http_auth("capture")
                ),
            )
        except httpx.TransportError as exc:
            raise OutcomeUnknown("the payment service did not answer") from exc
    raise_for_fence(response)
    response.raise_for_status()
    return {"capture_id": response.json()["capture_id"]}
