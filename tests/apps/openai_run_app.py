"""A durable OpenAI Agents SDK agent (`TenureRunner`) with a fake model and tools that change
the world through a fenced receiver: the OpenAI twin of ``tests.apps.agent_run_app``, with
the same environment (``RECEIVER_URL``, ``AGENT_NOTES``), notes, ids (the prompt's
``ids=random`` or ``ids=call_0``) and answer. Where worker ``a`` holds is the point written
in the file ``AGENT_NOTES/hold`` (a plain function tool does not see the prompt):
``model1``, ``before_tool``, ``sending``, ``in_tool``, ``model2``; the child-job tool holds
after its request (``in_child``) when ``AGENT_NOTES/hold_child`` exists.
Worker processes load ``tests.apps.openai_run_app:app``; a test builds its producer with
``build(dsn)``.
"""

from __future__ import annotations

import uuid
from typing import Any

from agents import (
    Agent,
    ModelResponse,
    RunConfig,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from tests.apps.agent_run_app import (
    EXPECTED,
    POLICY,
    add_charge,
    hold_thread,
    note,
    post_case,
    setting,
)

from tenure import App
from tenure.integrations.openai_agents import TenureRunner, TenureTools, run_context

__all__ = ["EXPECTED", "app", "build", "runner"]

set_tracing_disabled(True)  # nothing leaves the machine


def prompt_of(input: Any) -> str:
    if isinstance(input, str):
        return input
    for item in input:
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            return content if isinstance(content, str) else ""
    return ""


class ScriptedModel(Model):
    """``post`` and ``charge`` in one response, ``post`` again, then what they returned."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        input = kwargs.get("input", args[1] if len(args) > 1 else "")
        items = [] if isinstance(input, str) else list(input)
        outputs = [
            i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        prompt, worker = prompt_of(input), run_context().worker
        step = 1 if not outputs else (2 if len(outputs) == 2 else 3)
        note("call", step, worker)
        hold_thread("", f"model{step}", worker)
        fresh = setting(prompt, "ids") != "call_0"

        def call(n: int, tool: str, arguments: dict[str, Any]) -> Any:
            call_id = f"c-{uuid.uuid4()}" if fresh else f"call_{n}"
            return function_call(tool, arguments, call_id=call_id)

        if step == 1:
            output = [
                call(0, "post", {"title": "refund-42"}),
                call(1, "charge", {"payment_id": "p-42", "cents": 1250}),
            ]
        elif step == 2:
            output = [call(0, "post", {"title": "follow-up"})]
        else:
            texts = [str(o["output"]).strip('"') for o in outputs]
            output = [assistant_message("done: " + "; ".join(texts))]
        note("answer", step, worker)
        return ModelResponse(output=output, usage=Usage(requests=1), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests do not stream")


def build(dsn: str | None = None) -> tuple[App, TenureRunner]:
    app = App(dsn)
    add_charge(app)

    @function_tool
    def post(title: str) -> str:
        """Open a case (a function tool sees no prompt: the hold file says where to hold)."""
        return post_case(run_context(), title, "")

    agent = Agent(
        name="desk",
        model=ScriptedModel(),
        tools=[post, *TenureTools(app, tools=["charge"]).tools],
    )
    runner = TenureRunner(app, agent, run_config=RunConfig(tracing_disabled=True), **POLICY)
    return app, runner


app, runner = build()
