"""The MCP server: list an App's tools, run each ``tools/call`` as a job, answer with its end.

One call is one job, queued under the caller's tenant (`_caller`) and keyed by
the client's ``_meta.idempotencyKey`` or by the connection and request id. The
handler then follows the job (`App.watch`, pushed by the database) until it
ends, relaying the tool's ``ctx.report_progress`` as ``notifications/progress``
(only increases: a retried attempt that starts over stays quiet until it passes
what the caller was already told), and answers with `_outcome.job_result`.

The job does not depend on the connection: a worker that dies mid-call is
replaced by another (the caller still gets one result), and a client that
disconnects and asks again under the same key (same principal) gets the same
job. Only an explicit ``notifications/cancelled`` for the call cancels it
(`App.cancel`: the tool is stopped at once); a connection that merely goes away
leaves it running.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.lowlevel import Server
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    CancelledNotificationParams,
    ListToolsResult,
    PaginatedRequestParams,
    RequestId,
    TextContent,
    Tool,
)

from .._app import App
from .._errors import IdempotencyConflict, JobAlreadyEnded, PayloadError, QuotaExceeded
from .._job import Job
from ._caller import Caller, Channel, caller_of, job_key
from ._outcome import invalid_arguments, job_meta, job_result, refused
from ._sdk import Ctx
from ._tasks import Tasks, TaskServer, execution, register, wants_task

logger = logging.getLogger("tenure.mcp")

MAX_SHOWN_NAME = 100  # characters of an unknown tool's name said back
MAX_TRACKED = 10_000  # calls remembered for a cancel that may still arrive; oldest dropped


@dataclass(slots=True)
class _Call:
    """A call in flight: its job once queued, and whether the client cancelled it."""

    job_id: int | None = None
    cancelled: bool = False


class _Bridge:
    """The handlers, over one App."""

    def __init__(self, app: App, *, answer_waitpoints: bool = False) -> None:
        self.app = app
        self.server: Server[Channel] | None = None
        self.tasks = Tasks(app, lambda ctx: caller_of(ctx, self._server()), ask=answer_waitpoints)
        # (channel, request id) → call. A cancel names the request; it may arrive while
        # the job is being queued, or after the handler was interrupted (the dispatcher
        # interrupts first and tells us second), so entries outlive their handler.
        self._calls: OrderedDict[tuple[str, RequestId], _Call] = OrderedDict()

    def _server(self) -> Server[Any]:
        assert self.server is not None
        return self.server

    # -- tools/list ------------------------------------------------------------------

    def tools(self, ctx: Ctx) -> list[Tool]:
        return [
            Tool(
                name=s["name"],
                description=s["description"],
                input_schema=s["parameters"],
                execution=execution(ctx),
            )
            for s in self.app.tool_schemas()
        ]

    async def list_tools(self, ctx: Ctx, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=self.tools(ctx))

    def input_schema(self, name: str) -> dict[str, Any] | None:
        if name not in self.app.tools:
            return None
        schema: dict[str, Any] = self.app.tool_schema(name)["parameters"]
        return schema

    # -- tools/call --------------------------------------------------------------------

    async def call_tool(self, ctx: Ctx, params: CallToolRequestParams) -> CallToolResult:
        if params.name not in self.app.tools:
            raise MCPError(INVALID_PARAMS, f"unknown tool {params.name[:MAX_SHOWN_NAME]!r}")
        caller = caller_of(ctx, self._server())
        key = job_key(caller, ctx, params.meta)
        if wants_task(ctx, caller):
            return await self._task(params, key, caller)
        call = self._track(caller, ctx.request_id)
        try:
            job = await self._enqueue(params, key, caller)
        except MCPError:
            self._untrack(caller, ctx.request_id)
            raise
        if isinstance(job, CallToolResult):  # refused: nothing was queued
            self._untrack(caller, ctx.request_id)
            return job
        call.job_id = job.id
        if call.cancelled:  # the cancel arrived while the job was being queued
            await self._cancel(job.id)
        try:
            final = await self._follow(ctx, job)
        except anyio.get_cancelled_exc_class():
            raise  # tracked still: the cancel that interrupted us may be on its way
        except Exception as exc:
            self._untrack(caller, ctx.request_id)
            raise _internal("follow", params.name, exc) from None
        self._untrack(caller, ctx.request_id)
        return job_result(final, created=job.created)

    async def _task(
        self, params: CallToolRequestParams, key: str, caller: Caller
    ) -> CallToolResult:
        """A task-augmented call: queue the job and answer at once with its task (see
        `_tasks`); the client follows it with ``tasks/*``, not this request."""
        job = await self._enqueue(params, key, caller)
        if isinstance(job, CallToolResult):  # refused, nothing queued: there is no task
            text = job.content[0].text if isinstance(job.content[0], TextContent) else ""
            error = (job.structured_content or {}).get("error")
            raise MCPError(INVALID_PARAMS, text, data=error)
        try:
            created = await self.tasks.created(job)
        except Exception as exc:
            raise _internal("enqueue", params.name, exc) from None
        return CallToolResult(content=[], _meta={**job_meta(job, created=job.created), **created})

    async def _enqueue(
        self, params: CallToolRequestParams, key: str, caller: Caller
    ) -> Job | CallToolResult:
        tool = params.name
        try:
            # Shielded: once sent, the enqueue completes, so a cancel that interrupts this
            # handler still finds the job it must cancel.
            with anyio.CancelScope(shield=True):
                job = await self.app.enqueue(
                    tool, params.arguments or {}, idempotency_key=key, tenant=caller.tenant
                )
        except PayloadError as exc:
            return invalid_arguments(tool, exc)
        except IdempotencyConflict:
            return refused(
                "idempotency_conflict",
                f"this idempotency key already names a call of {tool} with other arguments "
                "(or of another tool); use a new key for a new call",
            )
        except QuotaExceeded:
            return refused(
                "quota_exceeded", "too many of your calls are queued; try again once some ran"
            )
        except Exception as exc:
            raise _internal("enqueue", tool, exc) from None
        return job

    async def _follow(self, ctx: Ctx, job: Job) -> Job:
        """Wait for the job to end, relaying its progress; return its final row."""
        final = job
        told = float("-inf")
        async for now in self.app.watch(job.id):
            final = now
            progress = now.progress
            if progress is not None and float(progress.get("done", 0)) > told:
                told = float(progress["done"])
                total = progress.get("total")
                await ctx.session.report_progress(
                    told, None if total is None else float(total), progress.get("message")
                )
        return final

    async def _cancel(self, job_id: int) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.app.cancel(job_id)
            except JobAlreadyEnded:
                pass

    # -- notifications/cancelled -----------------------------------------------------------

    async def cancelled(self, ctx: Ctx, params: CancelledNotificationParams) -> None:
        if params.request_id is None:
            return
        caller = caller_of(ctx, self._server())
        if caller.channel is None:
            return
        call = self._calls.pop((caller.channel, coerce_request_id(params.request_id)), None)
        if call is None:
            return
        call.cancelled = True
        if call.job_id is not None:
            await self._cancel(call.job_id)

    def _track(self, caller: Caller, request_id: RequestId | None) -> _Call:
        call = _Call()
        if caller.channel is not None and request_id is not None:
            self._calls[(caller.channel, coerce_request_id(request_id))] = call
            while len(self._calls) > MAX_TRACKED:
                self._calls.popitem(last=False)
        return call

    def _untrack(self, caller: Caller, request_id: RequestId | None) -> None:
        if caller.channel is not None and request_id is not None:
            self._calls.pop((caller.channel, coerce_request_id(request_id)), None)


_FAILED_LINES = {
    "follow": "event=mcp_follow_failed tool=%s error=%s",
    "enqueue": "event=mcp_enqueue_failed tool=%s error=%s",
}


def _internal(step: str, tool: str, exc: Exception) -> MCPError:
    """The database failed, or a bug: one line in our log, none of its text to the caller
    (the SDK would otherwise put ``str(exc)`` in the JSON-RPC error)."""
    logger.error(_FAILED_LINES[step], tool, type(exc).__name__)
    logger.debug("mcp %s failed", step, exc_info=exc)
    return MCPError(INTERNAL_ERROR, f"tenure could not {step} the call; see the server's log")


@asynccontextmanager
async def _lifespan(server: Server[Channel]) -> AsyncIterator[Channel]:
    """Entered once per stdio or in-process connection: that connection's identity."""
    yield Channel()


def server(
    app: App,
    *,
    name: str = "tenure",
    instructions: str | None = None,
    answer_waitpoints: bool = False,
) -> Server[Any]:
    """An MCP server (the SDK's low-level `Server`) exposing ``app``'s tools, each call a job.

    ``answer_waitpoints``: a task's own caller is asked (MCP elicitation, while it waits in
    ``tasks/result``) each question its call waits on, and its reply answers the waitpoint.
    Off by default: a waitpoint is answered by whoever the tool gave its token to.

    Serve it yourself (``await srv.run(read, write, srv.create_initialization_options())``,
    ``srv.streamable_http_app(...)``), or use `serve_stdio` / `http_app`.
    """
    bridge = _Bridge(app, answer_waitpoints=answer_waitpoints)
    srv: Server[Channel] = TaskServer(
        name,
        version=_tenure_version(),
        instructions=instructions,
        lifespan=_lifespan,
        get_tool_input_schema=bridge.input_schema,
        on_list_tools=bridge.list_tools,
        on_call_tool=bridge.call_tool,
    )
    srv.add_notification_handler(
        "notifications/cancelled", CancelledNotificationParams, bridge.cancelled
    )
    register(srv, bridge.tasks)
    bridge.server = srv
    return srv


def _tenure_version() -> str:
    from .. import __version__

    return __version__
