"""The examples of docs/guides/agent-frameworks.md run as written, offline.

Each page module is saved and imported as a reader's would be (``app``, ``agent`` and
``main`` at its top level); only the model is replaced: for pydantic-ai with its own
``Agent.override`` and a `FunctionModel`, for the OpenAI Agents SDK with the adapter
tests' local `LedgerModel` (tracing off). Each model calls ``open_case`` and then reports
what came back. pydantic-ai: the call outlasts ``defer_after``, so the first run ends with
the call pending and the second gets the job's result, one job under the conversation's
key. OpenAI Agents SDK: a durable run (`TenureRunner`), its call a child job keyed by the
run and the call's position.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import messages as msg
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.support.docs import imported, jobs_left
from tests.system.adapters.openai_agents.ledger_openai import LedgerModel

pytestmark = pytest.mark.storage

Load = Callable[[str], dict[str, Any]]


@pytest.fixture
def load(tenure_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Load:
    """Import the page's example NAME as ``support_agent``, on this test's database."""
    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    monkeypatch.setenv("OPENAI_API_KEY", "never-used")  # a provider's model is named, not used
    return lambda name: imported(name, tmp_path, "support_agent")


def respond(messages: list[msg.ModelMessage], info: AgentInfo) -> msg.ModelResponse:
    """What an LLM would do: ask for a case, then say which case it got."""
    for part in messages[-1].parts:
        if isinstance(part, msg.ToolReturnPart):
            result: Any = part.content  # the job's result: the tool's JSON
            return msg.ModelResponse(parts=[msg.TextPart(f"I opened {result['case_id']}.")])
    call = msg.ToolCallPart("open_case", {"customer_id": "c-4711"}, tool_call_id="call-1")
    return msg.ModelResponse(parts=[call])


async def test_pydantic_ai_resumes_the_deferred_call_with_its_jobs_result(
    load: Load, tenure_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    names = load("pydantic-ai")
    with names["agent"].override(model=FunctionModel(respond)):
        await names["main"]()

    printed = capsys.readouterr().out.splitlines()
    assert printed == ["deferred: ['open_case']", "I opened case-c-4711."]
    assert jobs_left(tenure_dsn) == [("open_case", "pydantic-ai:chat-42:call-1", "succeeded", 1)]


async def test_openai_agents_runs_durably_with_its_call_a_child_job(
    load: Load, tenure_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    names = load("openai-agents")
    names["agent"].model = LedgerModel("open_case", {"customer_id": "c-4711"})
    await names["main"]()

    printed = capsys.readouterr().out.splitlines()
    assert printed == ['posted {"case_id": "case-c-4711"}', "['tool-job:1:tool.1.0']"]
    assert jobs_left(tenure_dsn) == [
        ("agent:support", "chat-42", "succeeded", 1),
        ("open_case", "tool-job:1:tool.1.0", "succeeded", 1),
    ]
