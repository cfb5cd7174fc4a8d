"""An OpenAI Agents SDK agent over the ledger's tools with a fake `Model`. Nothing reaches a
provider: the model is local and tracing is off.

`LedgerModel` asks for ``post_entry`` with a fresh random call id (as a provider would),
then answers with what the tool returned (or the error it was told).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

from agents import (
    Agent,
    ModelResponse,
    ModelSettings,
    RunConfig,
    Tool,
    Usage,
    set_tracing_disabled,
)
from agents.models.interface import Model
from agents.testing import assistant_message, function_call

from tenure import App
from tenure.integrations.openai_agents import TenureTools

set_tracing_disabled(True)  # no trace export: these runs never leave the machine
OFFLINE = RunConfig(tracing_disabled=True)


class LedgerModel(Model):
    """Calls ``tool`` with ``arguments`` (a new call id each time), then reports what came back."""

    def __init__(self, tool: str, arguments: dict[str, Any]) -> None:
        self.tool = tool
        self.arguments = arguments
        self.inputs: list[Any] = []
        self.tools: list[Tool] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        self.inputs.append(input)
        self.tools = tools
        items = [] if isinstance(input, str) else input
        outputs = [
            i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        if outputs:
            text = f"posted {outputs[-1]['output']}"
            return ModelResponse(output=[assistant_message(text)], usage=Usage(), response_id=None)
        call = function_call(self.tool, self.arguments, call_id=f"call-{uuid.uuid4()}")
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests do not stream")


def ledger_agent(
    app: App, tool: str, arguments: dict[str, Any], **options: Any
) -> tuple[Agent[Any], TenureTools, LedgerModel]:
    tools = TenureTools(app, conversation=lambda ctx: ctx.context["chat"], **options)
    model = LedgerModel(tool, arguments)
    return Agent(name="ledger", model=model, tools=list(tools.tools)), tools, model
