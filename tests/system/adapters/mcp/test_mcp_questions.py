# ruff: noqa: E402
"""Waitpoints over MCP, on every wire: a question the tool declared for its caller
(``answered_by="caller"``) is asked with the form its answer type gives, and the tool gets
the typed answer; one declared for whoever holds its token is never asked and cannot be
answered by the caller. The SDK's own client answers with its elicitation callback: an
``elicitation/create`` request (2025-11-25), an ``input_required`` result it answers by
calling again (2026-07-28), a task's ``inputRequests`` it answers with ``tasks/update``."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.system.adapters.mcp.sdk import needs_sdk

needs_sdk()  # before the SDK's imports below, hence E402

import anyio
from mcp.client.session import ClientRequestContext
from mcp_types import ElicitRequestFormParams, ElicitRequestParams, ElicitResult
from tests.support.waiting import wait_until_async
from tests.support.workers import WorkerProcess
from tests.system.adapters.mcp.helpers import (
    ERAS,
    Era,
    jobs,
    key,
    memory_client,
    states,
    text,
    text_of,
)

from tenure import App
from tenure.mcp import server

Content = dict[str, str | int | float | bool | list[str] | None]
ANSWER: Content = {"approved": True, "size": "L", "note": "for the hike"}


class Asked:
    """An elicitation callback that answers every question with `ANSWER`, keeping them."""

    def __init__(self) -> None:
        self.questions: list[ElicitRequestParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult:
        self.questions.append(params)
        return ElicitResult(action="accept", content=ANSWER)


@pytest.mark.parametrize(("era", "tasks"), [("legacy", False), ("modern", False), ("modern", True)])
async def test_a_question_for_the_caller_is_asked_with_its_form_and_answered_typed(
    app: App, worker: WorkerProcess, tenure_dsn: str, era: Era, tasks: bool
) -> None:
    asked = Asked()
    srv = server(app, principal="alice")
    async with memory_client(srv, era, elicitation=asked, tasks=tasks) as client:
        result = await client.call_tool("confirm", {"item": "boots"}, meta=key("c-1"))
    assert not result.is_error, result
    assert result.structured_content == {"item": "boots", **ANSWER}
    [question] = asked.questions
    assert isinstance(question, ElicitRequestFormParams)
    assert set(question.requested_schema["properties"]) == {"approved", "size", "note"}
    assert question.requested_schema["required"] == ["approved", "size"]
    assert states(tenure_dsn, "confirm") == ["succeeded"]


@pytest.mark.parametrize("era", ERAS)
async def test_a_question_for_a_person_is_never_put_to_the_caller(
    app: App, worker: WorkerProcess, tenure_dsn: str, tmp_path: Path, era: Era
) -> None:
    """``approve`` waits for whoever holds its token: the caller waiting on the plain path
    is not asked (no elicitation, no input_required); the person's answer ends the call."""
    asked = Asked()
    marker = tmp_path / "token"
    async with memory_client(server(app), era, elicitation=asked) as client:
        async with anyio.create_task_group() as tg:
            results = []

            async def call() -> None:
                arguments = {"amount": 40, "marker": str(marker)}
                results.append(await client.call_tool("approve", arguments))

            tg.start_soon(call)
            await wait_until_async(lambda: states(tenure_dsn, "approve") == ["waiting"], 30)
            await app.answer_waitpoint(text(marker).strip(), "yes, Ann")
    assert text_of(results[0]) == "40: yes, Ann"
    assert asked.questions == []
    assert len(jobs(tenure_dsn, "approve")) == 1
