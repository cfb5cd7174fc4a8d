"""The tenure app of ``bench/durable.py``: what durable runs cost.

``agent:bench`` is a durable pydantic-ai agent whose offline model asks for ``tick`` (a
function tool: a step of the run) ``BENCH_STEPS`` times, then answers; its model and its
tool note the monotonic time they start in ``TIMES`` (the in-process measurement reads
them). ``nap`` sleeps an hour after one step (``ctx.sleep``); ``parent`` starts a child
an hour in the future and waits for it (``ctx.wait_for``): the 10,000 runs left waiting.
Heartbeats every 30 s, as for long calls: nothing measured rides on one.
"""

from __future__ import annotations

import os
import time

from pydantic_ai import Agent, FunctionToolset
from pydantic_ai import messages as msg
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tenure import App, Context
from tenure.integrations.pydantic_ai import TenureDurability

app = App()
POLICY = {"lease": 90, "heartbeat": 30, "jitter": 20, "time_limit": 3600, "max_attempts": 3}
STEPS = int(os.environ.get("BENCH_STEPS", "40"))
TIMES: list[tuple[str, float]] = []  # (what, when): "model" or "tool", monotonic


def model(messages: list[msg.ModelMessage], info: AgentInfo) -> msg.ModelResponse:
    TIMES.append(("model", time.perf_counter()))
    step = sum(isinstance(m, msg.ModelResponse) for m in messages)
    if step < STEPS:
        args = {"n": step, "note": "x" * 200}  # a tool call of a realistic size
        return msg.ModelResponse(parts=[msg.ToolCallPart("tick", args)])
    return msg.ModelResponse(parts=[msg.TextPart(f"done after {step} ticks")])


tools = FunctionToolset[None](id="bench")


@tools.tool_plain
async def tick(n: int, note: str) -> dict[str, object]:
    """What a tool gives back: a small JSON object."""
    TIMES.append(("tool", time.perf_counter()))
    return {"n": n, "ok": True, "echo": note[:50]}


durability = TenureDurability[None](app, **POLICY)  # type: ignore[arg-type]
agent = Agent(FunctionModel(model), name="bench", toolsets=[tools], capabilities=[durability])


@app.tool(**POLICY)  # type: ignore[arg-type]
async def nap(ctx: Context, n: int) -> str:
    await ctx.step("before", lambda: n)
    await ctx.sleep(3600)
    return "woke"


@app.tool(**POLICY)  # type: ignore[arg-type]
async def later(ctx: Context, n: int) -> int:
    return n


@app.tool(**POLICY)  # type: ignore[arg-type]
async def parent(ctx: Context, n: int) -> str:
    child = await ctx.enqueue("later", {"n": n}, delay=3600)
    await ctx.wait_for(child)
    return "done"
