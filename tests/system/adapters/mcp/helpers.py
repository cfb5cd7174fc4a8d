"""The MCP adapter's test helpers: in-memory JSON-RPC connections, ``tenure mcp`` over stdio,
and reads of tenure's tables.

Test modules call `needs_sdk` before importing this: where the ``mcp`` extra is missing
they are skipped with the reason (CI installs it: the ``test`` extra includes it).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, cast

import anyio
import psycopg
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.session import ElicitationFnT
from mcp.server.lowlevel import Server
from mcp.shared.dispatcher import CallOptions
from mcp.shared.memory import create_client_server_memory_streams
from mcp_types import (
    CallToolRequest,
    CallToolRequestParams,
    CallToolResult,
    CancelTaskRequest,
    CancelTaskRequestParams,
    CancelTaskResult,
    CreateTaskResult,
    GetTaskPayloadRequest,
    GetTaskPayloadRequestParams,
    GetTaskRequest,
    GetTaskRequestParams,
    GetTaskResult,
    ListTasksRequest,
    ListTasksResult,
    RequestParamsMeta,
    TaskMetadata,
    TextContent,
)
from psycopg.rows import dict_row
from tests.support.workers import REPO_ROOT

from tenure.mcp import KEY_META

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
) -> Client:
    """A connection of the SDK's own client: 2026-07-28 (probed) or the 2025 handshake
    (``elicitation``: how it answers the server's questions)."""
    return Client(
        _memory(server, cut),
        mode="legacy" if era == "legacy" else "auto",
        elicitation_callback=elicitation,
    )


def stdio(
    dsn: str,
    errlog: Path,
    *args: str,
    env: dict[str, str] | None = None,
    legacy: bool = False,
) -> Client:
    """``python -m tenure mcp ...`` as a real subprocess, through the SDK's stdio client
    (``legacy``: on the 2025 handshake, where MCP tasks are)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tenure", "mcp", *args],
        cwd=str(REPO_ROOT),
        env={
            "TENURE_DSN": dsn,
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        },
    )
    return Client(_stdio(params, errlog), mode="legacy" if legacy else "auto")


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
    """A task-augmented ``tools/call`` (2025-11-25), sent through the SDK client's own session
    and transport. Raw: the SDK's ``call_tool`` parses only a ``CallToolResult``."""
    return CreateTaskResult.model_validate(await task_call_raw(client, tool, arguments, meta))


async def task_call_raw(
    client: Client, tool: str, arguments: dict[str, Any], meta: RequestParamsMeta | None = None
) -> dict[str, Any]:
    """`task_call`'s reply as it came, unparsed."""
    params = CallToolRequestParams(name=tool, arguments=arguments, task=TaskMetadata(), _meta=meta)
    data = CallToolRequest(params=params).model_dump(by_alias=True, mode="json", exclude_none=True)
    session = client.session
    opts: CallOptions = {}
    session._stamp(data, opts)
    return await session._dispatcher.send_raw_request("tools/call", data["params"], opts)


async def task_get(client: Client, task_id: str) -> GetTaskResult:
    request = GetTaskRequest(params=GetTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, GetTaskResult)


async def task_result(client: Client, task_id: str) -> CallToolResult:
    request = GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=task_id))
    return await client.session.send_request(request, CallToolResult)


async def task_cancel(client: Client, task_id: str) -> CancelTaskResult:
    request = CancelTaskRequest(params=CancelTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, CancelTaskResult)


async def task_list(client: Client) -> ListTasksResult:
    return await client.session.send_request(ListTasksRequest(), ListTasksResult)
