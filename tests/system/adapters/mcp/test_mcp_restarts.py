# ruff: noqa: E402
"""The table's restarts column, cell by cell: ``tenure mcp`` (a real subprocess) SIGKILLed
with a task in flight and started again. With a principal, the caller's next connection
finds the same task and job, its key makes no second job, and the receiver sees one
effect. Without one, the reply had said the key and task were the connection's
(``scope: session``), and after the restart they are gone, as the table says: the same key
makes a new job. On the stateless wire nothing names a call again: a call in flight is
lost to its caller while its job runs to its end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.system.adapters.mcp.sdk import needs_sdk

needs_sdk()  # before the SDK's imports below, hence E402

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError
from tests.integration.fence.helpers import Receiver, Receivers, count_rows
from tests.support.waiting import wait_until_async
from tests.support.workers import WorkerGroup
from tests.system.adapters.mcp.helpers import (
    ExtTask,
    ext_get,
    ext_task_call,
    job_of,
    jobs,
    key,
    states,
    task_call,
    task_get,
    task_result,
)
from tests.system.adapters.mcp.test_mcp_stdio import case_key
from tests.system.adapters.mcp.wires import CELLS, Cell, Deployment, deployed


async def start(client: Client, cell: Cell, arguments: dict[str, Any]) -> tuple[str, Any]:
    """A task of ``open_case`` under the key ``case-42``: its id and the reply."""
    if cell.modern:
        made = await ext_task_call(client, "open_case", arguments, key("case-42"))
        assert isinstance(made, ExtTask), made
        return made.task_id, made
    created = await task_call(client, "open_case", arguments, key("case-42"))
    return created.task.task_id, created


async def status(client: Client, cell: Cell, task_id: str) -> str:
    if cell.modern:
        return (await ext_get(client.session, task_id)).status
    return (await task_get(client, task_id)).status


async def outcome(client: Client, cell: Cell, task_id: str) -> dict[str, Any]:
    """The task's result once it ended (the revision's way: tasks/result, or polling)."""
    if not cell.modern:
        result: dict[str, Any] | None = (await task_result(client, task_id)).structured_content
        assert result is not None
        return result
    seen: list[Any] = []

    async def ended() -> bool:
        seen.append(await ext_get(client.session, task_id))
        return seen[-1].status in ("completed", "failed", "cancelled")

    await wait_until_async(ended, timeout=60, interval=0.1)
    assert seen[-1].result is not None, seen[-1]
    structured: dict[str, Any] = dict(seen[-1].result["structuredContent"])
    return structured


async def kill_once_running(server: Deployment, dsn: str) -> None:
    """SIGKILL the server once the call's job runs (its tool waits at the gate)."""
    await wait_until_async(lambda: states(dsn, "open_case") == ["running"], timeout=60)
    server.kill()


@pytest.fixture
def receiver(receivers: Receivers, workers: WorkerGroup) -> Receiver:
    """An example case service, and a worker whose ``open_case`` opens cases there."""
    started = receivers.start()
    workers.spawn("w1", env={"MCP_APP_RECEIVER": started.url}, concurrency=2)
    return started


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
async def test_restarts(
    cell: Cell, receiver: Receiver, receiver_dsn: str, tenure_dsn: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    arguments = {"title": "refund for order 42", "gate": str(gate)}
    with deployed(cell, tenure_dsn, tmp_path) as server:
        if cell.stateless:
            await _stateless(server, receiver_dsn, tenure_dsn, arguments, gate)
            return
        try:
            async with server.connect("alice", tasks=cell.modern) as before:
                task_id, first = await start(before, cell, arguments)
                await kill_once_running(server, tenure_dsn)
        except (MCPError, OSError, anyio.BrokenResourceError, ExceptionGroup):
            pass  # the connection died with its server, as it does
        server.restart()
        async with server.connect("alice", tasks=cell.modern) as after:
            if cell.principal:
                assert await status(after, cell, task_id) == "working", server.logs()
                again_id, again = await start(after, cell, arguments)
            else:
                with pytest.raises(MCPError, match="Task not found"):
                    await status(after, cell, task_id)
                again_id, again = await start(after, cell, arguments)
            gate.touch()
            result = await outcome(after, cell, again_id)
    assert job_of(first)["scope"] == cell.scope  # what the first reply promised
    found = jobs(tenure_dsn, "open_case")
    if cell.principal:  # the same task, the same job, one effect
        assert again_id == task_id and job_of(again)["id"] == job_of(first)["id"]
        assert job_of(again)["created"] is False
        assert [r["id"] for r in found] == [job_of(first)["id"]]
        assert result["attempt"] == 1
        assert count_rows(receiver_dsn, "example_cases", case_key(found[0]["id"])) == 1
    else:  # the connection's key went with it: a new job, as its reply had said
        assert job_of(again)["created"] is True and again_id != task_id
        assert len(found) == 2
    await wait_until_async(lambda: set(states(tenure_dsn, "open_case")) == {"succeeded"}, 60)


async def _stateless(
    server: Deployment, receiver_dsn: str, tenure_dsn: str, arguments: dict[str, Any], gate: Path
) -> None:
    """No principal on the 2026-07-28 HTTP wire: no key, no task; a plain call in flight
    when the server dies gets no answer, while its job runs on to one effect."""
    async with server.connect("alice", tasks=True) as client:
        with pytest.raises(MCPError, match="needs a principal"):
            await client.call_tool("open_case", arguments, meta=key("case-42"))
    answers: list[Any] = []
    try:
        async with server.connect("alice", tasks=True) as client:

            async def call() -> None:
                answers.append(await client.call_tool("open_case", arguments))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await kill_once_running(server, tenure_dsn)
                tg.cancel_scope.cancel()  # its server is gone: nothing can answer it now
    except Exception:
        pass
    server.restart()
    gate.touch()
    await wait_until_async(lambda: states(tenure_dsn, "open_case") == ["succeeded"], 60)
    [row] = jobs(tenure_dsn, "open_case")
    assert count_rows(receiver_dsn, "example_cases", case_key(row["id"])) == 1
    assert answers == []
