"""A pydantic-ai agent over the ledger's tools, and a process that runs it so tests can kill it.

The model is a `FunctionModel`: it asks for ``post_entry`` with a fresh random tool
call id (as a real provider would: a restart cannot guess it, it must come from the
saved history), then answers with what the tool returned.

``python -m tests.system.adapters.pydantic_ai.ledger_agent --history FILE ...`` runs the agent
with ``agent.iter`` and saves the message history after every step (atomically), the
way a real agent keeps a conversation it may have to resume; its final output goes to
``FILE.out`` (a string, or the deferred requests as JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import Agent
from pydantic_ai import messages as msg
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests
from tests.system.adapters.pydantic_ai.ledger_app import build_app

from tenure import App
from tenure.integrations.pydantic_ai import TenureToolset

REQUESTS = TypeAdapter(DeferredToolRequests)


def ledger_model(account: str, cents: int) -> FunctionModel:
    def respond(messages: list[msg.ModelMessage], info: AgentInfo) -> msg.ModelResponse:
        for part in messages[-1].parts:
            if isinstance(part, msg.ToolReturnPart):
                return msg.ModelResponse(
                    parts=[msg.TextPart(f"posted {json.dumps(part.content, sort_keys=True)}")]
                )
        call = msg.ToolCallPart(
            "post_entry", {"account": account, "cents": cents}, tool_call_id=f"call-{uuid.uuid4()}"
        )
        return msg.ModelResponse(parts=[call])

    return FunctionModel(respond)


def scripted(*calls: tuple[str, dict[str, Any]]) -> tuple[FunctionModel, list[msg.ToolReturnPart]]:
    """A model that makes ``calls`` one after the other (each a new tool call id), then says
    done; the returns it was sent are collected in the list."""
    seen: list[msg.ToolReturnPart] = []

    def respond(messages: list[msg.ModelMessage], info: AgentInfo) -> msg.ModelResponse:
        seen.extend(p for p in messages[-1].parts if isinstance(p, msg.ToolReturnPart))
        step = sum(isinstance(m, msg.ModelResponse) for m in messages)
        if step < len(calls):
            name, args = calls[step]
            return msg.ModelResponse(
                parts=[msg.ToolCallPart(name, args, tool_call_id=f"call-{step}")]
            )
        return msg.ModelResponse(parts=[msg.TextPart("done")])

    return FunctionModel(respond), seen


def ledger_agent(
    app: App, account: str, cents: int, defer_after: float | None = None
) -> tuple[Agent[None, Any], TenureToolset]:
    toolset = TenureToolset(app, tools=["post_entry"], defer_after=defer_after)
    agent: Agent[None, Any] = Agent(
        ledger_model(account, cents), toolsets=[toolset], output_type=[str, DeferredToolRequests]
    )
    return agent, toolset


def save(path: Path, data: bytes) -> None:
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def load_history(path: Path) -> list[msg.ModelMessage]:
    return msg.ModelMessagesTypeAdapter.validate_json(path.read_bytes())


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--history", type=Path, required=True)
    parser.add_argument("--account", required=True)
    parser.add_argument("--cents", type=int, default=1250)
    parser.add_argument("--conversation", required=True)
    parser.add_argument("--defer-after", type=float, default=None)
    args = parser.parse_args()
    app = build_app()
    agent, _ = ledger_agent(app, args.account, args.cents, args.defer_after)
    async with agent.iter("post it", conversation_id=args.conversation) as run:
        async for _node in run:
            save(args.history, msg.ModelMessagesTypeAdapter.dump_json(run.all_messages()))
    assert run.result is not None
    output = run.result.output
    text = REQUESTS.dump_json(output) if isinstance(output, DeferredToolRequests) else output
    save(args.history.with_suffix(".out"), text.encode() if isinstance(text, str) else text)
    await app.aclose()


if __name__ == "__main__":
    asyncio.run(main())
