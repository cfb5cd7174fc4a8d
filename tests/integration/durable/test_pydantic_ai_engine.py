"""`TenureDurability` with a worker in this process: a run waiting for a person's approval
holds no lease (the wait is a waitpoint, answered with `App.answer_waitpoint`), each model
request and tool call is a step named by its position, a structured output comes back typed,
and outside a worker the agent runs as a plain agent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, FunctionToolset
from pydantic_ai import messages as msg
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext
from tests.integration.durable.conftest import rows, running, until_waiting
from tests.support.waiting import wait_until_async

import tenure
from tenure import App, RunEvent
from tenure.integrations.pydantic_ai import TenureDurability, TenureToolset, run_context

pytest.importorskip("pydantic_ai")

ASKED: dict[str, Any] = {}
MODEL_CALLS: list[int] = []


class Refund(BaseModel):
    order: str
    approved: bool


def model(messages: list[msg.ModelMessage], info: AgentInfo) -> msg.ModelResponse:
    """Asks for ``refund`` once, then answers with a Refund built from what it returned."""
    MODEL_CALLS.append(len(messages))
    returned = [p for m in messages for p in m.parts if isinstance(p, msg.ToolReturnPart)]
    if not returned:
        return msg.ModelResponse(
            parts=[msg.ToolCallPart("refund", {"order": "o-42"}, tool_call_id="call_0")]
        )
    answer = {"order": "o-42", "approved": returned[0].content == "refunded o-42"}
    output = info.output_tools[0].name
    return msg.ModelResponse(parts=[msg.ToolCallPart(output, answer, tool_call_id="call_1")])


async def ask(ctx: RunContext[None], requests: DeferredToolRequests, token: str) -> None:
    """Hand the approval link (the token) to a person; the run then waits for them."""
    ASKED["token"] = token
    ASKED["calls"] = [call.tool_call_id for call in requests.approvals]


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[tuple[App, TenureDurability[None]]]:
    ASKED.clear()
    MODEL_CALLS.clear()
    app = App(tenure_dsn)
    tools = FunctionToolset[None](id="shop")

    @tools.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        assert run_context().current_step is not None  # it runs as a step of the run
        return f"refunded {order}"

    durability = TenureDurability[None](app, lease=5, heartbeat=1, jitter=1)
    Agent(
        FunctionModel(model),
        name="shop",
        output_type=Refund,
        toolsets=[tools],
        capabilities=[durability, HandleDeferredToolCalls(ask)],
    )
    yield app, durability
    await app.aclose()


async def test_a_run_waiting_for_approval_holds_no_lease_and_resumes_on_the_answer(
    app: tuple[App, TenureDurability[None]], tenure_dsn: str
) -> None:
    producer, durability = app
    async with running(producer):
        job = await durability.start("refund order o-42", key="ticket-1")
        await wait_until_async(lambda: "token" in ASKED, timeout=20)
        await until_waiting(tenure_dsn, job.id)
        (held,) = rows(
            tenure_dsn, "SELECT lease_until FROM tenure_jobs WHERE id = %(id)s", {"id": job.id}
        )
        assert held["lease_until"] is None
        results = DeferredToolResults(approvals={call: True for call in ASKED["calls"]})
        answer = json.loads(json.dumps({"approvals": results.approvals}))
        resumed = await producer.answer_waitpoint(ASKED["token"], answer)
        assert resumed.state == "queued"
        output = await producer.wait(job.id, timeout=30, result_type=Refund)
    assert output == Refund(order="o-42", approved=True)
    assert len(MODEL_CALLS) == 2  # replays after the wait did not ask the model again
    steps = rows(
        tenure_dsn,
        "SELECT name, kind FROM tenure_steps WHERE job_id = %(id)s ORDER BY recorded_at",
        {"id": job.id},
    )
    kinds = {s["name"]: s["kind"] for s in steps}
    assert kinds["model.1"] == kinds["model.2"] == "model" and kinds["tool.1.0"] == "tool"
    with pytest.raises(tenure.Conflict):  # answered once
        await producer.answer_waitpoint(ASKED["token"], answer)


async def test_outside_a_worker_the_agent_is_a_plain_agent(
    app: tuple[App, TenureDurability[None]], tenure_dsn: str
) -> None:
    producer, durability = app
    plain = TenureDurability[None](producer)
    agent = Agent(
        FunctionModel(lambda messages, info: msg.ModelResponse(parts=[msg.TextPart("hi")])),
        name="plain",
        capabilities=[plain],
    )
    assert (await agent.run("hello")).output == "hi"  # run here, as any agent: no job
    assert rows(tenure_dsn, "SELECT count(*) AS n FROM tenure_jobs") == [{"n": 0}]
    assert not durability.in_durable_context and plain.tool == "agent:plain"
    with pytest.raises(RuntimeError, match="not inside a durable agent run"):
        run_context()


async def test_a_second_agent_under_the_same_name_is_refused(
    app: tuple[App, TenureDurability[None]],
) -> None:
    producer, _ = app
    with pytest.raises(tenure.PolicyError, match="already registered"):
        Agent(FunctionModel(model), name="shop", capabilities=[TenureDurability(producer)])


async def test_watching_a_run_tells_its_steps_waits_tools_and_output(
    app: tuple[App, TenureDurability[None]],
) -> None:
    producer, durability = app
    events: list[RunEvent] = []
    async with running(producer):
        job = await durability.start("refund order o-42", key="ticket-2")

        async def watch() -> None:
            async for event in producer.watch_run(job.id, timeout=60):
                events.append(event)
                if event.kind == "waiting":
                    approvals = {call: True for call in ASKED["calls"]}
                    await producer.answer_waitpoint(ASKED["token"], {"approvals": approvals})

        await asyncio.wait_for(watch(), 60)
    kinds = [(e.kind, e.step) for e in events]
    assert kinds == [
        ("model_step", "model.1"),
        ("step", "ask.deferred_tool_calls.1"),  # the token handed to the person, once
        ("waiting", None),
        ("tool_finished", "tool.1.0"),
        ("model_step", "model.2"),
        ("output", None),
    ]
    first = events[0].detail
    assert first["input_tokens"] > 0 and first["output_tokens"] > 0 and "model" in first
    assert events[2].detail["kind"] == "answer"  # a person's approval
    assert events[3].detail["tool"] == "refund"
    assert events[-1].detail == {"output": {"order": "o-42", "approved": True}}


async def test_a_durable_runs_tenure_tool_takes_a_models_slip_with_lax(tenure_dsn: str) -> None:
    """``TenureToolset(lax=True)`` converts "21" for an int on a durable run's child call too
    (before, only a plain run's call was converted; the child was refused, the model retried)."""
    app = App(tenure_dsn)

    @app.tool(lease=5, heartbeat=1, jitter=1)
    async def double(ctx: tenure.Context, n: int) -> int:
        return 2 * n

    def slip(messages: list[msg.ModelMessage], info: AgentInfo) -> msg.ModelResponse:
        returned = [p for m in messages for p in m.parts if isinstance(p, msg.ToolReturnPart)]
        if not returned:
            call = msg.ToolCallPart("double", {"n": "21"}, tool_call_id="call_0")
            return msg.ModelResponse(parts=[call])
        return msg.ModelResponse(parts=[msg.TextPart(str(returned[0].content))])

    durability = TenureDurability[None](app, lease=5, heartbeat=1, jitter=1)
    toolset = TenureToolset(app, lax=True, max_retries=0)
    Agent(FunctionModel(slip), name="lax", toolsets=[toolset], capabilities=[durability])
    try:
        async with running(app):
            assert await durability.run("double 21", key="lax-1", timeout=60) == "42"
        (child,) = await app.admin.jobs(tool="double")
        assert child.payload == {"n": 21}
    finally:
        await app.aclose()
