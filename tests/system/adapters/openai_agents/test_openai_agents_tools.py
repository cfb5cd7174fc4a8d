"""TenureTools and TenureRunner with the OpenAI Agents SDK, offline (a fake `Model`): tools
from signatures, one job per call, failures as the error text the model gets (without the
tool's text); in a durable run, calls as child jobs keyed by position, the model asked once
per step, approval through a waitpoint (the SDK's own ``needs_approval``, passed on) and
input guardrails before any tool. Kills of durable runs: tests/system/durable."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("agents", reason="needs the extra: pip install -e '.[openai-agents]'")

from agents import GuardrailFunctionOutput, Runner, input_guardrail
from agents.exceptions import UserError
from tests.integration.durable.conftest import running
from tests.support.waiting import wait_until_async
from tests.system.adapters.openai_agents.ledger_openai import OFFLINE, ledger_agent
from tests.system.adapters.pydantic_ai.ledger_app import (
    REFUSED,
    SECRET,
    executions,
    open_gate,
)

from tenure import App, JobFailed, UnknownTool
from tenure.integrations.openai_agents import TenureRunner, TenureTools

CHAT = {"chat": "chat-1"}


def outputs(inputs: list[Any]) -> list[str]:
    """The function-call outputs the model was sent, in order."""
    return [
        i["output"]
        for items in inputs
        if isinstance(items, list)
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]


async def test_the_model_sees_the_apps_typed_tools(app: App, worker: None) -> None:
    open_gate(app.dsn, "a0")
    agent, _, model = ledger_agent(app, "post_entry", {"account": "a0", "cents": 1})
    await Runner.run(agent, "go", context=CHAT, run_config=OFFLINE)
    shown = {t.name: (t.description, t.params_json_schema) for t in model.tools}  # type: ignore[union-attr]
    assert shown == {
        s["name"]: (s["description"], s["parameters"]) for s in app.registry.tool_schemas()
    }


async def test_a_call_is_one_job_under_the_conversation_and_call_id(app: App, worker: None) -> None:
    open_gate(app.dsn, "a1")
    agent, _, model = ledger_agent(app, "post_entry", {"account": "a1", "cents": 500})

    result = await Runner.run(agent, "go", context=CHAT, run_config=OFFLINE)

    (job,) = await app.admin.jobs(tool="post_entry")
    call_id = job.idempotency_key.rsplit(":", 1)[1]
    assert job.idempotency_key == f"openai-agents:chat-1:{call_id}" and call_id.startswith("call-")
    assert json.loads(outputs(model.inputs)[0]) == {"entry": "a1/500", "job": job.id}
    assert result.final_output == f"posted {outputs(model.inputs)[0]}"
    assert executions(app.dsn, "a1") == [(job.id, 1)]


async def test_arguments_outside_the_signature_are_told_and_queue_nothing(
    app: App, worker: None
) -> None:
    agent, _, model = ledger_agent(app, "post_entry", {"account": "a2", "cents": "12"})
    await Runner.run(agent, "go", context=CHAT, run_config=OFFLINE)

    (told,) = outputs(model.inputs)
    assert told.startswith("The arguments for post_entry do not fit its schema:")
    assert "cents: Input should be a valid integer" in told
    assert await app.admin.jobs() == []


@pytest.mark.parametrize(
    ("tool", "told"),
    [
        ("refuse", "The call of refuse failed permanently (error code: permanent"),
        ("crash", "The call of crash failed (error code: error, 2 attempts)"),
    ],
)
async def test_a_failed_job_is_the_error_text_with_only_the_tools_classified_text(
    app: App, worker: None, tool: str, told: str
) -> None:
    agent, _, model = ledger_agent(app, tool, {"account": "a3"})
    result = await Runner.run(agent, "go", context=CHAT, run_config=OFFLINE)

    (said,) = outputs(model.inputs)
    assert said.startswith(told)
    # A PermanentError's message is the tool's word to its caller, as MCP clients get it;
    # an unclassified exception's text stays with the operator.
    assert (f"It said: {REFUSED}" in said) == (tool == "refuse")
    assert "4111" not in json.dumps(model.inputs, default=str)
    assert "4111" not in str(result.final_output)
    (job,) = await app.admin.jobs(tool=tool)
    assert job.state == "failed"
    if tool == "crash":
        assert SECRET in json.dumps(job.error)  # kept, for the operator


async def test_with_lax_a_models_slip_is_converted_in_a_plain_and_a_durable_run(
    app: App,
) -> None:
    """Both roads of a call (its key from the conversation, or a child of a durable run)
    convert a model's trivial slip ("12" for an int) when asked to, rather than refuse it."""
    open_gate(app.dsn, "l1")
    open_gate(app.dsn, "l2")
    plain, _, _ = ledger_agent(app, "post_entry", {"account": "l1", "cents": "12"}, lax=True)
    durable, _, _ = ledger_agent(app, "post_entry", {"account": "l2", "cents": "13"})
    lax_tools = list(TenureTools(app, lax=True).tools)
    runner = TenureRunner(app, durable.clone(tools=lax_tools), name="l")
    async with running(app):  # a worker that knows the run's tool
        await Runner.run(plain, "go", context=CHAT, run_config=OFFLINE)
        await runner.run("go", key="lax-2", timeout=60)
    jobs = await app.admin.jobs(tool="post_entry")
    assert sorted(j.payload["cents"] for j in jobs if j.payload) == [12, 13]


def test_bad_settings_are_refused(app: App) -> None:
    with pytest.raises(UnknownTool, match="no_such_tool"):
        TenureTools(app, conversation=lambda ctx: "c", tools=["no_such_tool"])


async def test_outside_a_durable_run_a_call_needs_its_conversation(app: App) -> None:
    agent, _, _ = ledger_agent(app, "post_entry", {"account": "a3", "cents": 1})
    agent = agent.clone(tools=list(TenureTools(app).tools))
    with pytest.raises(UserError, match="conversation="):  # the SDK wraps the PolicyError
        await Runner.run(agent, "go", run_config=OFFLINE)
    assert await app.admin.jobs() == []


async def test_a_durable_runs_calls_are_child_jobs_and_its_model_is_asked_once_a_step(
    app: App,
) -> None:
    open_gate(app.dsn, "d1")
    agent, _, model = ledger_agent(app, "post_entry", {"account": "d1", "cents": 300})
    runner = TenureRunner(app, agent.clone(tools=list(TenureTools(app).tools)), name="ledger")
    async with running(app):  # a worker that knows the run's tool
        output = await runner.run("go", key="chat-9", timeout=60)
    (run,) = await app.admin.jobs(tool="agent:ledger")
    (job,) = await app.admin.jobs(tool="post_entry")
    assert job.idempotency_key == f"tool-job:{run.id}:tool.1.0"  # the run and the position
    assert output == f"posted {outputs(model.inputs)[0]}"
    assert len(model.inputs) == 2  # two model steps; the replays after the wait never asked
    assert executions(app.dsn, "d1") == [(job.id, 1)]
    again = await runner.start("go", key="chat-9")
    assert again.id == run.id and not again.created  # one run per key


async def test_a_durable_run_waits_for_approval_at_a_waitpoint_holding_no_lease(app: App) -> None:
    open_gate(app.dsn, "d2")
    handed: list[tuple[str, list[dict[str, Any]]]] = []
    agent, _, _ = ledger_agent(app, "post_entry", {"account": "d2", "cents": 5})
    tools = TenureTools(app, needs_approval=True)  # the SDK's approval, left to the SDK
    runner = TenureRunner(
        app,
        agent.clone(tools=list(tools.tools)),
        name="careful",
        on_approval=lambda token, requests: handed.append((token, requests)),
    )
    async with running(app):
        run = await runner.start("go", key="chat-10")
        await wait_until_async(lambda: handed, timeout=30, message="never asked for approval")
        await wait_until_async(
            lambda: _state(app, run.id, "waiting"), timeout=30, message="the run never waited"
        )
        assert (await app.get(run.id)).lease_until is None
        assert await app.admin.jobs(tool="post_entry") == []  # nothing ran before the decision
        ((token, (request,)),) = handed
        arguments = json.loads(request["arguments"])
        assert request["tool"] == "post_entry" and arguments["account"] == "d2"
        await app.answer_waitpoint(token, {"approve": [request["call_id"]]})
        output = await app.wait(run.id, timeout=60)
    (job,) = await app.admin.jobs(tool="post_entry")
    assert output.startswith("posted ") and executions(app.dsn, "d2") == [(job.id, 1)]
    assert len(handed) == 1  # the handler ran once, however often the run was replayed


async def test_input_guardrails_run_before_any_tool_of_a_durable_run(app: App) -> None:
    checked: list[str] = []

    @input_guardrail(run_in_parallel=True)  # the SDK would run it beside the first turn
    async def no_refunds(ctx: Any, agent: Any, given: Any) -> GuardrailFunctionOutput:
        checked.append(str(given))
        await asyncio.sleep(0.5)  # a slow check: the model answers long before it
        return GuardrailFunctionOutput(output_info={"refund": True}, tripwire_triggered=True)

    agent, _, model = ledger_agent(app, "post_entry", {"account": "d3", "cents": 5})
    guarded = agent.clone(tools=list(TenureTools(app).tools), input_guardrails=[no_refunds])
    runner = TenureRunner(app, guarded, name="guarded", max_attempts=1)
    async with running(app):
        run = await runner.start("refund it", key="chat-11")
        with pytest.raises(JobFailed):
            await app.wait(run.id, timeout=60)
    failed = await app.get(run.id)
    assert failed.error is not None and failed.error["type"] == "InputGuardrailTripwireTriggered"
    assert checked == ["refund it"] and model.inputs == []  # judged first, alone
    assert await app.admin.jobs(tool="post_entry") == []  # no tool job was ever queued


async def _state(app: App, job_id: int, state: str) -> bool:
    return (await app.get(job_id)).state == state
