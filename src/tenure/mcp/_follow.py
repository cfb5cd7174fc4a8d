"""Following a job for its caller until it ends: its progress relayed, its caller's
questions asked, on whichever wire the caller waits (a plain ``tools/call``, or a
2025-11-25 ``tasks/result``).

Progress goes out as ``notifications/progress`` on the waiting request (only increases: a
retried attempt that starts over stays quiet until it passes what the caller was already
told). A job that waits at a waitpoint declared for its caller (`_ask`) is asked about
once per waitpoint and request: by an ``elicitation/create`` request where the wire has a
back channel; where it has none (2026-07-28), `follow` returns the waitpoints to ask about
and the caller answers them by calling again (an ``input_required`` result).
"""

from __future__ import annotations

from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import ElicitResult

from .._app import App
from .._job import Job
from ._ask import Waitpoint, answer, for_caller, open_waitpoints, request_of
from ._caller import Caller
from ._wire import RELATED_TASK, Ctx, Wire

Waitpoints = list[Waitpoint]


async def follow(
    app: App,
    ctx: Ctx,
    wire: Wire,
    caller: Caller,
    job: Job,
    *,
    task_id: str | None = None,
    asked: set[str] | None = None,
) -> Job | Waitpoints:
    """The job once it ended, or, on a wire that asks by result, the caller's waitpoints to
    ask about now (``asked``: those not to ask again in this request)."""
    told = float("-inf")
    asked = set() if asked is None else asked
    final = job
    async for now in app.watch(job.id):
        final = now
        progress = now.progress
        if progress is not None and float(progress.get("done", 0)) > told:
            told = float(progress["done"])
            total = progress.get("total")
            await ctx.session.report_progress(
                told, None if total is None else float(total), progress.get("message")
            )
        if now.state != "waiting" or wire.asking is None:
            continue
        waitpoints = await open_waitpoints(app, now)
        fresh = [w for w in for_caller(waitpoints) if w["name"] not in asked]
        if fresh and wire.asking == "result":
            return fresh
        for wp in fresh:
            asked.add(wp["name"])
            meta = None if task_id is None else {RELATED_TASK: {"taskId": task_id}}
            try:
                reply = await ctx.session.send_request(
                    request_of(now, wp, meta),
                    ElicitResult,
                    metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
                )
            except MCPError:  # the client cannot be asked (or refused to be): it waits
                continue
            await answer(app, caller, now, waitpoints, wp["name"], reply)
    return final
