"""TenureToolset in one process: tools from signatures, one job per call, failures as the
framework's tool errors (without the tool's text), tenants, deferral and resume."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="needs the extra: pip install -e '.[pydantic-ai]'")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests
from tests.system.adapters.pydantic_ai.ledger_agent import ledger_agent, scripted
from tests.system.adapters.pydantic_ai.ledger_app import (
    REFUSED,
    SECRET,
    executions,
    open_gate,
)

from tenure import App, JobFailed, PolicyError, UnknownTool, WaitTimeout
from tenure.integrations.pydantic_ai import TenureToolset


async def test_the_model_sees_the_apps_typed_tools(app: App) -> None:
    toolset = TenureToolset(app, tools=["post_entry", "refuse"])
    seen: list[Any] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.extend(info.function_tools)
        return ModelResponse(parts=[TextPart("nothing to do")])

    await Agent(FunctionModel(respond), toolsets=[toolset]).run("hi")
    shown = {t.name: (t.description, t.parameters_json_schema) for t in seen}
    expected = {
        s["name"]: (s["description"], s["parameters"])
        for s in (app.registry.tool_schema("post_entry"), app.registry.tool_schema("refuse"))
    }
    assert shown == expected


async def test_a_call_is_one_job_under_the_conversation_and_call_id(app: App, worker: None) -> None:
    open_gate(app.dsn, "acct-1")
    model, seen = scripted(("post_entry", {"account": "acct-1", "cents": 500}))
    agent = Agent(model, toolsets=[TenureToolset(app)])

    result = await agent.run("post it", conversation_id="conv-1")

    job = await app.get(key="pydantic-ai:conv-1:call-0")
    assert (job.tool, job.state, job.payload) == (
        "post_entry",
        "succeeded",
        {"account": "acct-1", "cents": 500},
    )
    assert [(r.outcome, r.content) for r in seen] == [
        ("success", {"entry": "acct-1/500", "job": job.id})
    ]
    assert result.output == "done"
    assert executions(app.dsn, "acct-1") == [(job.id, 1)]


async def test_arguments_outside_the_signature_are_a_retry_and_queue_nothing(
    app: App, worker: None
) -> None:
    open_gate(app.dsn, "acct-2")
    model, seen = scripted(
        ("post_entry", {"account": "acct-2", "cents": "12"}),  # a string is not an int here
        ("post_entry", {"account": "acct-2", "cents": 12}),
    )
    await Agent(model, toolsets=[TenureToolset(app)]).run("post it", conversation_id="conv-2")

    assert [r.outcome for r in seen] == ["retried", "success"]
    assert "cents: Input should be a valid integer" in seen[0].model_response_str()
    jobs = await app.admin.jobs(tool="post_entry")
    assert [j.idempotency_key for j in jobs] == ["pydantic-ai:conv-2:call-1"]


async def test_with_lax_a_models_trivial_slip_is_converted_instead_of_retried(
    app: App, worker: None
) -> None:
    open_gate(app.dsn, "acct-9")
    model, seen = scripted(("post_entry", {"account": "acct-9", "cents": "12"}))
    await Agent(model, toolsets=[TenureToolset(app, lax=True)]).run("go", conversation_id="c-9")

    assert [r.outcome for r in seen] == ["success"]
    [job] = await app.admin.jobs(tool="post_entry")
    assert job.payload == {"account": "acct-9", "cents": 12}


@pytest.mark.parametrize(
    ("tool", "outcome", "told"),
    [
        ("refuse", "failed", "The call of refuse failed permanently (error code: permanent"),
        ("crash", "retried", "The call of crash failed (error code: error, 2 attempts)"),
    ],
)
async def test_a_failed_job_is_the_frameworks_tool_error_with_only_the_tools_classified_text(
    app: App, worker: None, tool: str, outcome: str, told: str
) -> None:
    model, seen = scripted((tool, {"account": "acct-3"}))
    result = await Agent(model, toolsets=[TenureToolset(app)]).run("go", conversation_id="c-3")

    assert [r.outcome for r in seen] == [outcome]
    assert told in seen[0].model_response_str()
    # A PermanentError's message is the tool's word to its caller, as MCP clients get it;
    # an unclassified exception's text stays with the operator.
    said = f"It said: {REFUSED}"
    assert (said in seen[0].model_response_str()) == (tool == "refuse")
    history = ModelMessagesTypeAdapter.dump_json(result.all_messages()).decode()
    assert "4111" not in history and "Jane" not in history
    job = await app.get(key="pydantic-ai:c-3:call-0")
    assert job.state == "failed"
    if tool == "crash":
        assert SECRET in json.dumps(job.error)  # kept, for the operator


async def test_tenants_never_share_a_job(app: App, worker: None) -> None:
    open_gate(app.dsn, "acct-5")
    for tenant in ("acme", "globex"):
        model, seen = scripted(("post_entry", {"account": "acct-5", "cents": 1}))
        toolset = TenureToolset(app, tenant=lambda ctx, t=tenant: t)  # type: ignore[misc]
        await Agent(model, toolsets=[toolset]).run("go", conversation_id="same")
        assert [r.outcome for r in seen] == ["success"]
    acme = await app.get(key="pydantic-ai:same:call-0", tenant="acme")
    globex = await app.get(key="pydantic-ai:same:call-0", tenant="globex")
    assert acme.id != globex.id
    assert len(executions(app.dsn, "acct-5")) == 2


async def test_a_long_call_is_deferred_and_resumed_with_its_jobs_result(
    app: App, worker: None
) -> None:
    agent, toolset = ledger_agent(app, "acct-6", 700, defer_after=0.2)

    first = await agent.run("post it", conversation_id="conv-6")

    requests = first.output
    assert isinstance(requests, DeferredToolRequests)
    (call,) = requests.calls
    pending = requests.metadata[call.tool_call_id]["tenure"]
    job = await app.get(pending["job_id"])
    assert job.state == "running" and pending["key"] == f"pydantic-ai:conv-6:{call.tool_call_id}"
    with pytest.raises(WaitTimeout):
        await toolset.results(requests, timeout=0.1)

    open_gate(app.dsn, "acct-6")
    results = await toolset.results(requests)
    final = await agent.run(message_history=first.all_messages(), deferred_tool_results=results)

    assert final.output == f'posted {{"entry": "acct-6/700", "job": {job.id}}}'
    assert executions(app.dsn, "acct-6") == [(job.id, 1)]


async def test_a_deferred_failure_resumes_as_the_same_tool_error(app: App, worker: None) -> None:
    model, seen = scripted(("refuse", {"account": "acct-7"}))
    toolset = TenureToolset(app, defer_after=0)
    agent = Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])
    first = await agent.run("go", conversation_id="c-7")
    assert isinstance(first.output, DeferredToolRequests)

    job_id = first.output.metadata["call-0"]["tenure"]["job_id"]
    with pytest.raises(JobFailed):
        await app.wait(job_id, timeout=20)
    results = await toolset.results(first.output)
    await agent.run(message_history=first.all_messages(), deferred_tool_results=results)

    assert [r.outcome for r in seen] == ["failed"]
    assert "error code: permanent" in seen[0].model_response_str()


def test_bad_settings_are_refused(app: App) -> None:
    with pytest.raises(UnknownTool, match="no_such_tool"):
        TenureToolset(app, tools=["no_such_tool"])
    for bad in (-1, float("nan"), True, "5"):
        with pytest.raises(PolicyError, match="defer_after"):
            TenureToolset(app, defer_after=bad)  # type: ignore[arg-type]
    with pytest.raises(PolicyError, match="max_retries"):
        TenureToolset(app, max_retries=-1)
