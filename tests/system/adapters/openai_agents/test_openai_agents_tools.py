"""TenureTools with the OpenAI Agents SDK, offline (a fake `Model`): tools from signatures,
one job per call, failures as the error text the model gets (without the tool's text),
deferral through the run state, and a resuming process SIGKILLed in the middle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="needs the extra: pip install -e '.[openai-agents]'")

from agents import Runner, RunState
from tests.support.workers import REPO_ROOT, WorkerGroup
from tests.system.adapters.openai_agents.ledger_openai import OFFLINE, ledger_agent
from tests.system.adapters.pydantic_ai.ledger_app import (
    REFUSED,
    SECRET,
    executions,
    open_gate,
)
from tests.system.adapters.pydantic_ai.ledger_fixtures import kill_when

from tenure import App, PolicyError, UnknownTool
from tenure.integrations.openai_agents import TenureTools

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
    assert shown == {s["name"]: (s["description"], s["parameters"]) for s in app.tool_schemas()}


async def test_a_call_is_one_job_under_the_conversation_and_call_id(app: App, worker: None) -> None:
    open_gate(app.dsn, "a1")
    agent, _, model = ledger_agent(app, "post_entry", {"account": "a1", "cents": 500})

    result = await Runner.run(agent, "go", context=CHAT, run_config=OFFLINE)

    (job,) = await app.list_jobs(tool="post_entry")
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
    assert await app.list_jobs() == []


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
    (job,) = await app.list_jobs(tool=tool)
    assert job.state == "failed"
    if tool == "crash":
        assert SECRET in json.dumps(job.error)  # kept, for the operator


async def test_a_long_call_ends_the_run_and_resumes_from_its_state(app: App, worker: None) -> None:
    agent, tools, model = ledger_agent(
        app, "post_entry", {"account": "a4", "cents": 700}, defer_after=0.2
    )
    first = await Runner.run(agent, "go", context=CHAT, run_config=OFFLINE)
    (pending,) = first.interruptions
    saved = first.to_state().to_string()
    (job,) = await app.list_jobs(tool="post_entry")
    assert pending.tool_name == "post_entry" and job.state == "running"

    open_gate(app.dsn, "a4")
    state = await RunState.from_string(agent, saved)
    assert tools.approve(state) == 1
    final = await Runner.run(agent, state, run_config=OFFLINE)

    assert json.loads(outputs(model.inputs)[-1]) == {"entry": "a4/700", "job": job.id}
    assert final.final_output.startswith("posted ")
    assert executions(app.dsn, "a4") == [(job.id, 1)]


def test_bad_settings_are_refused(app: App) -> None:
    with pytest.raises(UnknownTool, match="no_such_tool"):
        TenureTools(app, conversation=lambda ctx: "c", tools=["no_such_tool"])
    with pytest.raises(PolicyError, match="defer_after"):
        TenureTools(app, conversation=lambda ctx: "c", defer_after=-1)


def run_agent(mode: str, state: Path, dsn: str, *extra: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.system.adapters.openai_agents.ledger_openai", mode]
    with open(state.with_suffix(f".{mode}.log"), "wb") as log:  # the child has its own copy
        return subprocess.Popen(
            [*command, "--state", str(state), "--account", "a5", *extra],
            cwd=REPO_ROOT,
            env={**os.environ, "TENURE_DSN": dsn},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


async def test_a_resuming_agent_killed_mid_call_and_resumed_again_runs_the_tool_once(
    app: App, workers: WorkerGroup, tmp_path: Path
) -> None:
    workers.spawn("w1").wait_started()
    state = tmp_path / "state.json"
    start = run_agent("start", state, app.dsn)
    assert start.wait(60) == 0, state.with_suffix(".start.log").read_text()
    ((job_id, _),) = executions(app.dsn, "a5")  # held at its gate

    marker = tmp_path / "resuming"
    resume = run_agent("resume", state, app.dsn, "--marker", str(marker))
    kill_when(resume, marker.exists, "the resume never started")  # while it waits for the job

    open_gate(app.dsn, "a5")
    agent, tools, model = ledger_agent(app, "post_entry", {"account": "a5", "cents": 1250})
    again = await RunState.from_string(agent, state.read_text(encoding="utf-8"))
    tools.approve(again)
    final = await Runner.run(agent, again, run_config=OFFLINE)

    assert json.loads(outputs(model.inputs)[-1]) == {"entry": "a5/1250", "job": job_id}
    assert final.final_output.startswith("posted ")
    assert executions(app.dsn, "a5") == [(job_id, 1)]
    assert [j.id for j in await app.list_jobs(tool="post_entry")] == [job_id]
