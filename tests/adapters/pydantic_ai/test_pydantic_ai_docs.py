"""The pydantic-ai example of docs/guides/agent-frameworks.md runs as written, offline.

The page's module is saved and imported as a reader's would be (``app``, ``agent`` and
``main`` at its top level); only the LLM is replaced, with pydantic-ai's own
``Agent.override`` and a `FunctionModel` that calls ``open_case`` and then reports what
came back. The call outlasts ``defer_after``, so the run ends with the deferred request,
and the second run gets the job's result: one job, under the conversation's key, run once.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic_ai import messages as msg
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.support.docs import example

pytestmark = pytest.mark.storage


def respond(messages: list[msg.ModelMessage], info: AgentInfo) -> msg.ModelResponse:
    """What an LLM would do: ask for a case, then say which case it got."""
    for part in messages[-1].parts:
        if isinstance(part, msg.ToolReturnPart):
            result: Any = part.content  # the job's result: the tool's JSON
            return msg.ModelResponse(parts=[msg.TextPart(f"I opened {result['case_id']}.")])
    call = msg.ToolCallPart("open_case", {"customer_id": "c-4711"}, tool_call_id="call-1")
    return msg.ModelResponse(parts=[call])


async def test_the_deferred_call_is_resumed_with_its_jobs_result(
    tenure_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    monkeypatch.setenv("OPENAI_API_KEY", "never-used")  # the page names a provider's model
    module = tmp_path / "support_agent.py"
    module.write_text(example("pydantic-ai").code, encoding="utf-8")
    names = runpy.run_path(str(module), run_name="support_agent")

    with names["agent"].override(model=FunctionModel(respond)):
        await names["main"]()

    assert capsys.readouterr().out.splitlines() == [
        "deferred: ['open_case']",
        "I opened case-c-4711.",
    ]
    with psycopg.connect(tenure_dsn) as db:
        jobs = db.execute("SELECT tool, idempotency_key, state, attempt FROM tenure_jobs")
        assert jobs.fetchall() == [("open_case", "pydantic-ai:chat-42:call-1", "succeeded", 1)]
