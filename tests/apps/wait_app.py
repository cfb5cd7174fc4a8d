"""Calls that wait for a person: a payment captured only once it is approved.

Worker processes load ``tests.apps.wait_app:app`` (``TENURE_DSN``); a test builds its
producer with ``build_app(dsn)``. Each tool notes ``asked JOB TOKEN WAITPOINT-TOKEN`` in
``notes`` when it suspends (standing for "send the approver a link") and ``resumed ...`` when
it is called again, so a test can tell which worker did what.
"""

from __future__ import annotations

import functools
from typing import Any

import httpx

from tenure import App, Context, PermanentError


def note(path: str, *words: object) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(" ".join(str(w) for w in words) + "\n")


def build_app(dsn: str | None = None) -> App:
    app = App(dsn)
    tool = functools.partial(
        app.tool, lease=2, heartbeat=0.3, jitter=0.5, time_limit=60, max_attempts=3
    )

    @tool()
    def capture_when_approved(
        ctx: Context, payment_id: str, amount_cents: int, receiver: str, notes: str
    ) -> dict[str, Any]:
        """Ask for approval, wait for it (no lease held), then capture the payment once."""
        wp = ctx.waitpoint("approval", timeout=3600)
        if wp.pending:
            note(notes, "asked", ctx.job_id, ctx.worker, wp.token)
            ctx.suspend(wp, request={"payment": payment_id, "amount_cents": amount_cents})
        note(notes, "resumed", ctx.job_id, ctx.worker, wp.state)
        if not (wp.answered and wp.answer.get("approved")):
            raise PermanentError("the payment was not approved")
        with httpx.Client(timeout=10) as client:
            response = client.post(
                receiver + "/payments/capture",
                json={"payment_id": payment_id, "amount_cents": amount_cents},
                auth=ctx.http_auth("capture"),
            )
        response.raise_for_status()
        return {"by": wp.answer.get("by"), "worker": ctx.worker, "status": response.status_code}

    @tool()
    async def wait_briefly(
        ctx: Context, notes: str, on_timeout: str = "resume", timeout: float = 1.0
    ) -> str:
        """Waits ``timeout`` seconds (one, unless told) for an answer."""
        wp = ctx.waitpoint("nobody", timeout=timeout, on_timeout=on_timeout)  # type: ignore[arg-type]
        if wp.pending:
            note(notes, "asked", ctx.job_id, ctx.worker, wp.token)
            ctx.suspend(wp)
        note(notes, "resumed", ctx.job_id, ctx.worker, wp.state)
        return "timed out" if wp.timed_out else f"answered {wp.answer}"

    return app


app = build_app()
