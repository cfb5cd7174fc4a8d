"""An OpenAI Agents SDK agent over the ledger's tools with a fake `Model`, and a process
that runs it so tests can kill it. Nothing reaches a provider: the model is local and
tracing is off.

`LedgerModel` asks for ``post_entry`` with a fresh random call id (as a provider would:
a restart cannot guess it, it must come from the saved run state), then answers with
what the tool returned (or the error it was told).

``python -m tests.system.adapters.openai_agents.ledger_openai start --state FILE ...`` runs
the agent with ``defer_after`` and saves the interrupted run's state to FILE;
``... resume --state FILE --marker M`` approves the pending call, writes M and runs the
state to the end (the output goes to ``FILE.out``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    ModelResponse,
    ModelSettings,
    RunConfig,
    Runner,
    RunState,
    Tool,
    Usage,
    set_tracing_disabled,
)
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from tests.system.adapters.pydantic_ai.ledger_app import build_app

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
    app: App, tool: str, arguments: dict[str, Any], defer_after: float | None = None
) -> tuple[Agent[Any], TenureTools, LedgerModel]:
    tools = TenureTools(app, conversation=lambda ctx: ctx.context["chat"], defer_after=defer_after)
    model = LedgerModel(tool, arguments)
    return Agent(name="ledger", model=model, tools=list(tools.tools)), tools, model


def save(path: Path, text: str) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["start", "resume"])
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--account", required=True)
    parser.add_argument("--marker", type=Path)
    args = parser.parse_args()
    app = build_app()
    agent, tools, _ = ledger_agent(
        app, "post_entry", {"account": args.account, "cents": 1250}, defer_after=0.3
    )
    if args.mode == "start":
        result = await Runner.run(agent, "post it", context={"chat": "chat-1"}, run_config=OFFLINE)
        assert result.interruptions, "the call ended within defer_after"
        save(args.state, result.to_state().to_string())
    else:
        state = await RunState.from_string(agent, args.state.read_text(encoding="utf-8"))
        tools.approve(state)
        if args.marker is not None:
            save(args.marker, "resuming")
        result = await Runner.run(agent, state, run_config=OFFLINE)
        save(args.state.with_suffix(".out"), str(result.final_output))
    await app.aclose()


if __name__ == "__main__":
    asyncio.run(main())
