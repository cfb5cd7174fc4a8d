"""Tools written to be called again from the top: fenced steps, durable sleeps, child jobs.

Worker processes load ``tests.apps.durable_app:app`` (``TENURE_DSN``); a test builds its
producer with ``build_app(dsn)``. Tools note what they did in the ``notes`` file they are
given (``entered WORKER TOKEN`` when a step's function starts, ...), so a test can tell
which worker did what, and a tool that must be paused mid-step waits there for a file
the test creates.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from typing import Any

from tenure import App, Context


def note(path: str, *words: object) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(" ".join(str(w) for w in words) + "\n")


def notes_of(path: str, first: str) -> list[list[str]]:
    """The lines of ``path`` that start with ``first``, split into words."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [line.split() for line in f.read().splitlines() if line.split()[:1] == [first]]


def build_app(dsn: str | None = None) -> App:
    app = App(dsn)
    tool = functools.partial(
        app.tool, lease=2, heartbeat=0.3, jitter=0.5, time_limit=120, max_attempts=3
    )

    @tool()
    def held_step(ctx: Context, notes: str, release: str) -> dict[str, Any]:
        """One step whose function waits until the file ``{release}{attempt}`` exists (a
        test pauses the worker meanwhile, or lets it go)."""

        def work() -> dict[str, Any]:
            note(notes, "entered", ctx.worker, ctx.token)
            while not os.path.exists(f"{release}{ctx.attempt}"):
                time.sleep(0.01)
            return {"by": ctx.worker, "token": ctx.token}

        result = ctx.step_sync("work", work)
        note(notes, "recorded", ctx.worker, ctx.token)
        return dict(result)

    @tool()
    async def napper(ctx: Context, notes: str, seconds: float) -> str:
        """A step, a durable sleep, a step: each step notes that it ran."""
        await ctx.step("before", note, notes, "before", ctx.worker)
        await ctx.sleep(seconds)
        await ctx.step("after", note, notes, "after", ctx.worker)
        return f"slept on {ctx.worker}"

    @tool()
    async def child(ctx: Context, notes: str, release: str) -> str:
        """Runs until the file ``release`` exists."""
        note(notes, "child", ctx.worker, ctx.token)
        while not os.path.exists(release):
            await asyncio.sleep(0.01)
        return f"child done on {ctx.worker}"

    @tool()
    async def parent(ctx: Context, notes: str, release: str) -> list[Any]:
        """Plans (a step), starts a child, waits for it holding nothing."""
        await ctx.step("plan", note, notes, "plan", ctx.worker)
        child = await ctx.enqueue("child", {"notes": notes, "release": release})
        (done,) = await ctx.wait_for(child)
        return [done.state, done.result, ctx.worker]

    @tool()
    async def lookup(ctx: Context, city: str) -> str:
        """What the weather is (a tool the agent calls: a child job of its run)."""
        return f"sunny in {city}"

    add_weather_agent(app)
    return app


def add_weather_agent(app: App) -> None:
    """``agent:weather``: a durable pydantic-ai agent (an offline model) that calls ``lookup``
    once, then says what it returned."""
    from pydantic_ai import Agent
    from pydantic_ai import messages as msg
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from tenure.integrations.pydantic_ai import TenureDurability, TenureToolset

    def model(messages: list[msg.ModelMessage], info: AgentInfo) -> msg.ModelResponse:
        returned = [p for m in messages for p in m.parts if isinstance(p, msg.ToolReturnPart)]
        if returned:
            return msg.ModelResponse(parts=[msg.TextPart(f"It is {returned[0].content}.")])
        return msg.ModelResponse(parts=[msg.ToolCallPart("lookup", {"city": "Paris"})])

    durability = TenureDurability[None](app, lease=2, heartbeat=0.3, jitter=0.5)
    Agent(
        FunctionModel(model),
        name="weather",
        toolsets=[TenureToolset(app, tools=["lookup"])],
        capabilities=[durability],
    )


app = build_app()
