"""MCP tasks: a ``tools/call`` that answers at once with a task, and the job behind it.

Everything that depends on the tasks protocol is here, under one revision
(`TASKS_REVISION`, the 2025-11-25 core tasks), so the next revision (the
2026-07-28 ``io.modelcontextprotocol/tasks`` extension, SEP-2663: ``tasks/get``,
``tasks/update``, ``tasks/cancel``, ``resultType: "task"``) is a change of this
module, not of the server.

A task is a job. Its id is ``<job id>.<MAC>``: HMAC-SHA256, under the secret
the database keeps for waitpoint tokens (migration 0008; shown only to roles
that may change jobs, migration 0014, as the server's must), of the job and the
caller's tenant (`_caller`), so it is unguessable, the same on every
connection of a principal and after a server restart, and it needs no table.
A task id presented by another caller (another tenant) does not verify: "not
found", exactly like an unknown id.

=============== ================= ==========================================
job state       task status       ``statusMessage``
=============== ================= ==========================================
queued          ``working``       queued (again after attempt n of m)
running         ``working``       attempt n of m, lease until ...; progress
waiting         ``input_required`` the waitpoint's name and time left, and
                                  how it is answered (never its request)
succeeded       ``completed``
failed          ``failed``        the error code and attempts
cancelled       ``cancelled``
=============== ================= ==========================================

``ttl`` is the job's retention (the tool's, else the app's): tenure keeps a
task that long after it *ended* (the revision counts from creation, so it is
kept at least that long); a client's requested ``ttl`` is not honoured.
``pollInterval`` is 1 s while working, 5 s while waiting for input.
``tasks/result`` waits for the job's end by the App's pushed completion
(`App.wait`, a database notification) and answers with the plain path's
``CallToolResult`` (`_outcome.job_result`). ``tasks/cancel`` is `App.cancel`.
``tasks/list`` lists the caller's own calls, newest first (at most
`MAX_LISTED`, no further pages).

Input. By default the MCP client is not asked: a waitpoint is answered by
whoever the tool gave its token to (``wp.token``: the person or service that
decides), with `App.complete_waitpoint` or the dashboard's open ``POST
/waitpoints/{token}`` (its token is its key); the task then goes back to ``working``. The client
sees ``input_required`` and a message naming the waitpoint, never the token or
the request. With ``server(app, answer_waitpoints=True)`` the revision's own
way is used too: while the task's caller waits in ``tasks/result``, each open
waitpoint's question (its name and request) is asked once by
``elicitation/create`` (related to the task), and an accepted reply's
``answer`` answers it (the server derives the tool's token: `derive_token`).
Opt in only where the caller may decide: an approval the agent's own user may
not give must stay with its token.

Why the SDK needs two small bridges: it dispatches ``tasks/*`` as custom
methods (`register`), but sieves every ``tools/call`` result at 2025-11-25
into a ``CallToolResult``, which has no ``task``. So the call handler returns a
``CallToolResult`` that carries the task in a private ``_meta`` entry, and
`TaskResultMiddleware` turns that back into the ``CreateTaskResult`` after the
sieve. Its own client parses no ``CreateTaskResult`` for ``tools/call``
either: a client sends that call raw (see the tests) and the ``tasks/*``
requests with ``session.send_request``.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from mcp.server.context import CallNext, HandlerResult
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CancelTaskRequestParams,
    CreateTaskResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    GetTaskPayloadRequestParams,
    GetTaskRequestParams,
    PaginatedRequestParams,
    RequestParamsMeta,
    ServerCapabilities,
    ServerTasksCapability,
    ServerTasksRequestsCapability,
    Task,
    TasksCallCapability,
    TasksCancelCapability,
    TasksListCapability,
    TaskStatus,
    TasksToolsCapability,
    ToolExecution,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .._app import App
from .._errors import Conflict, JobAlreadyEnded, JobCancelled, JobFailed, JobNotFound
from .._job import Job
from .._waitpoint import derive_token
from ._caller import Caller, Channel
from ._outcome import job_result
from ._sdk import Ctx

logger = logging.getLogger("tenure.mcp")

TASKS_REVISION = "2025-11-25"  # the protocol revision whose tasks this module implements
RELATED_TASK = "io.modelcontextprotocol/related-task"  # the revision's _meta key
TASK_MARK = "tenure/task"  # private: carries a created task past the SDK's result sieve
MAX_LISTED = 100
POLL_WORKING_MS = 1000
POLL_INPUT_MS = 5000
MAC_CHARS = 32  # of base64url: 192 bits
MAX_TASK_ID = 80
ANSWER = "answer"  # the one field of the form a waitpoint's question is asked with
MAX_QUESTION = 2000  # characters of a waitpoint's request shown in that form

STATUS: dict[str, TaskStatus] = {
    "queued": "working",
    "running": "working",
    "waiting": "input_required",
    "succeeded": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}


def wants_task(ctx: Ctx, caller: Caller) -> bool:
    """Whether this ``tools/call`` asked for a task and may have one: on the revision,
    by a caller that can come back for it (not a stateless request)."""
    params = ctx.params or {}
    return (
        ctx.protocol_version == TASKS_REVISION
        and isinstance(params.get("task"), dict)
        and caller.returns
    )


def execution(ctx: Ctx) -> ToolExecution | None:
    """A listed tool's ``execution``: every tool may run as a task on the revision."""
    return (
        ToolExecution(task_support="optional") if ctx.protocol_version == TASKS_REVISION else None
    )


def capability() -> ServerTasksCapability:
    return ServerTasksCapability(
        list=TasksListCapability(),
        cancel=TasksCancelCapability(),
        requests=ServerTasksRequestsCapability(
            tools=TasksToolsCapability(call=TasksCallCapability())
        ),
    )


class TaskServer(Server[Channel]):
    """The SDK's server, advertising tasks on the handshake revisions (the SDK derives
    capabilities from spec handlers only; ``tasks/*`` are custom to it). A client that
    negotiated an older one than `TASKS_REVISION` sees the capability but gets no task."""

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> ServerCapabilities:
        capabilities = super().get_capabilities(
            notification_options,
            experimental_capabilities,
            extensions,
            protocol_version=protocol_version,
        )
        if protocol_version in MODERN_PROTOCOL_VERSIONS:
            return capabilities
        return capabilities.model_copy(update={"tasks": capability()})


class Tasks:
    """The ``tasks/*`` handlers and the task of a job, over one App."""

    def __init__(self, app: App, caller_of: Callable[[Ctx], Caller], *, ask: bool) -> None:
        self.app = app
        self._caller_of = caller_of
        self.ask = ask  # the server's answer_waitpoints: see `_ask`
        self._secret: bytes | None = None

    async def _key(self) -> bytes:
        if self._secret is None:
            store = await self.app._store()  # the App's; no SQL here
            self._secret = await store.waitpoint_secret()
        return self._secret

    async def task_id(self, job: Job) -> str:
        """``<job>.<MAC>``; the message cannot be a waitpoint token's (``<job>\\n<name>``)."""
        mac = hmac.new(await self._key(), f"mcp-task\0{job.tenant}\0{job.id}".encode(), "sha256")
        return f"{job.id}.{base64.urlsafe_b64encode(mac.digest()).decode()[:MAC_CHARS]}"

    async def task(self, job: Job) -> Task:
        status = STATUS[job.state]
        return Task(
            task_id=await self.task_id(job),
            status=status,
            status_message=await self._message(job),
            created_at=_iso(job.created_at),
            last_updated_at=_iso(job.updated_at),
            ttl=round(self._retention(job) * 1000),
            poll_interval=POLL_INPUT_MS if status == "input_required" else POLL_WORKING_MS,
        )

    async def created(self, job: Job) -> dict[str, Any]:
        """What the call handler puts in its result's ``_meta`` for `TaskResultMiddleware`."""
        return {
            TASK_MARK: (await self.task(job)).model_dump(
                by_alias=True, mode="json", exclude_none=True
            )
        }

    def _retention(self, job: Job) -> float:
        spec = self.app.tools.get(job.tool)
        return self.app.retain if spec is None or spec.retain is None else spec.retain

    async def _message(self, job: Job) -> str | None:
        tries = f"attempt {job.attempt} of {job.max_attempts}"
        if job.state == "queued":
            return f"queued again after attempt {tries}" if job.attempt else "queued"
        if job.state == "running":
            text = tries
            if job.lease_until is not None:
                text += f", lease until {_iso(job.lease_until)}"
            progress = job.progress or {}
            if "done" in progress:
                total = progress.get("total")
                text += f"; progress {progress['done']:g}" + (
                    "" if total is None else f"/{total:g}"
                )
                if isinstance(progress.get("message"), str):
                    text += f": {progress['message']}"
            return text
        if job.state == "waiting":
            return await self._waiting(job)
        if job.state == "failed":
            code = (job.error or {}).get("code", "failed")
            return f"failed ({code}) after {job.attempt} attempt(s)"
        return None

    async def _waiting(self, job: Job) -> str:
        open_ = [w for w in await self.app.job_waitpoints(job.id) if w["state"] == "open"]
        if not open_:
            return "waiting for input"
        wp = open_[0]
        return (
            f"waiting for input at waitpoint {wp['name']!r} ({wp['seconds_left']:.0f} s left); "
            "whoever holds its token answers it (App.complete_waitpoint, or the dashboard's "
            "POST /waitpoints/{token})"
        )

    # -- lookups -----------------------------------------------------------------------------

    async def _job(self, ctx: Ctx, task_id: str) -> Job:
        if ctx.protocol_version != TASKS_REVISION:
            raise MCPError(METHOD_NOT_FOUND, "Method not found")
        caller = self._caller_of(ctx)
        job_id, dot, _ = task_id.partition(".")
        if dot and len(task_id) <= MAX_TASK_ID and job_id.isdigit():
            try:
                job = await self.app.get(int(job_id), tenant=caller.tenant)
            except JobNotFound:
                pass
            else:
                if hmac.compare_digest(await self.task_id(job), task_id):
                    return job
        raise MCPError(INVALID_PARAMS, "Failed to retrieve task: Task not found")

    # -- tasks/get, tasks/result, tasks/cancel, tasks/list ----------------------------------------

    async def get(self, ctx: Ctx, params: GetTaskRequestParams) -> HandlerResult:
        return await self.task(await self._job(ctx, params.task_id))

    async def result(self, ctx: Ctx, params: GetTaskPayloadRequestParams) -> HandlerResult:
        job = await self._job(ctx, params.task_id)
        if self.ask:
            asked: set[str] = set()
            async for now in self.app.watch(job.id):  # pushed, like App.wait
                if now.state == "waiting":
                    await self._ask(ctx, now, params.task_id, asked)
        else:
            try:
                await self.app.wait(job.id)  # pushed: the commit notifies
            except (JobFailed, JobCancelled):
                pass
        final = await self.app.get(job.id)
        answer = job_result(final, created=False)
        answer.meta = {**(answer.meta or {}), RELATED_TASK: {"taskId": params.task_id}}
        return answer

    async def _ask(self, ctx: Ctx, job: Job, task_id: str, asked: set[str]) -> None:
        """Opt-in (``server(app, answer_waitpoints=True)``): ask the task's own caller each
        open waitpoint's question once (``elicitation/create``, related to the task) and
        answer it with the reply. The server derives the waitpoint's token itself (the
        tool's token: HMAC of the job and name under the database's secret)."""
        for wp in await self.app.job_waitpoints(job.id):
            if wp["state"] != "open" or wp["name"] in asked:
                continue
            asked.add(wp["name"])
            question = f"{job.tool} waits for an answer at {wp['name']!r}"
            if wp["request"] is not None:
                question += f": {json.dumps(wp['request'], ensure_ascii=False)[:MAX_QUESTION]}"
            form = ElicitRequestFormParams(
                message=question,
                requested_schema={
                    "type": "object",
                    "properties": {ANSWER: {"type": "string"}},
                    "required": [ANSWER],
                },
                _meta=cast(RequestParamsMeta, {RELATED_TASK: {"taskId": task_id}}),
            )
            try:
                reply = await ctx.session.send_request(
                    ElicitRequest(params=form),
                    ElicitResult,
                    metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
                )
            except MCPError:  # the client cannot be asked (or refused to be): it waits
                return
            if reply.action == "accept" and reply.content and ANSWER in reply.content:
                token = derive_token(await self._key(), job.id, wp["name"])
                try:
                    await self.app.complete_waitpoint(token, reply.content[ANSWER])
                except Conflict:  # answered elsewhere meanwhile, or timed out
                    pass

    async def cancel(self, ctx: Ctx, params: CancelTaskRequestParams) -> HandlerResult:
        job = await self._job(ctx, params.task_id)
        try:
            job = await self.app.cancel(job.id)
        except JobAlreadyEnded as exc:
            raise MCPError(
                INVALID_PARAMS,
                f"Cannot cancel task: already in terminal status {STATUS[exc.job.state]!r}",
            ) from None
        return await self.task(job)

    async def list(self, ctx: Ctx, params: PaginatedRequestParams) -> HandlerResult:
        if ctx.protocol_version != TASKS_REVISION:
            raise MCPError(METHOD_NOT_FOUND, "Method not found")
        caller = self._caller_of(ctx)
        jobs = await self.app.list_jobs(tenant=caller.tenant, limit=MAX_LISTED)
        tasks = [
            (await self.task(j)).model_dump(by_alias=True, mode="json", exclude_none=True)
            for j in jobs
        ]
        return {"tasks": tasks}


def register(server: Server[Any], tasks: Tasks) -> None:
    """Serve ``tasks/*`` (custom methods to the SDK: dispatched, never sieved) and un-sieve
    the ``CreateTaskResult`` of a task-augmented ``tools/call``."""
    server.add_request_handler("tasks/get", GetTaskRequestParams, _guarded("get", tasks.get))
    server.add_request_handler(
        "tasks/result", GetTaskPayloadRequestParams, _guarded("result", tasks.result)
    )
    server.add_request_handler(
        "tasks/cancel", CancelTaskRequestParams, _guarded("cancel", tasks.cancel)
    )
    server.add_request_handler("tasks/list", PaginatedRequestParams, _guarded("list", tasks.list))
    server.middleware.append(TaskResultMiddleware())


P = TypeVar("P")


def _guarded(
    step: str, handler: Callable[[Ctx, P], Awaitable[HandlerResult]]
) -> Callable[[Ctx, P], Awaitable[HandlerResult]]:
    """The database failed, or a bug: one line in our log, none of its text to the caller
    (the SDK would otherwise put ``str(exc)`` in the JSON-RPC error)."""

    async def run(ctx: Ctx, params: P) -> HandlerResult:
        try:
            return await handler(ctx, params)
        except MCPError:
            raise
        except Exception as exc:
            logger.error("event=mcp_task_failed step=%s error=%s", step, type(exc).__name__)
            logger.debug("mcp tasks/%s failed", step, exc_info=exc)
            raise MCPError(
                INTERNAL_ERROR, f"tenure could not answer tasks/{step}; see the server's log"
            ) from None

    return run


class TaskResultMiddleware:
    """After the SDK's sieve: a ``tools/call`` result carrying `TASK_MARK` becomes the
    revision's ``CreateTaskResult`` (only our handler sets it, only for a task)."""

    async def __call__(self, ctx: Ctx, call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/call" or not isinstance(result, dict):
            return result
        meta = result.get("_meta")
        if not isinstance(meta, dict) or TASK_MARK not in meta:
            return result
        rest = {k: v for k, v in meta.items() if k != TASK_MARK}
        created = CreateTaskResult(task=Task.model_validate(meta[TASK_MARK]), _meta=rest or None)
        return created.model_dump(by_alias=True, mode="json", exclude_none=True)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
