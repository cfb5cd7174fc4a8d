"""The MCP adapter's test helpers: in-memory JSON-RPC connections, ``tenure mcp`` over stdio,
and reads of tenure's tables.

Test modules call `needs_sdk` before importing this: where the ``mcp`` extra is missing
they are skipped with the reason (CI installs it: the ``test`` extra includes it).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, cast

import anyio
import psycopg
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext, ElicitationFnT
from mcp.server.lowlevel import Server
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.memory import create_client_server_memory_streams
from mcp_types import (
    CallToolRequest,
    CallToolRequestParams,
    CallToolResult,
    CancelTaskRequest,
    CancelTaskRequestParams,
    CancelTaskResult,
    CreateTaskResult,
    EmptyResult,
    ErrorData,
    GetTaskPayloadRequest,
    GetTaskPayloadRequestParams,
    GetTaskRequest,
    GetTaskRequestParams,
    GetTaskResult,
    InputRequest,
    ListTasksRequest,
    ListTasksResult,
    Request,
    RequestParams,
    RequestParamsMeta,
    Result,
    TaskMetadata,
    TextContent,
)
from psycopg.rows import dict_row
from pydantic import TypeAdapter
from tests.support.workers import REPO_ROOT

from tenure.mcp import KEY_META, META_KEY

Era = Literal["modern", "legacy"]
ERAS: tuple[Era, ...] = ("modern", "legacy")


@asynccontextmanager
async def _memory(server: Server[Any], cut: anyio.Event | None) -> AsyncIterator[Any]:
    """The server on in-memory streams, JSON-RPC framed like stdio: cancellation and
    progress travel as messages (the SDK's direct in-process dispatch has no messages).
    Setting ``cut`` ends the server's side of the connection, as a dropped link would,
    without the client saying anything first."""
    async with create_client_server_memory_streams() as (client_streams, server_streams):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: server.run(*server_streams, server.create_initialization_options())
            )
            if cut is not None:

                async def drop() -> None:
                    await cut.wait()
                    await server_streams[0].aclose()

                tg.start_soon(drop)
            yield client_streams
            tg.cancel_scope.cancel()


def memory_client(
    server: Server[Any],
    era: Era = "modern",
    cut: anyio.Event | None = None,
    elicitation: ElicitationFnT | None = None,
    tasks: bool = False,
) -> Client:
    """A connection of the SDK's own client: 2026-07-28 (probed) or the 2025 handshake
    (``elicitation``: how it answers the server's questions; ``tasks``: with the tasks
    extension, on 2026-07-28)."""
    return Client(
        _memory(server, cut),
        mode="legacy" if era == "legacy" else "auto",
        elicitation_callback=elicitation,
        extensions=[TasksExtension()] if tasks else None,
    )


def stdio(
    dsn: str,
    errlog: Path,
    *args: str,
    env: dict[str, str] | None = None,
    legacy: bool = False,
    tasks: bool = False,
    elicitation: ElicitationFnT | None = None,
    pidfile: Path | None = None,
) -> Client:
    """``python -m tenure mcp ...`` as a real subprocess, through the SDK's stdio client
    (``legacy``: on the 2025 handshake; ``tasks``: with the 2026-07-28 tasks extension;
    ``pidfile``: where the server writes its process id, to be killed)."""
    command = [sys.executable, "-m", "tenure", "mcp", *args]
    if pidfile is not None:  # the shell writes its pid, then becomes the server
        script = 'echo $$ > "$0"; exec "$@"'
        command = ["/bin/sh", "-c", script, str(pidfile), *command]
    params = StdioServerParameters(
        command=command[0],
        args=command[1:],
        cwd=str(REPO_ROOT),
        env={
            "TENURE_DSN": dsn,
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        },
    )
    return Client(
        _stdio(params, errlog),
        mode="legacy" if legacy else "auto",
        elicitation_callback=elicitation,
        extensions=[TasksExtension()] if tasks else None,
    )


@asynccontextmanager
async def _stdio(params: StdioServerParameters, errlog: Path) -> AsyncIterator[Any]:
    with errlog.open("a", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as streams:
            yield streams


@asynccontextmanager
async def in_flight(
    client: Client, tool: str, arguments: dict[str, Any]
) -> AsyncIterator[anyio.CancelScope]:
    """The call running in the background until the block ends; cancelling the yielded
    scope abandons it (the SDK's client then sends ``notifications/cancelled``)."""
    scope = anyio.CancelScope()

    async def call() -> None:
        with scope:
            await client.call_tool(tool, arguments)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        yield scope


def key(value: object) -> RequestParamsMeta:
    """The request ``_meta`` that names the call's idempotency key (any value: the hostile
    tests send ones the server must refuse)."""
    return cast(RequestParamsMeta, {KEY_META: value})


def job_of(result: Any) -> dict[str, Any]:
    """A result's ``_meta["tenure/job"]``: the job, whether the call created it, its scope."""
    assert result.meta is not None, result
    job: dict[str, Any] = result.meta[META_KEY]
    return job


def text(path: Path) -> str:
    """A marker file's text ('' until the tool wrote it)."""
    return path.read_text() if path.exists() else ""


def states(dsn: str, tool: str) -> list[str]:
    """The states of ``tool``'s jobs, oldest first."""
    return [str(r["state"]) for r in jobs(dsn, tool)]


def text_of(result: CallToolResult) -> str:
    """The text of a tool result's first block (a tenure tool answers with one text block)."""
    block = result.content[0]
    assert isinstance(block, TextContent), block
    return block.text


def rows(dsn: str, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(query, params or {}).fetchall()


def jobs(dsn: str, tool: str | None = None) -> list[dict[str, Any]]:
    """tenure's job rows (of ``tool``), oldest first."""
    return rows(
        dsn,
        "SELECT id, tool, state, tenant, idempotency_key, attempt, token FROM tenure_jobs"
        " WHERE %(tool)s::text IS NULL OR tool = %(tool)s::text ORDER BY id",
        {"tool": tool},
    )


async def task_call(
    client: Client, tool: str, arguments: dict[str, Any], meta: RequestParamsMeta | None = None
) -> CreateTaskResult:
    """A task-augmented ``tools/call`` (2025-11-25), through the client session's public
    ``send_request`` (the server's reply is a valid ``CallToolResult`` too: the SDK checks
    every ``tools/call`` reply against it)."""
    params = CallToolRequestParams(name=tool, arguments=arguments, task=TaskMetadata(), _meta=meta)
    return await client.session.send_request(CallToolRequest(params=params), CreateTaskResult)


async def task_call_plain(
    client: Client, tool: str, arguments: dict[str, Any], meta: RequestParamsMeta | None = None
) -> CallToolResult:
    """`task_call`, where the server answers with the plain path instead of a task."""
    params = CallToolRequestParams(name=tool, arguments=arguments, task=TaskMetadata(), _meta=meta)
    return await client.session.send_request(CallToolRequest(params=params), CallToolResult)


async def task_get(client: Client, task_id: str) -> GetTaskResult:
    request = GetTaskRequest(params=GetTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, GetTaskResult)


async def task_result(
    client: Client, task_id: str, progress: ProgressFnT | None = None
) -> CallToolResult:
    request = GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=task_id))
    return await client.session.send_request(request, CallToolResult, progress_callback=progress)


async def task_cancel(client: Client, task_id: str) -> CancelTaskResult:
    request = CancelTaskRequest(params=CancelTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, CancelTaskResult)


async def task_list(client: Client) -> ListTasksResult:
    return await client.session.send_request(ListTasksRequest(), ListTasksResult)


# -- the 2026-07-28 tasks extension (io.modelcontextprotocol/tasks, SEP-2663) -----------------
# The SDK (2.3) ships the extension mechanism (ClientExtension, ResultClaim) but no tasks
# extension: this is one, on that public surface only.


class ExtTaskFields(Result):
    """A task of the extension, as every one of its results carries it."""

    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class ExtTask(ExtTaskFields):
    """The extension's ``CreateTaskResult`` (``resultType: "task"``; no ``inputRequests``:
    the SDK reserves that name on a ``tools/call`` result)."""

    result_type: Literal["task"] = "task"


class ExtDetailed(ExtTaskFields):
    """``tasks/get``'s answer: the task, its result once completed, its questions while
    it waits for its caller."""

    result_type: str = "complete"
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class ExtTaskParams(RequestParams):
    task_id: Any


class ExtUpdateParams(ExtTaskParams):
    input_responses: dict[str, Any]


class ExtGet(Request[ExtTaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: ExtTaskParams
    name_param = "taskId"


class ExtCancel(Request[ExtTaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: ExtTaskParams
    name_param = "taskId"


class ExtUpdate(Request[ExtUpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: ExtUpdateParams
    name_param = "taskId"


TERMINAL = ("completed", "failed", "cancelled")


async def ext_get(session: ClientSession, task_id: Any) -> ExtDetailed:
    return await session.send_request(ExtGet(params=ExtTaskParams(task_id=task_id)), ExtDetailed)


async def ext_cancel(session: ClientSession, task_id: Any) -> None:
    await session.send_request(ExtCancel(params=ExtTaskParams(task_id=task_id)), EmptyResult)


async def ext_answer(session: ClientSession, task: ExtDetailed) -> None:
    """Answer a task's input requests through the session's own callbacks (its
    elicitation callback), with ``tasks/update``."""
    answers: dict[str, Any] = {}
    for name, raw in (task.input_requests or {}).items():
        request = TypeAdapter[InputRequest](InputRequest).validate_python(raw)
        context = ClientRequestContext(session=session, request_id=name)
        answered = await session.dispatch_input_request(context, request)
        if not isinstance(answered, ErrorData):
            answers[name] = answered.model_dump(by_alias=True, mode="json", exclude_none=True)
    if answers:
        params = ExtUpdateParams(task_id=task.task_id, input_responses=answers)
        await session.send_request(ExtUpdate(params=params), EmptyResult)


async def ext_settle(session: ClientSession, task_id: str) -> ExtDetailed:
    """Poll the task until it ends (the extension's way: ``tasks/get``), answering its
    questions as they come, each once."""
    answered: set[str] = set()
    while True:
        task = await ext_get(session, task_id)
        if task.status in TERMINAL:
            return task
        fresh = {k: v for k, v in (task.input_requests or {}).items() if k not in answered}
        if task.status == "input_required" and fresh:
            answered.update(fresh)
            await ext_answer(session, task.model_copy(update={"input_requests": fresh}))
        await anyio.sleep(min(task.poll_interval_ms or 100, 100) / 1000)


async def _resolve(created: ExtTask, context: ClaimContext) -> CallToolResult:
    task = await ext_settle(context.session, created.task_id)
    return CallToolResult.model_validate(task.result or {"content": [], "isError": True})


class TasksExtension(ClientExtension):
    """A client of the tasks extension: ``call_tool`` follows a task to its result
    (``session.call_tool(..., allow_claimed=True)`` hands the task itself out)."""

    identifier = "io.modelcontextprotocol/tasks"

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=ExtTask, resolve=_resolve),)


async def ext_task_call(
    client: Client, tool: str, arguments: dict[str, Any], meta: RequestParamsMeta | None = None
) -> ExtTask | CallToolResult:
    """A ``tools/call`` whose task (if the server made one) is handed out, not followed."""
    result = await client.session.call_tool(tool, arguments, meta=meta, allow_claimed=True)
    assert isinstance(result, ExtTask | CallToolResult), result
    return result
