# ruff: noqa: E402
"""MCP tasks (2025-11-25) over `tenure.mcp`, driven by the SDK's own client on the handshake
wire, in memory and over stdio, against real PostgreSQL and real worker processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.system.adapters.mcp.sdk import needs_sdk

needs_sdk()  # before the SDK's imports below, hence E402

import anyio
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    TextContent,
)
from tests.integration.fence.helpers import Receivers, count_rows
from tests.support.waiting import wait_until_async
from tests.support.workers import WorkerGroup, WorkerProcess
from tests.system.adapters.mcp.helpers import (
    ext_get,
    jobs,
    key,
    memory_client,
    rows,
    stdio,
    task_call,
    task_call_plain,
    task_cancel,
    task_get,
    task_list,
    task_result,
    text,
    text_of,
)
from tests.system.adapters.mcp.test_mcp_stdio import assert_taken_over_once, case_key

from tenure import App, Conflict
from tenure._cli import main
from tenure.mcp import ANONYMOUS, META_KEY, TASKS_EXTENSION, TASKS_REVISION, server

RELATED_TASK = "io.modelcontextprotocol/related-task"
APP = "tests.apps.mcp_app:app"


def progress_of(dsn: str) -> object:
    [row] = rows(dsn, "SELECT progress FROM tenure_jobs")
    return row["progress"]


def state_of(dsn: str, tool: str) -> str:
    found = jobs(dsn, tool)
    return str(found[0]["state"]) if found else ""


async def test_tasks_are_offered_on_each_revision_in_its_own_way(app: App) -> None:
    """2025-11-25: the core capability and tools' ``execution``; 2026-07-28: the tasks
    extension, whose requests are refused as the revision says to a client that does not
    declare it, and which has no ``tasks/list`` or ``tasks/result``."""
    async with memory_client(server(app), "legacy") as legacy:
        assert legacy.protocol_version == TASKS_REVISION
        offered = legacy.server_capabilities.tasks
        assert offered is not None and offered.list is not None and offered.cancel is not None
        assert offered.requests is not None and offered.requests.tools is not None
        assert offered.requests.tools.call is not None
        tools = (await legacy.list_tools()).tools
        assert {t.execution.task_support for t in tools if t.execution} == {"optional"}
        assert len(tools) == len(app.tools)
    async with memory_client(server(app), "modern") as modern:
        assert modern.server_capabilities.tasks is None
        assert TASKS_EXTENSION in (modern.server_capabilities.extensions or {})
        assert all(t.execution is None for t in (await modern.list_tools()).tools)
        with pytest.raises(MCPError) as undeclared:
            await ext_get(modern.session, "1.x")
    assert undeclared.value.error.code == -32021  # Missing required client capability
    assert undeclared.value.error.data == {
        "requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}
    }
    async with memory_client(server(app), "modern", tasks=True) as declared:
        for absent in (task_list, lambda c: task_result(c, "1.x")):
            with pytest.raises(MCPError) as missing:
                await absent(declared)
            assert missing.value.error.code == -32601  # not in the extension


async def test_on_the_2026_wire_a_task_field_without_the_extension_takes_the_plain_path(
    app: App, worker: WorkerProcess
) -> None:
    async with memory_client(server(app), "modern") as client:
        result = await task_call_plain(client, "echo", {"text": "plain"})
    assert result.content == [TextContent(type="text", text="plain")]
    assert result.meta is not None and result.meta[META_KEY]["state"] == "succeeded"


async def test_a_task_call_that_does_not_fit_is_refused_with_every_problem_and_queues_nothing(
    app: App, tenure_dsn: str
) -> None:
    async with memory_client(server(app), "legacy") as client:
        with pytest.raises(MCPError, match="invalid arguments for count") as refused:
            await task_call(client, "count", {"steps": "3", "extra": 1})
        with pytest.raises(MCPError, match="unknown tool"):
            await task_call(client, "nope", {})
    assert refused.value.error.code == INVALID_PARAMS
    data = refused.value.error.data
    assert data["code"] == "invalid_arguments" and len(data["problems"]) == 2, data
    assert jobs(tenure_dsn) == []


async def test_a_task_call_answers_at_once_and_tasks_result_gives_the_tools_result(
    app: App, worker: WorkerProcess, tenure_dsn: str
) -> None:
    async with memory_client(server(app), "legacy") as client:
        created = (await task_call(client, "count", {"steps": 2})).task
        assert created.status == "working"
        job_id, _, mac = created.task_id.partition(".")
        assert len(mac) == 32, created.task_id
        assert created.ttl == round(app.registry.retain * 1000)
        assert created.poll_interval == 1000
        result = await task_result(client, created.task_id)
        done = await task_get(client, created.task_id)
    assert not result.is_error, result
    assert text_of(result) == "2"
    assert result.meta is not None
    assert result.meta[RELATED_TASK] == {"taskId": created.task_id}
    assert result.meta[META_KEY]["id"] == int(job_id)
    assert done.status == "completed" and done.task_id == created.task_id
    assert done.created_at == created.created_at and done.last_updated_at >= created.created_at
    [row] = jobs(tenure_dsn, "count")
    assert row["id"] == int(job_id) and row["state"] == "succeeded"
    assert row["tenant"] == ANONYMOUS  # no principal: the connection is the task's scope


async def test_a_running_task_says_its_attempt_and_lease_and_a_repeated_key_is_the_same_task(
    app: App, worker: WorkerProcess, tenure_dsn: str, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    arguments = {"marker": str(marker), "third": True}
    async with memory_client(server(app), "legacy") as client:
        first = await task_call(client, "wait_for_cancel", arguments, key("t-1"))
        again = await task_call(client, "wait_for_cancel", arguments, key("t-1"))
        await wait_until_async(lambda: progress_of(tenure_dsn) is not None, timeout=30)
        running = await task_get(client, first.task.task_id)
        await task_cancel(client, first.task.task_id)
    assert again.task.task_id == first.task.task_id
    assert again.meta is not None and again.meta[META_KEY]["created"] is False
    assert running.status == "working"
    assert running.status_message is not None
    assert running.status_message.startswith("attempt 1 of 1, lease until "), running
    assert running.status_message.endswith("; progress 1/3: one third"), running
    assert len(jobs(tenure_dsn, "wait_for_cancel")) == 1


async def test_tasks_cancel_stops_the_tool_at_once_and_a_second_cancel_is_refused(
    app: App, worker: WorkerProcess, tenure_dsn: str, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    async with memory_client(server(app), "legacy") as client:
        task = (await task_call(client, "wait_for_cancel", {"marker": str(marker)})).task
        await wait_until_async(lambda: "started" in text(marker), timeout=30)
        cancelled = await task_cancel(client, task.task_id)
        await wait_until_async(lambda: "stopped" in text(marker), timeout=30)
        result = await task_result(client, task.task_id)
        with pytest.raises(MCPError, match="terminal status 'cancelled'") as again:
            await task_cancel(client, task.task_id)
    assert cancelled.status == "cancelled"
    assert again.value.error.code == INVALID_PARAMS
    assert result.is_error and result.structured_content is not None
    assert result.structured_content["error"]["code"] == "cancelled"
    assert state_of(tenure_dsn, "wait_for_cancel") == "cancelled"


async def test_another_session_can_neither_get_list_wait_for_nor_cancel_a_task(
    app: App, worker: WorkerProcess, tenure_dsn: str, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    srv = server(app)
    async with memory_client(srv, "legacy") as a, memory_client(srv, "legacy") as b:
        task = (await task_call(a, "wait_for_cancel", {"marker": str(marker)})).task
        await wait_until_async(lambda: "started" in text(marker), timeout=30)
        job_id, _, mac = task.task_id.partition(".")
        forged = f"{job_id}.{'A' * len(mac)}"
        for attempt in (task_get, task_result, task_cancel):
            for task_id in (task.task_id, forged, job_id, "nonsense"):
                with pytest.raises(MCPError, match="Task not found") as refused:
                    await attempt(b, task_id)
                assert refused.value.error.code == INVALID_PARAMS
        with pytest.raises(MCPError, match="Task not found"):
            await task_get(a, forged)  # the owner too: a wrong MAC names no task
        theirs = await task_list(b)
        mine = await task_list(a)
        assert state_of(tenure_dsn, "wait_for_cancel") == "running"  # B's cancels did nothing
        await task_cancel(a, task.task_id)
    assert theirs.tasks == []
    assert [t.task_id for t in mine.tasks] == [task.task_id]
    assert state_of(tenure_dsn, "wait_for_cancel") == "cancelled"


async def test_a_task_waiting_for_a_person_is_working_and_says_for_whom_never_asking(
    app: App,
    worker: WorkerProcess,
    tenure_dsn: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``approve`` waits for whoever holds its token: the caller is told so, never asked,
    never shown the token or the request, and cannot answer it itself (the operator's
    ``tenure jobs show`` says who may)."""
    marker = tmp_path / "token"
    asked: list[ElicitRequestParams] = []

    async def reply(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="accept", content={"answer": "approved by the agent"})

    async with memory_client(server(app), "legacy", elicitation=reply) as client:
        task = (await task_call(client, "approve", {"amount": 250, "marker": str(marker)})).task
        await wait_until_async(lambda: state_of(tenure_dsn, "approve") == "waiting", timeout=30)
        waiting = await task_get(client, task.task_id)
        [row] = jobs(tenure_dsn, "approve")
        with pytest.raises(Conflict, match="for whoever holds its token"):
            await app.answer_waitpoint(
                answer="yes", job_id=row["id"], name="approval", tenant=row["tenant"]
            )
        monkeypatch.setenv("TENURE_DSN", tenure_dsn)
        assert await anyio.to_thread.run_sync(main, ["jobs", "show", str(row["id"])]) == 0
        assert "its token's holder" in capsys.readouterr().out
        token = text(marker).strip()
        await app.answer_waitpoint(token, "approved by Ann")
        result = await task_result(client, task.task_id)
        done = await task_get(client, task.task_id)
    assert waiting.status == "working"
    assert waiting.status_message is not None
    assert "'approval' for whoever holds its token" in waiting.status_message, waiting
    assert token not in waiting.model_dump_json() and "250" not in waiting.model_dump_json()
    assert asked == []
    assert not result.is_error, result
    assert text_of(result) == "250: approved by Ann"
    assert done.status == "completed"


async def test_a_question_for_its_caller_is_asked_with_the_answers_form_and_the_tool_gets_it_typed(
    app: App, worker: WorkerProcess, tenure_dsn: str
) -> None:
    asked: list[ElicitRequestParams] = []

    async def reply(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="accept", content={"approved": True, "size": "M"})

    async with memory_client(server(app), "legacy", elicitation=reply) as client:
        task = (await task_call(client, "confirm", {"item": "boots"})).task
        await wait_until_async(lambda: state_of(tenure_dsn, "confirm") == "waiting", timeout=30)
        waiting = await task_get(client, task.task_id)
        result = await task_result(client, task.task_id)
    assert waiting.status == "input_required" and waiting.poll_interval == 5000
    assert waiting.status_message is not None and "your answer" in waiting.status_message
    assert not result.is_error, result
    assert result.structured_content == {"item": "boots", "approved": True, "size": "M"}
    [question] = asked
    assert isinstance(question, ElicitRequestFormParams)
    assert question.message == 'confirm asks you, its caller, at \'size\': {"item": "boots"}'
    assert question.requested_schema == {
        "type": "object",
        "properties": {
            "approved": {"title": "Approved", "type": "boolean"},
            "size": {"enum": ["S", "M", "L"], "title": "Size", "type": "string"},
            "note": {"title": "Note", "type": "string"},
        },
        "required": ["approved", "size"],
    }
    assert question.meta is not None
    assert question.meta.get(RELATED_TASK) == {"taskId": task.task_id}


async def test_a_caller_that_declines_leaves_its_question_open_and_is_not_asked_twice(
    app: App, worker: WorkerProcess, tenure_dsn: str
) -> None:
    """Declined: the task waits on (the caller may answer later, by calling again)."""
    declined: list[str] = []

    async def decline(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        declined.append(params.message)
        return ElicitResult(action="decline")

    async with memory_client(server(app), "legacy", elicitation=decline) as client:
        task = (await task_call(client, "confirm", {"item": "hat"})).task
        async with anyio.create_task_group() as tg:
            tg.start_soon(task_result, client, task.task_id)
            await wait_until_async(lambda: len(declined) == 1, timeout=30)
            assert (await task_get(client, task.task_id)).status == "input_required"
            tg.cancel_scope.cancel()
        [row] = jobs(tenure_dsn, "confirm")
        await app.answer_waitpoint(
            answer={"approved": False, "size": "S"},
            job_id=row["id"],
            name="size",
            tenant=row["tenant"],
        )
        result = await task_result(client, task.task_id)
    assert result.structured_content == {"item": "hat", "approved": False, "size": "S"}
    assert len(declined) == 1  # asked once per waitpoint and request, not again


async def test_a_worker_sigkilled_mid_task_is_replaced_and_the_task_has_one_result_and_one_case(
    app: App,
    workers: WorkerGroup,
    receivers: Receivers,
    receiver_dsn: str,
    tenure_dsn: str,
) -> None:
    receiver = receivers.start()
    env = {"MCP_APP_RECEIVER": receiver.url}
    w1 = workers.spawn("w1", env=env)

    def opened() -> bool:
        found = jobs(tenure_dsn, "open_case")
        if not found or found[0]["state"] != "running":
            return False
        return count_rows(receiver_dsn, "example_cases", case_key(found[0]["id"])) == 1

    async with memory_client(server(app), "legacy") as client:
        arguments = {"title": "refund for order 42", "hold": True}
        task = (await task_call(client, "open_case", arguments)).task
        await wait_until_async(opened, timeout=60, message="the first attempt never opened")
        [first] = jobs(tenure_dsn, "open_case")
        assert w1.kill() == -9
        workers.spawn("w2", env=env)
        result = await task_result(client, task.task_id)
        listed = await task_list(client)
    assert_taken_over_once(result, first, receiver, receiver_dsn, tenure_dsn, workers.logs())
    assert [t.status for t in listed.tasks] == ["completed"]


async def test_over_stdio_a_task_call_completes(
    worker: WorkerProcess, tenure_dsn: str, tmp_path: Path
) -> None:
    async with stdio(tenure_dsn, tmp_path / "mcp.err", APP, legacy=True) as client:
        task = (await task_call(client, "echo", {"text": "over stdio"})).task
        result = await task_result(client, task.task_id)
        done = await task_get(client, task.task_id)
    assert not result.is_error, (result, (tmp_path / "mcp.err").read_text())
    assert text_of(result) == "over stdio"
    assert done.status == "completed"
    assert state_of(tenure_dsn, "echo") == "succeeded"


async def test_tasks_result_relays_the_jobs_progress_on_its_own_request(
    app: App, worker: WorkerProcess
) -> None:
    """2025-11-25 lets a task's progress travel as ``notifications/progress``: the client
    waiting in ``tasks/result`` with a progress callback hears the tool's reports."""
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with memory_client(server(app), "legacy") as client:
        task = (await task_call(client, "count", {"steps": 3})).task
        result = await task_result(client, task.task_id, progress=on_progress)
    assert result.structured_content == {"result": 3}
    assert seen and seen[-1] == (3.0, 3.0, "step 3"), seen
    assert [p for p, _, _ in seen] == sorted({p for p, _, _ in seen})
