"""The README's "From an agent" blocks: each adapter in under 15 lines, and each works.

Each block is saved and imported as a reader's module would be; a worker of that module's
``app`` runs alongside, and the adapter is driven offline: the MCP server through the SDK's
own in-memory client, pydantic-ai with a `FunctionModel`, the OpenAI Agents SDK with the
adapter tests' local `LedgerModel`. Each must call ``order_status`` once, as a job keyed
the way the README says, and hand its result back.
"""

from __future__ import annotations

import asyncio
import runpy
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.support.docs import example, imported, jobs_left

from tenure import App

Load = Callable[[str], dict[str, Any]]
ADAPTERS = (
    "mcp-short",
    "pydantic-ai-short",
    "openai-agents-short",
    "pydantic-ai-durable",
    "openai-agents-durable",
)


@pytest.fixture
def load(tenure_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Load:
    """Import the README's example NAME as a module, on this test's database."""
    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    monkeypatch.setenv("OPENAI_API_KEY", "never-used")  # a provider's model is named, not used
    return lambda name: imported(name, tmp_path, name.replace("-", "_"))


@asynccontextmanager
async def working(app: App) -> AsyncIterator[None]:
    """A worker of ``app`` in this event loop for the block's duration."""
    worker = app.worker()
    running = asyncio.create_task(worker.run(handle_signals=False))
    try:
        yield
    finally:
        worker.stop()
        await running
        await app.aclose()


@pytest.mark.parametrize("name", ADAPTERS)
def test_each_adapter_is_shown_in_under_15_lines_of_the_readme(name: str) -> None:
    block = example(name)
    assert block.page.name == "README.md", block.where
    assert len(block.code.splitlines()) < 15, block.where


async def test_the_mcp_block_serves_its_tool_as_a_job(load: Load, tenure_dsn: str) -> None:
    from mcp import Client
    from mcp_types import TextContent

    names = load("mcp-short")
    async with working(names["app"]), Client(names["mcp_server"]) as client:
        [tool] = (await client.list_tools()).tools
        assert (tool.name, tool.description) == ("order_status", "Look an order up in the ERP.")
        assert tool.input_schema["required"] == ["order_id"]
        answer = await client.call_tool("order_status", {"order_id": "o-7"})
    assert not answer.is_error
    [text] = answer.content
    assert isinstance(text, TextContent) and '"shipped"' in text.text, text
    [(tool_name, _key, state, attempt)] = jobs_left(tenure_dsn)
    assert (tool_name, state, attempt) == ("order_status", "succeeded", 1)


async def test_the_pydantic_ai_block_runs_its_tool_once_under_the_calls_key(
    load: Load, tenure_dsn: str
) -> None:
    from pydantic_ai import messages as msg
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def respond(messages: list[msg.ModelMessage], info: AgentInfo) -> msg.ModelResponse:
        for part in messages[-1].parts:
            if isinstance(part, msg.ToolReturnPart):
                result: Any = part.content  # the job's result: the tool's JSON
                return msg.ModelResponse(parts=[msg.TextPart(f"It is {result['status']}.")])
        call = msg.ToolCallPart("order_status", {"order_id": "o-7"}, tool_call_id="call-1")
        return msg.ModelResponse(parts=[call])

    names = load("pydantic-ai-short")
    async with working(names["app"]):
        with names["agent"].override(model=FunctionModel(respond)):
            result = await names["agent"].run("Where is order 7?", conversation_id="chat-42")
    assert result.output == "It is shipped."
    assert jobs_left(tenure_dsn) == [("order_status", "pydantic-ai:chat-42:call-1", "succeeded", 1)]


async def test_the_openai_agents_block_runs_its_tool_once_under_the_conversations_key(
    load: Load, tenure_dsn: str
) -> None:
    from agents import Runner
    from tests.system.adapters.openai_agents.ledger_openai import LedgerModel

    names = load("openai-agents-short")
    names["agent"].model = LedgerModel("order_status", {"order_id": "o-7"})
    async with working(names["app"]):
        result = await Runner.run(
            names["agent"], "Where is order 7?", context={"chat_id": "chat-42"}
        )
    assert '"shipped"' in str(result.final_output), result.final_output
    [(tool_name, key, state, attempt)] = jobs_left(tenure_dsn)
    assert (tool_name, state, attempt) == ("order_status", "succeeded", 1)
    assert key.startswith("openai-agents:chat-42:"), key


@pytest.mark.parametrize("name", ["pydantic-ai-durable", "openai-agents-durable"])
def test_each_durable_block_is_seven_lines(name: str) -> None:
    assert len(example(name).code.splitlines()) <= 7


async def test_the_durable_pydantic_ai_block_runs_the_agent_as_a_job_of_steps(
    tenure_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block with its provider's model name replaced by an offline model (a model
    instance must be the agent's own to cross into a run's steps): a run is one job per
    key, its model request a step, its answer the run's result."""
    from pydantic_ai import messages as msg
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    asked: list[int] = []

    def respond(messages: list[msg.ModelMessage], info: AgentInfo) -> msg.ModelResponse:
        asked.append(len(messages))
        return msg.ModelResponse(parts=[msg.TextPart("It is shipped.")])

    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    code = example("pydantic-ai-durable").code
    assert code.count('"openai:gpt-4o"') == 1
    path = tmp_path / "durable_desk.py"
    path.write_text(code.replace('"openai:gpt-4o"', "MODEL"), encoding="utf-8")
    names = runpy.run_path(str(path), init_globals={"MODEL": FunctionModel(respond)})
    async with working(names["app"]):
        first = await names["durable"].run("Where is order 7?", key="ticket-7", timeout=60)
        again = await names["durable"].run("Where is order 7?", key="ticket-7", timeout=60)
    assert first == again == "It is shipped." and asked == [1]  # one run, asked once
    assert jobs_left(tenure_dsn) == [("agent:desk", "ticket-7", "succeeded", 1)]


async def test_the_durable_openai_agents_block_runs_the_agent_as_a_job_of_steps(
    tenure_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agents import ModelResponse, Usage
    from agents.models.interface import Model
    from agents.testing import assistant_message

    asked: list[object] = []

    class Answers(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            asked.append(args)
            return ModelResponse([assistant_message("It is shipped.")], Usage(), None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    names = imported("openai-agents-durable", tmp_path, "durable_openai_desk")
    names["agent"].model = Answers()  # offline; the block names a provider's model
    async with working(names["app"]):
        first = await names["runner"].run("Where is order 7?", key="ticket-7", timeout=60)
        again = await names["runner"].run("Where is order 7?", key="ticket-7", timeout=60)
    assert first == again == "It is shipped." and len(asked) == 1  # one run, asked once
    assert jobs_left(tenure_dsn) == [("agent:desk", "ticket-7", "succeeded", 1)]
