"""MCP tasks: a ``tools/call`` answered at once with a task, and the job behind it, on both
revisions the SDK speaks (`_wire`'s table):

- 2025-11-25, in the core protocol: a call with a ``task`` field gets a
  ``CreateTaskResult``; ``tasks/get``, ``tasks/result`` (waits, relaying the job's
  progress on that request and asking the caller its questions), ``tasks/cancel``,
  ``tasks/list`` (the caller's own calls, newest first, at most `MAX_LISTED`);
- 2026-07-28, the extension ``io.modelcontextprotocol/tasks`` (SEP-2663): when a request
  declares it, tenure answers every call with a task (``resultType: "task"``);
  ``tasks/get`` carries the result once the job ended and the caller's questions
  (``inputRequests``) while it waits for its caller; ``tasks/update`` delivers the
  answers; ``tasks/cancel`` cancels. No list, no progress notifications (the extension
  has neither: progress is in ``statusMessage``).

A task is a job; its id is made and read by `_ids` (bound to the caller's scope: a
principal's tasks are found from any connection and after a restart, another caller's
are "not found", exactly like an unknown id). A caller that cannot come back (a
stateless request without a principal, `_caller`) gets no task: the plain path.

=============== =============================== ==============================================
job state       task status                     ``statusMessage``
=============== =============================== ==============================================
queued          ``working``                     queued (again after attempt n of m)
running         ``working``                     attempt n of m, lease until ...; progress
waiting         ``input_required`` (a question  where it waits and for whom (`_ask`): never
                for its caller), else           the token or the tool's request
                ``working`` (it waits for a
                person or service)
succeeded       ``completed``
failed          ``failed`` (2025-11-25);        the error code and attempts
                ``completed``, its result a
                tool error (2026-07-28: a task
                fails only on a protocol error)
cancelled       ``cancelled``
=============== =============================== ==============================================

``ttl`` is the job's retention (the tool's, else the app's): tenure keeps a task that
long after it *ended* (the revisions count from creation, so it is kept at least that
long); a client's requested ``ttl`` is not honoured. The poll interval is 1 s while
working, 5 s while waiting for input.

Why the 2025-11-25 reply needs a small bridge: the SDK sieves every ``tools/call`` result
at that revision into a ``CallToolResult``, which has no ``task``. So the handler returns
a result that carries the task in a private ``_meta`` entry, and `TaskResultMiddleware`
(the SDK's public middleware chain) turns it back into the ``CreateTaskResult`` after the
sieve, keeping an empty ``content``: the SDK's own client checks every ``tools/call``
reply against ``CallToolResult``, so that is what lets it read a task with its public
``send_request``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from mcp.server.context import CallNext, HandlerResult
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CallToolResult,
    CreateTaskResult,
    PaginatedRequestParams,
    RequestParams,
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
from pydantic import Field

from .._app import App
from .._errors import JobAlreadyEnded, JobNotFound
from .._job import Job
from . import _ids
from ._ask import (
    Waitpoint,
    answer,
    for_caller,
    input_key,
    open_waitpoints,
    request_of,
    waiting_message,
)
from ._caller import Caller, Channel
from ._follow import follow
from ._outcome import job_result
from ._wire import RELATED_TASK, TASKS_EXTENSION, Ctx, Wire

logger = logging.getLogger("tenure.mcp")

TASK_MARK = "tenure/task"  # private: carries a created task past the SDK's result sieve
MAX_LISTED = 100
POLL_WORKING_MS = 1000
POLL_INPUT_MS = 5000
MISSING_CAPABILITY = -32021  # the revision's "Missing required client capability"
NOT_FOUND = "Failed to retrieve task: Task not found"

STATUS: dict[str, TaskStatus] = {
    "queued": "working",
    "running": "working",
    "waiting": "working",  # input_required only when its caller is the one asked
    "succeeded": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}

Who = Callable[[Ctx], tuple[Wire, Caller]]


class TaskIdParams(RequestParams):
    """``tasks/get``, ``tasks/result``, ``tasks/cancel``: the task's id (any text: it is
    read strictly by `_ids`, never trusted)."""

    task_id: Any = Field(alias="taskId")


class UpdateParams(TaskIdParams):
    """``tasks/update`` (the extension): answers to the task's input requests."""

    input_responses: dict[str, Any] = Field(alias="inputResponses", default_factory=dict)


def wants_task(ctx: Ctx, wire: Wire, caller: Caller) -> bool:
    """Whether this ``tools/call`` is answered with a task: on the core revision when it
    asks for one, with the extension whenever the request declares it; and only for a
    caller that can come back for it."""
    if not caller.returns or wire.tasks is None:
        return False
    return wire.tasks == "extension" or isinstance((ctx.params or {}).get("task"), dict)


def execution(wire: Wire) -> ToolExecution | None:
    """A listed tool's ``execution``: every tool may run as a core task."""
    return ToolExecution(task_support="optional") if wire.tasks == "core" else None


def capability() -> ServerTasksCapability:
    return ServerTasksCapability(
        list=TasksListCapability(),
        cancel=TasksCancelCapability(),
        requests=ServerTasksRequestsCapability(
            tools=TasksToolsCapability(call=TasksCallCapability())
        ),
    )


class TaskServer(Server[Channel]):
    """The SDK's server, advertising the core tasks on the handshake revisions (the SDK
    derives capabilities from spec handlers only; ``tasks/*`` are custom to it) and the
    extension on 2026-07-28 (``server.extensions``). A client that negotiated an older
    revision than `TASKS_REVISION` sees the capability but gets no task."""

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

    def __init__(self, app: App, who: Who) -> None:
        self.app = app
        self._who = who
        self._key: bytes | None = None

    async def task_id(self, caller: Caller, job: Job) -> str:
        return _ids.make_id(await self._keyed(), caller.id_scope, job.id)

    async def find(self, caller: Caller, task_id: object, *, held: bool = False) -> Job | None:
        """The caller's job that ``task_id`` names, or None (never an error). ``held``: the
        id was handed to this very call (a ``requestState``), which a caller without any
        scope may hold too: the MAC shows it was ours to hand out."""
        job_id = _ids.job_of(task_id)
        if job_id is None:
            return None
        try:
            job = await self.app.get(job_id, tenant=caller.tenant)
        except JobNotFound:
            return None
        mine = caller.owns(job) or (held and caller.scope == "request")
        if not mine or not _ids.same(await self._keyed(), caller.id_scope, job.id, str(task_id)):
            return None
        return job

    async def _keyed(self) -> bytes:
        if self._key is None:
            self._key = await self.app.derived_key(_ids.KEY_PURPOSE)
        return self._key

    # -- what a task says --------------------------------------------------------------

    async def _state(
        self, job: Job
    ) -> tuple[TaskStatus, str | None, list[Waitpoint], list[Waitpoint]]:
        """The task's status and message, the job's open waitpoints and those its caller
        is asked about."""
        waitpoints = await open_waitpoints(self.app, job)
        asked = for_caller(waitpoints)
        status: TaskStatus = "input_required" if asked else STATUS[job.state]
        if job.state == "waiting":
            return status, waiting_message(job, waitpoints), waitpoints, asked
        return status, _message(job), waitpoints, asked

    def _retention_ms(self, job: Job) -> int:
        return round(self.app.registry.retention(job.tool) * 1000)

    async def core_task(self, caller: Caller, job: Job) -> Task:
        status, message, _, _ = await self._state(job)
        return Task(
            task_id=await self.task_id(caller, job),
            status=status,
            status_message=message,
            created_at=_iso(job.created_at),
            last_updated_at=_iso(job.updated_at),
            ttl=self._retention_ms(job),
            poll_interval=POLL_INPUT_MS if status == "input_required" else POLL_WORKING_MS,
        )

    async def extension_task(self, caller: Caller, job: Job, *, detailed: bool) -> dict[str, Any]:
        """The extension's task (``detailed``: with its result or input requests)."""
        status, message, _, asked = await self._state(job)
        if status == "failed":  # a tool error is a completed call with isError
            status = "completed"
        task: dict[str, Any] = {
            "taskId": await self.task_id(caller, job),
            "status": status,
            "createdAt": _iso(job.created_at),
            "lastUpdatedAt": _iso(job.updated_at),
            "ttlMs": self._retention_ms(job),
            "pollIntervalMs": POLL_INPUT_MS if status == "input_required" else POLL_WORKING_MS,
        }
        if message is not None:
            task["statusMessage"] = message
        if detailed and status == "input_required":
            task["inputRequests"] = {
                input_key(wp): request_of(job, wp).model_dump(
                    by_alias=True, mode="json", exclude_none=True
                )
                for wp in asked
            }
        if detailed and status == "completed":
            task["result"] = job_result(
                self.app, job, created=False, scope=caller.scope
            ).model_dump(by_alias=True, mode="json", exclude_none=True)
        return task

    async def created(self, wire: Wire, caller: Caller, job: Job, meta: dict[str, Any]) -> Any:
        """The reply to a task-augmented ``tools/call``: the core revision's result marked
        for `TaskResultMiddleware`, or the extension's ``CreateTaskResult``."""
        if wire.tasks == "core":
            core = await self.core_task(caller, job)
            dumped = core.model_dump(by_alias=True, mode="json", exclude_none=True)
            return CallToolResult(content=[], _meta={**meta, TASK_MARK: dumped})
        task = await self.extension_task(caller, job, detailed=False)
        return {"resultType": "task", **task, "_meta": meta}

    # -- lookups -----------------------------------------------------------------------

    async def _job(
        self, ctx: Ctx, task_id: object, *, only: str | None = None
    ) -> tuple[Wire, Caller, Job]:
        wire, caller = self._who(ctx)
        _served(ctx, wire, only)
        job = await self.find(caller, task_id)
        if job is None:
            raise MCPError(INVALID_PARAMS, NOT_FOUND)
        return wire, caller, job

    # -- tasks/get, tasks/result, tasks/cancel, tasks/list, tasks/update ---------------

    async def get(self, ctx: Ctx, params: TaskIdParams) -> HandlerResult:
        wire, caller, job = await self._job(ctx, params.task_id)
        if wire.tasks == "core":
            return await self.core_task(caller, job)
        return await self.extension_task(caller, job, detailed=True)

    async def result(self, ctx: Ctx, params: TaskIdParams) -> HandlerResult:
        """(2025-11-25) Wait for the job's end, relaying its progress on this request and
        asking the caller its questions; then the plain path's result."""
        wire, caller, job = await self._job(ctx, params.task_id, only="core")
        task_id = str(params.task_id)
        final = await follow(self.app, ctx, wire, caller, job, task_id=task_id)
        assert isinstance(final, Job)  # this wire asks by request, never by result
        answer_ = job_result(self.app, final, created=False, scope=caller.scope)
        answer_.meta = {**(answer_.meta or {}), RELATED_TASK: {"taskId": task_id}}
        return answer_

    async def cancel(self, ctx: Ctx, params: TaskIdParams) -> HandlerResult:
        wire, caller, job = await self._job(ctx, params.task_id)
        try:
            job = await self.app.cancel(job.id)
        except JobAlreadyEnded as exc:
            if wire.tasks == "extension":
                return {}  # the extension acknowledges; the task says how it ended
            raise MCPError(
                INVALID_PARAMS,
                f"Cannot cancel task: already in terminal status {STATUS[exc.job.state]!r}",
            ) from None
        return await self.core_task(caller, job) if wire.tasks == "core" else {}

    async def list(self, ctx: Ctx, params: PaginatedRequestParams) -> HandlerResult:
        """(2025-11-25) The caller's own calls, newest first."""
        wire, caller = self._who(ctx)
        _served(ctx, wire, "core")
        if not caller.returns:
            return {"tasks": []}
        jobs = [
            j
            for j in await self.app.admin.jobs(tenant=caller.tenant, limit=MAX_LISTED * 10)
            if caller.owns(j)
        ]
        tasks = [
            (await self.core_task(caller, j)).model_dump(
                by_alias=True, mode="json", exclude_none=True
            )
            for j in jobs[:MAX_LISTED]
        ]
        return {"tasks": tasks}

    async def update(self, ctx: Ctx, params: UpdateParams) -> HandlerResult:
        """(the extension) Answers to the task's input requests: each answers its waitpoint;
        keys it never asked about (or already answered) are ignored."""
        _, caller, job = await self._job(ctx, params.task_id, only="extension")
        waitpoints = await open_waitpoints(self.app, job)
        for key, reply in params.input_responses.items():
            if isinstance(key, str) and key.startswith("waitpoint:"):
                await answer(
                    self.app, caller, job, waitpoints, key.removeprefix("waitpoint:"), reply
                )
        return {}


def _served(ctx: Ctx, wire: Wire, only: str | None) -> None:
    """Refuse a ``tasks/*`` request its wire does not serve, as the revision says to."""
    if wire.tasks is None and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        raise MCPError(
            MISSING_CAPABILITY,
            "Missing required client capability",
            data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
        )
    if wire.tasks is None or (only is not None and wire.tasks != only):
        raise MCPError(METHOD_NOT_FOUND, "Method not found")


def _message(job: Job) -> str | None:
    tries = f"attempt {job.attempt} of {job.max_attempts}"
    if job.state == "queued":
        return f"queued again after {tries}" if job.attempt else "queued"
    if job.state == "running":
        text = tries
        if job.lease_until is not None:
            text += f", lease until {_iso(job.lease_until)}"
        progress = job.progress or {}
        if "done" in progress:
            total = progress.get("total")
            text += f"; progress {progress['done']:g}" + ("" if total is None else f"/{total:g}")
            if isinstance(progress.get("message"), str):
                text += f": {progress['message']}"
        return text
    if job.state == "failed":
        code = (job.error or {}).get("code", "failed")
        return f"failed ({code}) after {job.attempt} attempt(s)"
    return None


def register(server: Server[Any], tasks: Tasks) -> None:
    """Serve ``tasks/*`` (custom methods to the SDK: dispatched, never sieved), advertise
    the extension, and un-sieve the core revision's ``CreateTaskResult``."""
    server.add_request_handler("tasks/get", TaskIdParams, _guarded("get", tasks.get))
    server.add_request_handler("tasks/result", TaskIdParams, _guarded("result", tasks.result))
    server.add_request_handler("tasks/cancel", TaskIdParams, _guarded("cancel", tasks.cancel))
    server.add_request_handler("tasks/list", PaginatedRequestParams, _guarded("list", tasks.list))
    server.add_request_handler("tasks/update", UpdateParams, _guarded("update", tasks.update))
    server.extensions[TASKS_EXTENSION] = {}
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
    """After the SDK's sieve: a ``tools/call`` result carrying `TASK_MARK` becomes the core
    revision's ``CreateTaskResult`` (only our handler sets it, only for a task), keeping
    the empty ``content`` the SDK's client checks for."""

    async def __call__(self, ctx: Ctx, call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/call" or not isinstance(result, dict):
            return result
        meta = result.get("_meta")
        if not isinstance(meta, dict) or TASK_MARK not in meta:
            return result
        rest = {k: v for k, v in meta.items() if k != TASK_MARK}
        created = CreateTaskResult(task=Task.model_validate(meta[TASK_MARK]), _meta=rest or None)
        return {"content": [], **created.model_dump(by_alias=True, mode="json", exclude_none=True)}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
