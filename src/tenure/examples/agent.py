"""A pydantic-ai agent over the demo's fenced tools; it runs offline.

The model is a `FunctionModel` standing in for an LLM (no provider, no network): asked
about a customer's invoice discrepancy, it opens a case with the demo's ``create_case``
tool (which posts to the example case service, fenced) and then answers with the case's
id. The tool runs as a tenure job on whichever worker takes it, through
`tenure.integrations.pydantic_ai.TenureToolset`.

`converse` keeps the conversation's message history in a file after every step, the
way a real agent keeps it in its database: run again after a crash, it resumes the
saved history (no new prompt), so a tool call that was under way finds its job by key
instead of opening a second case. ``tenure demo --agent`` runs it while a worker is
SIGKILLed in the middle of the call. Needs ``pip install 'tenure[pydantic-ai]'``.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tenure import App
from tenure.integrations.pydantic_ai import TenureToolset

CUSTOMER = "c-4711"
THINKING = 3.0  # seconds the tool takes before it posts: long enough to kill a worker in


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """What an LLM would do here: call the tool once, then report what it returned."""
    for part in messages[-1].parts:
        if isinstance(part, ToolReturnPart):
            result: Any = part.content  # the job's result: the tool's JSON
            if part.outcome == "success" and isinstance(result, dict):
                text = f"I opened case {result['case_id']} for customer {CUSTOMER}."
            else:
                text = f"I could not open a case: {part.model_response_str()}"
            return ModelResponse(parts=[TextPart(text)])
    call = ToolCallPart(
        "create_case",
        {"customer_id": CUSTOMER, "seconds": THINKING},
        tool_call_id=f"call_{uuid.uuid4().hex[:16]}",  # like a provider's: not reproducible
    )
    return ModelResponse(parts=[call])


def build_agent(app: App) -> Agent[None, str]:
    """The agent: the demo app's ``create_case`` as a tenure-backed tool."""
    return Agent(FunctionModel(_model), toolsets=[TenureToolset(app, tools=["create_case"])])


async def converse(agent: Agent[None, str], conversation_id: str, history: Path) -> str:
    """Ask the agent about the discrepancy, or resume the saved conversation if there is
    one; the history is saved after every step. Returns the agent's answer."""
    if history.exists():
        saved: list[ModelMessage] | None = ModelMessagesTypeAdapter.validate_json(
            history.read_bytes()
        )
        prompt: str | None = None
    else:
        saved, prompt = None, f"Customer {CUSTOMER} reports an invoice discrepancy."
    options: dict[str, Any] = {"conversation_id": conversation_id} if saved is None else {}
    async with agent.iter(prompt, message_history=saved, **options) as run:
        async for _step in run:
            _save(history, ModelMessagesTypeAdapter.dump_json(run.all_messages()))
    assert run.result is not None
    return str(run.result.output)


def _save(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)  # a crash leaves the old history or the new, never half
