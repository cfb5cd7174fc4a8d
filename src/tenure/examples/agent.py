"""A durable pydantic-ai agent over the demo's fenced tools; it runs offline.

The model is a `FunctionModel` standing in for an LLM (no provider, no network). Asked
about a customer's invoice discrepancy, it reads the invoice with ``read_invoice`` (a
function tool: a step of the run, which takes a few seconds), opens a case with the
demo's ``create_case`` tool (a tenure tool: a child job of the run, posting to the example
case service, fenced) and answers with what it learnt.

`TenureDurability` makes the whole run a tenure job (``agent:desk``): any worker that
imports the agent runs it, each model request and tool call is a step recorded under the
run's fencing token, so a worker killed in the middle of the run costs a takeover, not a
second question to the model or a second case. ``tenure demo --agent`` kills the run's
worker and the tool's, and compares the answer with an uninterrupted run's. Needs
``pip install 'tenure[pydantic-ai]'``.

The model notes each answer it gives (``answer JOB STEP``) in the file that
``TENURE_DEMO_NOTES`` names, when it is set: the demo counts model calls from there.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from typing import Any

from pydantic_ai import Agent, FunctionToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tenure import App
from tenure.integrations.pydantic_ai import TenureDurability, TenureToolset, run_context

CUSTOMER = "c-4711"
INVOICE = "inv-2024-118"
READING = 3.0  # seconds read_invoice takes: long enough to kill the run's worker in
THINKING = 3.0  # seconds create_case takes before it posts: long enough to kill its worker
POLICY: dict[str, Any] = {"lease": 2.0, "heartbeat": 0.5, "jitter": 0.5, "time_limit": 60.0}


def _note(step: int) -> None:
    path = os.environ.get("TENURE_DEMO_NOTES")
    if path:
        with open(path, "a", encoding="utf-8") as notes:
            notes.write(f"answer {run_context().job_id} {step}\n")


def _call(tool: str, args: dict[str, Any]) -> ModelResponse:
    # A fresh id on every call, as a provider makes them: a replay never relies on it.
    return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=f"call_{uuid.uuid4().hex}")])


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """What an LLM would do here: read the invoice, open a case, then report."""
    step = 1 + sum(isinstance(m, ModelResponse) for m in messages)
    returned = [p.content for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if step == 1:
        answer = _call("read_invoice", {"invoice_id": INVOICE})
    elif step == 2:
        answer = _call("create_case", {"customer_id": CUSTOMER, "seconds": THINKING})
    else:
        invoice = returned[0] if returned and isinstance(returned[0], dict) else {}
        opened = len(returned) > 1 and isinstance(returned[1], dict)
        parts: list[ModelResponsePart] = [
            TextPart(
                f"Invoice {invoice.get('invoice_id')} has {invoice.get('lines')} lines; "
                + (f"I opened a case for customer {CUSTOMER}." if opened else "no case opened.")
            )
        ]
        answer = ModelResponse(parts=parts)
    _note(step)
    return answer


def build_agent(app: App) -> tuple[Agent[None, str], TenureDurability[None]]:
    """The agent ``desk`` on ``app`` (which must have the demo's ``create_case``): its runs
    are the jobs of ``agent:desk``."""
    reading = FunctionToolset[None](id="invoices")

    @reading.tool_plain
    async def read_invoice(invoice_id: str) -> dict[str, Any]:
        """Read an invoice from the ledger (read-only, and slow)."""
        await asyncio.sleep(READING)
        lines = 1 + int(hashlib.sha256(invoice_id.encode()).hexdigest(), 16) % 40
        return {"invoice_id": invoice_id, "lines": lines}

    durability = TenureDurability[None](app, **POLICY)
    agent = Agent(
        FunctionModel(_model),
        name="desk",
        toolsets=[reading, TenureToolset(app, tools=["create_case"])],
        capabilities=[durability],
    )
    return agent, durability
