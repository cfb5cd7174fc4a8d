"""The MCP server: list an App's tools, run each ``tools/call`` as a job, answer with its end.

One call is one job, queued under its caller's tenant (`_caller`: a principal, else its
connection, else nothing) and keyed by the client's ``_meta.idempotencyKey`` or by the
connection and request id. The handler then follows the job (`_follow`: pushed by the
database, its progress relayed, its caller's questions asked) until it ends, and answers
with `_outcome.job_result`; or, where the caller asked for a task (`_tasks`), at once with
the task.

The job does not depend on the connection: a worker that dies mid-call is replaced by
another (the caller still gets one result), and a caller that comes back with the same
key (the same principal, or on a stream the same connection) gets the same job. What
cancels it is the wire's own cancel (`_wire`): ``notifications/cancelled`` for the call,
or, on the 2026-07-28 HTTP wire, the client closing the call's response stream (the
revision's only signal; a server that merely stops does not cancel). A connection that
merely goes away on any other wire leaves the job running.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.context import HandlerResult
from mcp.server.lowlevel import Server
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    CancelledNotificationParams,
    InputRequiredResult,
    ListToolsResult,
    PaginatedRequestParams,
    RequestId,
    TextContent,
    Tool,
)

from .._app import App
from .._errors import IdempotencyConflict, JobAlreadyEnded, PayloadError, QuotaExceeded
from .._job import Job
from ._ask import KEY_PREFIX, answer, input_key, open_waitpoints, request_of
from ._auth import check_principal
from ._caller import Caller, Channel, caller_of
from ._follow import follow
from ._outcome import invalid_arguments, job_meta, job_result, refused
from ._tasks import Tasks, TaskServer, execution, register, wants_task
from ._trace import UntrustedTraceContext
from ._wire import Ctx, Wire, client_left, wire_of

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

    def __init__(self, app: App, *, principal: str | None, lax: bool) -> None:
        self.app = app
        self.principal = principal
        self.lax = lax
        self.server: Server[Channel] | None = None
        self.tasks = Tasks(app, self.who)
        # (channel, request id) → call. A cancel names the request; it may arrive while
        # the job is being queued, or after the handler was interrupted (the dispatcher
        # interrupts first and tells us second), so entries outlive their handler.
        self._calls: OrderedDict[tuple[str, RequestId], _Call] = OrderedDict()

    def who(self, ctx: Ctx) -> tuple[Wire, Caller]:
        """The request's wire and its caller."""
        assert self.server is not None
        lifespan = ctx.lifespan_context
        channel = lifespan.id if isinstance(lifespan, Channel) else None
        wire = wire_of(ctx, self.server, channel)
        return wire, caller_of(ctx, wire, self.principal)

    # -- tools/list ------------------------------------------------------------------

    async def list_tools(self, ctx: Ctx, params: PaginatedRequestParams | None) -> ListToolsResult:
        wire, _ = self.who(ctx)
        return ListToolsResult(
            tools=[
                Tool(
                    name=s["name"],
                    description=s["description"],
                    input_schema=s["parameters"],
                    output_schema=self.app.registry.output_schema(s["name"]),
                    execution=execution(wire),
                )
                for s in self.app.registry.tool_schemas()
            ]
        )

    def input_schema(self, name: str) -> dict[str, Any] | None:
        if name not in self.app.tools:
            return None
        schema: dict[str, Any] = self.app.registry.tool_schema(name)["parameters"]
        return schema

    # -- tools/call --------------------------------------------------------------------

    async def call_tool(self, ctx: Ctx, params: CallToolRequestParams) -> HandlerResult:
        if params.name not in self.app.tools:
            raise MCPError(INVALID_PARAMS, f"unknown tool {params.name[:MAX_SHOWN_NAME]!r}")
        wire, caller = self.who(ctx)
        if params.request_state is not None:  # a call again, with answers to its questions
            return await self._resumed(ctx, wire, caller, params)
        key = caller.job_key(ctx, params.meta)
        if wants_task(ctx, wire, caller):
            return await self._task(wire, caller, params, key)
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
        return await self._answer(ctx, wire, caller, job, job.created, set())

    async def _answer(
        self, ctx: Ctx, wire: Wire, caller: Caller, job: Job, created: bool, asked: set[str]
    ) -> HandlerResult:
        """Follow the job and answer with its end (or with its caller's questions)."""
        try:
            final = await follow(self.app, ctx, wire, caller, job, asked=asked)
        except anyio.get_cancelled_exc_class():
            if wire.cancel_by_stream and client_left(ctx):
                await self._cancel(job.id)  # the 2026-07-28 HTTP wire's cancel
            raise  # tracked still: a cancel that interrupted us may be on its way
        except MCPError:
            self._untrack(caller, ctx.request_id)
            raise
        except Exception as exc:
            self._untrack(caller, ctx.request_id)
            raise _internal("follow", job.tool, exc) from None
        self._untrack(caller, ctx.request_id)
        if isinstance(final, Job):
            return job_result(self.app, final, created=created, scope=caller.scope)
        return InputRequiredResult(
            input_requests={input_key(wp): request_of(job, wp) for wp in final},
            request_state=await self.tasks.task_id(caller, job),
            _meta=job_meta(job, created=created, scope=caller.scope),
        )

    async def _resumed(
        self, ctx: Ctx, wire: Wire, caller: Caller, params: CallToolRequestParams
    ) -> HandlerResult:
        """(2026-07-28) The call again, with its ``requestState`` and the caller's answers:
        each answers its waitpoint, then the job is followed on."""
        job = await self.tasks.find(caller, params.request_state, held=True)
        if job is None or job.tool != params.name:
            raise MCPError(INVALID_PARAMS, "requestState names no call of yours")
        waitpoints = await open_waitpoints(self.app, job)
        asked: set[str] = set()
        for key, reply in (params.input_responses or {}).items():
            if key.startswith(KEY_PREFIX):
                name = key.removeprefix(KEY_PREFIX)
                asked.add(name)  # declined: not asked again in this request
                await answer(self.app, caller, job, waitpoints, name, reply)
        return await self._answer(ctx, wire, caller, job, False, asked)

    async def _task(
        self, wire: Wire, caller: Caller, params: CallToolRequestParams, key: str
    ) -> HandlerResult:
        """A task-augmented call: queue the job and answer at once with its task (see
        `_tasks`); the client follows it with ``tasks/*``, not this request."""
        job = await self._enqueue(params, key, caller)
        if isinstance(job, CallToolResult):  # refused, nothing queued: there is no task
            text = job.content[0].text if isinstance(job.content[0], TextContent) else ""
            error = (job.structured_content or {}).get("error")
            raise MCPError(INVALID_PARAMS, text, data=error)
        try:
            created: HandlerResult = await self.tasks.created(
                wire, caller, job, job_meta(job, created=job.created, scope=caller.scope)
            )
            return created
        except Exception as exc:
            raise _internal("enqueue", params.name, exc) from None

    async def _enqueue(
        self, params: CallToolRequestParams, key: str, caller: Caller
    ) -> Job | CallToolResult:
        tool = params.name
        try:
            arguments = params.arguments or {}
            if self.lax:
                arguments = self.app.registry.coerce_arguments(tool, arguments)
            # Shielded: once sent, the enqueue completes, so a cancel that interrupts this
            # handler still finds the job it must cancel.
            with anyio.CancelScope(shield=True):
                job = await self.app.enqueue(
                    tool, arguments, idempotency_key=key, tenant=caller.tenant
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
        wire, _ = self.who(ctx)
        if wire.channel is None:
            return
        call = self._calls.pop((wire.channel, coerce_request_id(params.request_id)), None)
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
    """Entered once per stdio or in-memory connection: that connection's identity."""
    yield Channel()


def server(
    app: App,
    *,
    name: str = "tenure",
    instructions: str | None = None,
    principal: str | None = None,
    lax_arguments: bool = False,
    trust_trace_context: bool = False,
) -> Server[Any]:
    """An MCP server (the SDK's low-level `Server`) exposing ``app``'s tools, each call a job.

    ``principal`` names the caller when the transport authenticates none: for stdio, the
    host that starts the server (``tenure mcp --principal``). With a principal, keys,
    tasks, quota and fair share are the principal's, on every connection and after a
    restart; without one, a stream connection's (see `_caller`). Over HTTP, give callers
    bearer tokens instead (`http_app`).

    ``lax_arguments``: convert a model's trivial slips (``"2"`` for an ``int``) instead of
    refusing them (`App.registry.coerce_arguments`); off, arguments are checked strictly.

    ``trust_trace_context``: continue the trace a client names in ``_meta``
    (``traceparent``); off (the default), each request starts a trace of its own that
    links the client's, so a client cannot place its calls, and the fenced requests its
    jobs send, inside a trace of its choosing.

    Serve it yourself (``await srv.run(read, write, srv.create_initialization_options())``,
    ``srv.streamable_http_app(...)``), or use `serve_stdio` / `http_app`.
    """
    bridge = _Bridge(
        app, principal=None if principal is None else check_principal(principal), lax=lax_arguments
    )
    srv: Server[Channel] = TaskServer(
        name,
        version=_tenure_version(),
        instructions=instructions,
        lifespan=_lifespan,
        get_tool_input_schema=bridge.input_schema,
        on_list_tools=bridge.list_tools,
    )
    srv.add_request_handler("tools/call", CallToolRequestParams, bridge.call_tool)
    srv.add_notification_handler(
        "notifications/cancelled", CancelledNotificationParams, bridge.cancelled
    )
    register(srv, bridge.tasks)
    if not trust_trace_context:
        srv.middleware.insert(0, UntrustedTraceContext())
    bridge.server = srv
    return srv


def _tenure_version() -> str:
    from .. import __version__

    return __version__
