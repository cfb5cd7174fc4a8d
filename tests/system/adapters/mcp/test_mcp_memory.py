# ruff: noqa: E402
"""`tenure.mcp` driven by the SDK's own client, in memory (JSON-RPC framed), on both protocol
eras the SDK speaks, against real PostgreSQL and real worker processes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.system.adapters.mcp.sdk import needs_sdk

needs_sdk()  # before the SDK's imports below, hence E402

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CancelledNotification
from mcp_types import CancelledNotificationParams as Cancel
from tests.support.waiting import wait_until_async
from tests.support.workers import WorkerGroup, WorkerProcess
from tests.system.adapters.mcp.helpers import (
    ERAS,
    Era,
    in_flight,
    job_of,
    jobs,
    key,
    memory_client,
    text,
    text_of,
)

from tenure import App
from tenure.mcp import ANONYMOUS, server


async def test_the_tools_are_listed_with_the_schemas_their_signatures_give(app: App) -> None:
    async with Client(server(app)) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(listed) == set(app.tools)
    for name, tool in listed.items():
        schema = app.registry.tool_schema(name)
        assert tool.description == schema["description"]
        assert tool.input_schema == schema["parameters"]
        assert tool.output_schema == app.registry.output_schema(name)
        assert tool.execution is None  # no task support is claimed
    # A docstring's Args: section: the parameters' descriptions, out of the description.
    case = listed["open_case"]
    assert case.input_schema["properties"]["gate"]["description"].startswith("A file to wait")
    assert "Args:" not in (case.description or "")
    assert listed["count"].output_schema == {
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
    }


@pytest.mark.parametrize("era", ERAS)
async def test_a_call_runs_as_a_job_of_its_session_and_returns_the_result(
    app: App, worker: WorkerProcess, tenure_dsn: str, era: Era
) -> None:
    async with memory_client(server(app), era) as client:
        result = await client.call_tool("echo", {"text": "hello"})
    assert not result.is_error, result
    assert text_of(result) == "hello"
    job = job_of(result)
    assert job["created"] is True and job["state"] == "succeeded" and job["attempts"] == 1
    assert job["scope"] == "session"  # no principal: the connection is the key's scope
    [row] = jobs(tenure_dsn, "echo")
    assert row["id"] == job["id"]
    assert row["tenant"] == ANONYMOUS
    assert re.fullmatch(r"mcp:[0-9a-f]{32}:call:\d+", row["idempotency_key"])  # connection, id


@pytest.mark.parametrize("era", ERAS)
async def test_a_repeated_client_key_returns_the_same_job_without_running_it_again(
    app: App, worker: WorkerProcess, tenure_dsn: str, era: Era
) -> None:
    async with memory_client(server(app), era) as client:
        first = await client.call_tool("count", {"steps": 1, "pause": 0.01}, meta=key("k-1"))
        again = await client.call_tool("count", {"steps": 1, "pause": 0.01}, meta=key("k-1"))
        other = await client.call_tool("count", {"steps": 2, "pause": 0.01}, meta=key("k-1"))
    assert job_of(first)["created"] is True
    assert job_of(again) == {**job_of(first), "created": False}
    assert again.structured_content == first.structured_content == {"result": 1}
    [row] = jobs(tenure_dsn, "count")
    assert re.fullmatch(r"mcp:[0-9a-f]{32}:key:k-1", row["idempotency_key"])
    # The same key with other arguments names another call: refused, nothing queued.
    assert other.is_error and other.structured_content == {
        "error": {"code": "idempotency_conflict"}
    }


@pytest.mark.parametrize("era", ERAS)
async def test_two_sessions_can_neither_see_nor_reuse_nor_cancel_each_others_jobs(
    app: App, workers: WorkerGroup, tenure_dsn: str, tmp_path: Path, era: Era
) -> None:
    workers.spawn("w1", concurrency=4)
    srv = server(app)
    marker = tmp_path / "a.marker"
    async with memory_client(srv, era) as a, memory_client(srv, era) as b:
        mine = await a.call_tool("echo", {"text": "a"}, meta=key("shared"))
        theirs = await b.call_tool("echo", {"text": "b"}, meta=key("shared"))
        assert job_of(theirs)["id"] != job_of(mine)["id"]
        assert job_of(theirs)["created"] is True  # A's job under that key is not B's
        assert text_of(theirs) == "b"
        # Nor can B stop A's call by naming A's request id.
        async with in_flight(a, "wait_for_cancel", {"marker": str(marker)}) as call_a:
            await wait_until_async(lambda: "started" in text(marker), timeout=30)
            [running] = jobs(tenure_dsn, "wait_for_cancel")
            for request_id in range(0, 20):  # whatever id A's call has, B names it
                await b.session.send_notification(
                    CancelledNotification(params=Cancel(request_id=request_id))
                )
            await b.call_tool("echo", {"text": "after"})  # B's notifications were handled
            assert jobs(tenure_dsn, "wait_for_cancel")[0]["state"] == "running"
            assert "stopped" not in text(marker)
            call_a.cancel()  # A cancels its own call
        await wait_until_async(
            lambda: jobs(tenure_dsn, "wait_for_cancel")[0]["state"] == "cancelled", timeout=30
        )
    keys = {r["idempotency_key"].split(":")[1] for r in jobs(tenure_dsn, "echo")}
    assert len(keys) == 2 and running["idempotency_key"].split(":")[1] in keys


@pytest.mark.parametrize("era", ERAS)
async def test_one_principals_connections_share_its_keys_and_another_principal_has_its_own(
    app: App, worker: WorkerProcess, tenure_dsn: str, era: Era
) -> None:
    """``server(app, principal=...)``: stdio's ``--principal``. The same key from a second
    connection (a restarted host) is the same job; another principal's is its own."""
    async with memory_client(server(app, principal="alice"), era) as first_connection:
        first = await first_connection.call_tool("echo", {"text": "a"}, meta=key("k"))
    async with memory_client(server(app, principal="alice"), era) as second_connection:
        again = await second_connection.call_tool("echo", {"text": "a"}, meta=key("k"))
    async with memory_client(server(app, principal="bob"), era) as bobs:
        theirs = await bobs.call_tool("echo", {"text": "b"}, meta=key("k"))
    assert job_of(first)["scope"] == "principal"
    assert job_of(again) == {**job_of(first), "created": False}
    assert job_of(theirs)["created"] is True and text_of(theirs) == "b"
    assert {(r["tenant"], r["idempotency_key"]) for r in jobs(tenure_dsn, "echo")} == {
        ("mcp:principal:alice", "mcp:key:k"),
        ("mcp:principal:bob", "mcp:key:k"),
    }


@pytest.mark.parametrize("era", ERAS)
async def test_cancelling_the_call_cancels_the_job_and_stops_the_tool_at_once(
    app: App, worker: WorkerProcess, tenure_dsn: str, tmp_path: Path, era: Era
) -> None:
    marker = tmp_path / "marker"
    async with memory_client(server(app), era) as client:
        async with in_flight(client, "wait_for_cancel", {"marker": str(marker)}) as call:
            await wait_until_async(lambda: "started" in text(marker), timeout=30)
            call.cancel()
        await wait_until_async(lambda: "stopped" in text(marker), timeout=30)
    [row] = jobs(tenure_dsn, "wait_for_cancel")
    assert row["state"] == "cancelled"


@pytest.mark.parametrize("era", ERAS)
async def test_a_connection_that_drops_leaves_its_job_running_to_the_end(
    app: App, worker: WorkerProcess, tenure_dsn: str, era: Era
) -> None:
    """Only an explicit cancel stops a job: a dropped link (no cancel said) leaves it be."""
    cut = anyio.Event()
    failures: list[BaseException] = []
    async with memory_client(server(app), era, cut=cut) as client:

        async def call() -> None:
            try:
                await client.call_tool("echo", {"text": "x", "seconds": 1.0})
            except MCPError as exc:  # the connection closed under the call
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await wait_until_async(
                lambda: [r["state"] for r in jobs(tenure_dsn, "echo")] == ["running"], timeout=30
            )
            cut.set()
    await wait_until_async(lambda: jobs(tenure_dsn, "echo")[0]["state"] != "running", timeout=30)
    assert jobs(tenure_dsn, "echo")[0]["state"] == "succeeded"
    assert len(failures) == 1, failures


@pytest.mark.parametrize("era", ERAS)
async def test_the_tools_progress_arrives_as_progress_notifications(
    app: App, worker: WorkerProcess, era: Era
) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with memory_client(server(app), era) as client:
        result = await client.call_tool("count", {"steps": 4}, progress_callback=on_progress)
    assert result.structured_content == {"result": 4} and text_of(result) == "4"
    assert len(seen) >= 2, seen
    values = [p for p, _, _ in seen]
    assert values == sorted(set(values)), seen  # only ever increasing
    assert seen[-1] == (4.0, 4.0, "step 4"), seen
    assert all(total == 4.0 and message == f"step {p:g}" for p, total, message in seen), seen


async def test_a_failed_job_is_a_tool_error_with_its_code_and_never_its_internals(
    app: App, worker: WorkerProcess
) -> None:
    async with memory_client(server(app)) as client:
        told = await client.call_tool("refuse", {"reason": "customer 7 is closed"})
        hidden = await client.call_tool("refuse", {"reason": "pw=hunter2", "permanent": False})
    assert told.is_error
    assert told.structured_content == {
        "error": {"code": "permanent", "attempts": 1, "message": "customer 7 is closed"}
    }
    assert "customer 7 is closed" in text_of(told)
    assert hidden.is_error
    assert hidden.structured_content == {"error": {"code": "error", "attempts": 2}}
    assert "hunter2" not in hidden.model_dump_json()
    assert "Traceback" not in hidden.model_dump_json()


async def test_arguments_that_do_not_fit_list_every_problem_and_queue_nothing(
    app: App, tenure_dsn: str
) -> None:
    async with memory_client(server(app)) as client:
        result = await client.call_tool("count", {"steps": "3", "pause": [], "extra": 1})
    assert result.is_error
    error = result.structured_content["error"]
    assert error["code"] == "invalid_arguments"
    assert len(error["problems"]) == 3, error
    assert all(p.split(":")[0] in text_of(result) for p in error["problems"])
    assert jobs(tenure_dsn) == []


async def test_an_unknown_tool_or_a_malformed_key_is_a_protocol_error_that_queues_nothing(
    app: App, tenure_dsn: str
) -> None:
    async with memory_client(server(app)) as client:
        with pytest.raises(MCPError, match="unknown tool 'nope'") as unknown:
            await client.call_tool("nope", {})
        with pytest.raises(MCPError, match="idempotencyKey") as malformed:
            await client.call_tool("echo", {"text": "x"}, meta=key(42))
    assert unknown.value.error.code == malformed.value.error.code == INVALID_PARAMS
    assert jobs(tenure_dsn) == []


async def test_lax_arguments_take_a_models_trivial_slip_that_strict_ones_refuse(
    app: App, worker: WorkerProcess, tenure_dsn: str
) -> None:
    async with memory_client(server(app, lax_arguments=True)) as lax:
        counted = await lax.call_tool("count", {"steps": "2", "pause": "0.01"})
        still = await lax.call_tool("count", {"steps": "two"})
    async with memory_client(server(app)) as strict:
        refused = await strict.call_tool("count", {"steps": "2"})
    assert counted.structured_content == {"result": 2}, counted
    assert still.is_error and still.structured_content is not None
    assert still.structured_content["error"]["code"] == "invalid_arguments"
    assert refused.is_error
    assert [r["state"] for r in jobs(tenure_dsn, "count")] == ["succeeded"]
