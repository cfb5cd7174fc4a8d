# ruff: noqa: E402
"""``tenure mcp`` as a real subprocess on stdio, driven by the SDK's own stdio client, with
real worker processes and the example case service as the receiver of side effects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.system.adapters.mcp.sdk import needs_sdk

needs_sdk()  # before the SDK's imports below, hence E402

import anyio
from mcp_types import CallToolResult
from tests.apps.fence_app import case_key as fence_case_key
from tests.integration.fence.helpers import Receiver, Receivers, count_rows
from tests.support.waiting import wait_until_async
from tests.support.workers import WorkerGroup, WorkerProcess
from tests.system.adapters.mcp.helpers import jobs, key, stdio, text_of

from tenure.mcp import META_KEY

APP = "tests.apps.mcp_app:app"


def case_key(job_id: int) -> str:
    """The key ``open_case`` sends the receiver (``ctx.http_auth("open_case")``)."""
    return fence_case_key(job_id).replace("create_case", "open_case")


def assert_taken_over_once(
    result: CallToolResult,
    first: dict[str, Any],
    receiver: Receiver,
    receiver_dsn: str,
    tenure_dsn: str,
    logs: str,
) -> None:
    """``open_case``, whose first attempt (``first``: its job row then) opened the case and
    died: one result, from the second attempt under a higher token, and one case."""
    assert not result.is_error, (result, logs)
    structured = result.structured_content or {}
    assert structured["attempt"] == 2 and isinstance(structured["case_id"], int), structured
    assert count_rows(receiver_dsn, "example_cases", case_key(first["id"])) == 1
    outcomes = [d["decision"] for d in receiver.decisions(case_key(first["id"]))]
    assert outcomes == ["accepted", "replayed"], outcomes
    [row] = jobs(tenure_dsn, "open_case")
    assert row["state"] == "succeeded" and row["attempt"] == 2 and row["token"] > first["token"]


async def test_over_stdio_a_call_completes_with_its_progress(
    worker: WorkerProcess, tenure_dsn: str, tmp_path: Path
) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with stdio(tenure_dsn, tmp_path / "mcp.err", APP, "--principal", "agent") as client:
        result = await client.call_tool(
            "count", {"steps": 3}, progress_callback=on_progress, meta=key("stdio-1")
        )
    assert not result.is_error, (result, (tmp_path / "mcp.err").read_text())
    assert text_of(result) == "3"
    assert seen and seen == sorted(set(seen)) and seen[-1] == 3.0, seen
    [row] = jobs(tenure_dsn, "count")
    assert row["idempotency_key"] == "mcp:key:stdio-1" and row["state"] == "succeeded"
    assert row["tenant"] == "mcp:principal:agent"


async def test_a_worker_sigkilled_mid_call_is_replaced_and_the_client_gets_one_result_and_one_case(
    workers: WorkerGroup,
    receivers: Receivers,
    receiver_dsn: str,
    tenure_dsn: str,
    tmp_path: Path,
) -> None:
    """The worst moment: the case is opened, the worker dies before it commits. Another
    worker takes the job over, repeats the request under the same key (the receiver
    replays it) and commits; the client, waiting all along, gets exactly one answer."""
    receiver = receivers.start()
    env = {"MCP_APP_RECEIVER": receiver.url}
    w1 = workers.spawn("w1", env=env)
    results: list[CallToolResult] = []
    job: dict[str, Any] = {}

    def opened() -> bool:
        found = jobs(tenure_dsn, "open_case")
        if not found or found[0]["state"] != "running":
            return False
        job.update(found[0])
        return count_rows(receiver_dsn, "example_cases", case_key(job["id"])) == 1

    async with stdio(tenure_dsn, tmp_path / "mcp.err", APP) as client:

        async def call() -> None:
            arguments = {"title": "refund for order 42", "hold": True}
            results.append(await client.call_tool("open_case", arguments, meta=key("case-42")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await wait_until_async(opened, timeout=60, message="the first attempt never opened")
            assert w1.kill() == -9
            workers.spawn("w2", env=env)
    [result] = results
    assert_taken_over_once(result, job, receiver, receiver_dsn, tenure_dsn, workers.logs())
    assert result.meta is not None and result.meta[META_KEY]["id"] == job["id"]


async def test_the_example_server_runs_as_the_readme_says_and_a_restarted_agent_finds_its_job(
    receivers: Receivers, receiver_dsn: str, tenure_dsn: str, tmp_path: Path
) -> None:
    """The README's command, ``tenure mcp tenure.examples.mcp_server:app --worker
    --principal support-agent``: one command, a real case. Then the agent is restarted
    (it lost the answer: a new host process, so a new server process and connection)
    and asks again under the same key: it finds the job it started; no second case."""
    receiver = receivers.start()
    answers: list[CallToolResult] = []
    seen: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    for _run in ("first", "restarted"):
        async with stdio(
            tenure_dsn,
            tmp_path / "example.err",
            "tenure.examples.mcp_server:app",
            "--worker",
            "--principal",
            "support-agent",
            env={"CASE_SERVICE_URL": receiver.url},
        ) as client:
            [tool] = (await client.list_tools()).tools
            answers.append(
                await client.call_tool(
                    tool.name,
                    {"customer_id": "c-7", "summary": "charged twice"},
                    progress_callback=on_progress,
                    meta=key("chat-1:call-1"),
                )
            )
    first, again = answers
    assert not first.is_error, (first, (tmp_path / "example.err").read_text())
    assert first.structured_content is not None
    assert first.structured_content["customer_id"] == "c-7"
    assert seen and seen[-1] == "case opened", seen
    assert again.structured_content == first.structured_content
    assert again.meta is not None and first.meta is not None
    assert again.meta[META_KEY] == {**first.meta[META_KEY], "created": False}
    assert first.meta[META_KEY]["scope"] == "principal"
    [row] = jobs(tenure_dsn, "open_case")
    assert count_rows(receiver_dsn, "example_cases", case_key(row["id"])) == 1
