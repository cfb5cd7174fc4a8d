"""A durable pydantic-ai agent (`TenureDurability`) whose model is a fake and whose tools
change the world through a fenced receiver, for the durable-run tests.

Worker processes load ``tests.apps.agent_run_app:app`` with ``TENURE_DSN``,
``RECEIVER_URL`` (the example case service) and ``AGENT_NOTES`` (a folder) in their
environment; a test builds its producer with ``build(dsn)``.

The prompt configures the run: ``ids=random`` (a fresh random tool-call id on every model
call, as a real provider would make) or ``ids=call_0`` (ids numbered per response, so
``call_0`` comes back every turn), and ``hold=POINT`` (or the file ``AGENT_NOTES/hold``
holding POINT): on worker ``a`` the run stops at
POINT and waits there (for the test to SIGKILL or SIGSTOP it) until ``AGENT_NOTES/release``
exists. Points: ``model1`` (inside the first model request), ``before_tool`` (the
function tool, before its request), ``sending`` (its request, fenced and on its way out),
``in_tool`` (after the receiver applied it, before the tool returns), ``model2`` (after the
tools, inside the next model request). The child-job tool holds after its request
(``in_child``) when ``AGENT_NOTES/hold_child`` exists.

The model answers in three steps: ``post`` (a function tool: a step of the run) and
``charge`` (a tenure tool: a child job) in one response, ``post`` again, then the text
of what the tools returned. Every model call notes ``call STEP WORKER`` and every answer
``answer STEP WORKER`` in ``AGENT_NOTES/notes.txt``; held points note ``held POINT``.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from pydantic_ai import Agent, FunctionToolset, RunContext
from pydantic_ai import messages as msg
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tenure import App, Context
from tenure.integrations.pydantic_ai import TenureDurability, TenureToolset, run_context

EXPECTED = "done: case refund-42 created; captured 1250; case follow-up created"
POLICY: dict[str, Any] = {
    "lease": 2.0,
    "heartbeat": 0.3,
    "jitter": 0.5,
    "time_limit": 120.0,
    "max_attempts": 5,
}


def notes_dir() -> Path:
    return Path(os.environ["AGENT_NOTES"])


def note(*words: object) -> None:
    with (notes_dir() / "notes.txt").open("a", encoding="utf-8") as f:
        f.write(" ".join(str(w) for w in words) + "\n")


def setting(prompt: str, name: str, default: str = "") -> str:
    for word in prompt.split():
        key, _, value = word.partition("=")
        if key == name:
            return value
    return default


def hold_thread(prompt: str, point: str, worker: str) -> None:
    """On worker ``a``, stop at ``point`` if the prompt (or the file ``AGENT_NOTES/hold``)
    says so, until released."""
    held = notes_dir() / "hold"
    wanted = setting(prompt, "hold") or (held.read_text().strip() if held.exists() else "")
    if worker != "a" or wanted != point:
        return
    note("held", point, worker)
    while not (notes_dir() / "release").exists():
        time.sleep(0.01)


def prompt_of(messages: list[msg.ModelMessage]) -> str:
    for message in messages:
        for part in message.parts:
            if isinstance(part, msg.UserPromptPart) and isinstance(part.content, str):
                return part.content
    return ""


async def respond(messages: list[msg.ModelMessage], info: AgentInfo) -> msg.ModelResponse:
    prompt = prompt_of(messages)
    worker = run_context().worker
    step = 1 + sum(isinstance(m, msg.ModelResponse) for m in messages)
    note("call", step, worker)
    # Held in the event loop's own thread, blocking it: once released (continued), the
    # request answers before the worker can hear that its lease is gone.
    hold_thread(prompt, f"model{step}", worker)
    fresh = setting(prompt, "ids") != "call_0"

    def call(n: int, tool: str, args: dict[str, object]) -> msg.ToolCallPart:
        return msg.ToolCallPart(
            tool, args, tool_call_id=f"c-{uuid.uuid4()}" if fresh else f"call_{n}"
        )

    parts: list[msg.ModelResponsePart]
    if step == 1:
        parts = [
            call(0, "post", {"title": "refund-42"}),
            call(1, "charge", {"payment_id": "p-42", "cents": 1250}),
        ]
    elif step == 2:
        parts = [call(0, "post", {"title": "follow-up"})]
    else:
        returned = [
            str(part.content)
            for message in messages
            for part in message.parts
            if isinstance(part, msg.ToolReturnPart)
        ]
        parts = [msg.TextPart("done: " + "; ".join(returned))]
    note("answer", step, worker)
    return msg.ModelResponse(parts=parts)


def add_charge(app: App) -> None:
    """Register ``charge``: capture a payment (a child job of the run when the agent calls
    it); held after its request when ``AGENT_NOTES/hold_child`` exists."""

    @app.tool(**POLICY)
    async def charge(ctx: Context, payment_id: str, cents: int) -> str:
        """Capture a payment."""
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.post(
                os.environ["RECEIVER_URL"] + "/payments/capture",
                json={"payment_id": payment_id, "amount_cents": cents},
                auth=ctx.http_auth("capture"),
            )
        response.raise_for_status()
        # A child knows no prompt: a test that holds it here says so with a file.
        if (notes_dir() / "hold_child").exists():
            await asyncio.to_thread(hold_thread, "hold=in_child", "in_child", ctx.worker)
        return f"captured {cents}"


def post_case(ctx: Context, title: str, prompt: str) -> str:
    """The body of ``post``, a function tool (a step of the run, in a thread of its own):
    open a case, its request carrying the step's key. A request held on its way out
    (``sending``) is sent when released, whatever the worker learnt meanwhile, as one on
    the wire would be."""
    hold_thread(prompt, "before_tool", ctx.worker)

    def sending(request: httpx.Request) -> None:
        hold_thread(prompt, "sending", ctx.worker)

    with httpx.Client(timeout=10, event_hooks={"request": [sending]}) as client:
        response = client.post(
            os.environ["RECEIVER_URL"] + "/cases", json={"title": title}, auth=ctx.http_auth()
        )
    note("posted", title, ctx.worker, ctx.token, response.status_code)
    response.raise_for_status()
    hold_thread(prompt, "in_tool", ctx.worker)
    return f"case {title} created"


def build(dsn: str | None = None) -> tuple[App, TenureDurability[None]]:
    app = App(dsn)
    add_charge(app)
    local = FunctionToolset[None](id="desk")

    @local.tool
    def post(rc: RunContext[None], title: str) -> str:
        """Open a case."""
        return post_case(run_context(), title, rc.prompt if isinstance(rc.prompt, str) else "")

    durability = TenureDurability[None](app, **POLICY)
    Agent(
        FunctionModel(respond),
        name="desk",
        toolsets=[local, TenureToolset(app, tools=["charge"])],
        capabilities=[durability],
    )
    return app, durability


app, durability = build()
