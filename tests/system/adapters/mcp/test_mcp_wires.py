# ruff: noqa: E402
"""docs/guides/mcp.md's table, cell by cell: wire (2025-11-25, 2026-07-28) x transport
(stdio, streamable HTTP) x principal (none, given) → keys, cancel, tasks, quotas (and
restarts, in test_mcp_restarts.py), and the caller's questions. Each test is one column,
each parameter one row: the SDK's own client against ``tenure mcp`` as a real
subprocess, real worker processes, real PostgreSQL. Where a cell makes no promise, the
test asserts what the table says instead (the scope the reply names, the refusal)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.system.adapters.mcp.sdk import needs_sdk

needs_sdk()  # before the SDK's imports below, hence E402

from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, ElicitRequestParams, ElicitResult
from tests.support.waiting import wait_until_async
from tests.support.workers import WorkerGroup
from tests.system.adapters.mcp.helpers import (
    ExtTask,
    ext_cancel,
    ext_get,
    ext_task_call,
    in_flight,
    job_of,
    jobs,
    key,
    states,
    task_call,
    task_cancel,
    task_get,
    task_list,
    task_result,
    text,
    text_of,
)
from tests.system.adapters.mcp.wires import CELLS, Cell, deployed

from tenure.mcp import ANONYMOUS

pytestmark = pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)


async def test_keys(cell: Cell, workers: WorkerGroup, tenure_dsn: str, tmp_path: Path) -> None:
    """A repeated key is one job wherever the cell can say whose key it is: the principal's
    (from any connection), or the connection's (said in ``_meta``); where nothing can, a
    key is refused rather than run twice."""
    workers.spawn("w1", concurrency=4)
    with deployed(cell, tenure_dsn, tmp_path) as server:
        async with server.connect("alice") as first:
            if cell.stateless:
                with pytest.raises(MCPError, match="needs a principal") as refused:
                    await first.call_tool("echo", {"text": "x"}, meta=key("k-1"))
                assert refused.value.error.code == INVALID_PARAMS
                assert jobs(tenure_dsn) == []  # refused before anything was queued
                plain = await first.call_tool("echo", {"text": "x"})
                assert job_of(plain)["scope"] == "request" and text_of(plain) == "x"
                return
            made = await first.call_tool("echo", {"text": "x"}, meta=key("k-1"))
            same = await first.call_tool("echo", {"text": "x"}, meta=key("k-1"))
        async with server.connect("alice") as second:  # a new connection, a restarted host
            again = await second.call_tool("echo", {"text": "x"}, meta=key("k-1"))
        async with server.connect("bob") as other:
            theirs = await other.call_tool("echo", {"text": "y"}, meta=key("k-1"))
    assert job_of(made)["created"] is True and job_of(made)["scope"] == cell.scope
    assert job_of(same) == {**job_of(made), "created": False}
    assert job_of(theirs)["created"] is True and text_of(theirs) == "y"
    assert job_of(theirs)["id"] != job_of(made)["id"]  # another caller never gets mine
    if cell.principal:
        assert job_of(again) == {**job_of(made), "created": False}
        assert {r["tenant"] for r in jobs(tenure_dsn)} == {
            "mcp:principal:alice",
            "mcp:principal:bob",
        }
    else:  # the connection was the key's scope, and the reply said so
        assert job_of(again)["created"] is True and job_of(again)["scope"] == "session"
        assert {r["tenant"] for r in jobs(tenure_dsn)} == {ANONYMOUS}
    assert len(jobs(tenure_dsn)) == (2 if cell.principal else 3)


async def test_cancel(cell: Cell, workers: WorkerGroup, tenure_dsn: str, tmp_path: Path) -> None:
    """Cancelling a plain call (the SDK's client abandons it: ``notifications/cancelled``,
    or on the 2026-07-28 HTTP wire the closed response stream) cancels its job and stops
    the tool at once."""
    workers.spawn("w1")
    marker = tmp_path / "marker"
    with deployed(cell, tenure_dsn, tmp_path) as server:
        async with server.connect("alice") as client:
            async with in_flight(client, "wait_for_cancel", {"marker": str(marker)}) as call:
                await wait_until_async(lambda: "started" in text(marker), timeout=60)
                call.cancel()
            await wait_until_async(lambda: "stopped" in text(marker), timeout=60)
    assert states(tenure_dsn, "wait_for_cancel") == ["cancelled"], server.logs()


async def test_tasks(cell: Cell, workers: WorkerGroup, tenure_dsn: str, tmp_path: Path) -> None:
    """Tasks through the SDK client's public API: the core ones (2025-11-25: get, result,
    cancel, list) or the extension's (2026-07-28: get, cancel; ``call_tool`` follows them);
    a principal's from any connection, a connection's from it only, nobody else's ever;
    none where the caller could never come back (the plain answer instead)."""
    workers.spawn("w1", concurrency=4)
    marker = tmp_path / "marker"
    stop = {"marker": str(marker)}
    with deployed(cell, tenure_dsn, tmp_path) as server:
        if not cell.modern:
            async with server.connect("alice") as client:
                task = (await task_call(client, "echo", {"text": "later", "seconds": 0.3})).task
                result = await task_result(client, task.task_id)
                listed = [t.task_id for t in (await task_list(client)).tasks]
                stopping = (await task_call(client, "wait_for_cancel", stop)).task
                await wait_until_async(lambda: "started" in text(marker), timeout=60)
                cancelled = await task_cancel(client, stopping.task_id)
            async with server.connect("alice") as later:
                found = [(await task_get(later, task.task_id)).status] if cell.principal else []
                if not cell.principal:
                    with pytest.raises(MCPError, match="Task not found"):
                        await task_get(later, task.task_id)
            async with server.connect("bob") as other:
                with pytest.raises(MCPError, match="Task not found"):
                    await task_get(other, task.task_id)
                assert (await task_list(other)).tasks == []
            assert text_of(result) == "later" and task.task_id in listed
            assert cancelled.status == "cancelled"
            assert found == (["completed"] if cell.principal else [])
        else:
            async with server.connect("alice", tasks=True) as client:
                made = await ext_task_call(client, "echo", {"text": "later", "seconds": 0.3})
                followed = await client.call_tool("echo", {"text": "followed"})
                if cell.stateless:  # nobody could come back for it: the plain answer
                    assert isinstance(made, CallToolResult) and text_of(made) == "later"
                    assert text_of(followed) == "followed"
                    with pytest.raises(MCPError, match="Task not found"):
                        await ext_get(client.session, "1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
                    return
                assert isinstance(made, ExtTask) and made.status == "working", made
                halted = await ext_task_call(client, "wait_for_cancel", stop)
                assert isinstance(halted, ExtTask)
                await wait_until_async(lambda: "started" in text(marker), timeout=60)
                await ext_cancel(client.session, halted.task_id)
                await wait_until_async(
                    lambda: states(tenure_dsn, "wait_for_cancel") == ["cancelled"], timeout=60
                )
                ended = await ext_get(client.session, halted.task_id)
            async with server.connect("alice", tasks=True) as later:
                if cell.principal:
                    done = await wait_until_async_done(later, made.task_id)
                    assert done.result is not None and done.result["content"][0]["text"] == "later"
                else:
                    with pytest.raises(MCPError, match="Task not found"):
                        await ext_get(later.session, made.task_id)
            async with server.connect("bob", tasks=True) as other:
                with pytest.raises(MCPError, match="Task not found"):
                    await ext_get(other.session, made.task_id)
            assert text_of(followed) == "followed"  # call_tool followed its task to the end
            assert ended.status == "cancelled"
    assert "stopped" in text(marker)
    assert states(tenure_dsn, "wait_for_cancel") == ["cancelled"]


async def wait_until_async_done(client: Any, task_id: str) -> Any:
    """The extension task once it ended (polled, as its clients do)."""
    seen: list[Any] = []

    async def ended() -> bool:
        seen.append(await ext_get(client.session, task_id))
        return seen[-1].status in ("completed", "failed", "cancelled")

    await wait_until_async(ended, timeout=60, interval=0.1)
    return seen[-1]


async def test_quotas(cell: Cell, tenure_dsn: str, tmp_path: Path) -> None:
    """``app.quota("mcp:*", 1)``: a principal's quota holds across its connections (and
    stateless requests); callers without a principal share one, so opening connections
    gains nothing; another principal has its own. No worker runs: calls stay queued."""
    with deployed(cell, tenure_dsn, tmp_path, MCP_APP_QUOTA=1) as server:
        async with server.connect("alice") as first:
            async with in_flight(first, "echo", {"text": "queued"}) as call:
                await wait_until_async(lambda: states(tenure_dsn, "echo") == ["queued"], 60)
                async with server.connect("alice") as second:
                    refused = await second.call_tool("echo", {"text": "over"})
                async with server.connect("bob") as other:
                    if cell.principal:
                        async with in_flight(other, "echo", {"text": "bob's"}) as theirs:
                            await wait_until_async(lambda: len(jobs(tenure_dsn)) == 2, 60)
                            theirs.cancel()
                    else:
                        shared = await other.call_tool("echo", {"text": "over"})
                        assert shared.is_error, shared
                call.cancel()
    assert refused.is_error and refused.structured_content == {
        "error": {"code": "quota_exceeded"}
    }, refused
    assert len(jobs(tenure_dsn)) == (2 if cell.principal else 1)


async def test_questions(cell: Cell, workers: WorkerGroup, tenure_dsn: str, tmp_path: Path) -> None:
    """A question the tool declared for its caller reaches it on every cell, with its
    answer type's form, and the tool gets the typed answer (an elicitation request on
    2025-11-25, an input_required result the SDK's client answers by calling again on
    2026-07-28)."""
    workers.spawn("w1")
    asked: list[ElicitRequestParams] = []

    async def reply(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="accept", content={"approved": True, "size": "S"})

    with deployed(cell, tenure_dsn, tmp_path) as server:
        async with server.connect("alice", elicitation=reply) as client:
            result = await client.call_tool("confirm", {"item": "gloves"})
    assert result.structured_content == {"item": "gloves", "approved": True, "size": "S"}, (
        result,
        server.logs(),
    )
    assert [q.message for q in asked] == [
        'confirm asks you, its caller, at \'size\': {"item": "gloves"}'
    ]
    assert states(tenure_dsn, "confirm") == ["succeeded"]
