"""An agent process SIGKILLed in the middle of a tool call, and a run that outlives its process.

The agent runs in a real subprocess (``tests.system.adapters.pydantic_ai.ledger_agent``)
that saves its message history after every step; the tool runs on a real worker
process and holds the call until the test opens its gate. Executions are counted
in a real table by the tool itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="needs the extra: pip install -e '.[pydantic-ai]'")

from pydantic_ai.messages import ModelResponse
from tests.support.workers import REPO_ROOT, WorkerGroup
from tests.system.adapters.pydantic_ai.ledger_agent import REQUESTS, ledger_agent, load_history
from tests.system.adapters.pydantic_ai.ledger_app import executions, open_gate
from tests.system.adapters.pydantic_ai.ledger_fixtures import kill_when

from tenure import App


def start_agent(dsn: str, history: Path, account: str, *extra: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.system.adapters.pydantic_ai.ledger_agent"]
    command += ["--history", str(history), "--account", account, "--conversation", "chat-1"]
    with open(history.with_suffix(".log"), "wb") as log:  # the child has its own copy
        return subprocess.Popen(
            [*command, *extra],
            cwd=REPO_ROOT,
            env={**os.environ, "TENURE_DSN": dsn},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def pending_call_id(history: Path) -> str | None:
    """The id of the tool call the saved history ends with, if it does."""
    if not history.exists():
        return None
    messages = load_history(history)
    last = messages[-1] if messages else None
    if isinstance(last, ModelResponse) and last.tool_calls:
        return last.tool_calls[0].tool_call_id
    return None


async def test_an_agent_killed_mid_call_finds_its_job_again(
    app: App, workers: WorkerGroup, tmp_path: Path
) -> None:
    workers.spawn("w1").wait_started()
    history = tmp_path / "history.json"
    agent_proc = start_agent(app.dsn, history, "acct-k")
    kill_when(  # in the middle of the call
        agent_proc,
        lambda: executions(app.dsn, "acct-k") and pending_call_id(history),
        "the agent never got its tool call running",
    )
    call_id = pending_call_id(history)
    ((job_id, _),) = executions(app.dsn, "acct-k")

    # A new process (this one) resumes the conversation from the saved history: no new
    # prompt, so pydantic-ai runs the pending call again, and its key finds the job.
    open_gate(app.dsn, "acct-k")
    agent, _ = ledger_agent(app, "acct-k", 1250)
    result = await agent.run(message_history=load_history(history))

    assert result.output == f'posted {{"entry": "acct-k/1250", "job": {job_id}}}'
    assert executions(app.dsn, "acct-k") == [(job_id, 1)]  # the tool ran once
    jobs = await app.admin.jobs(tool="post_entry")
    assert [(j.id, j.idempotency_key) for j in jobs] == [(job_id, f"pydantic-ai:chat-1:{call_id}")]


async def test_a_deferred_call_is_resumed_by_another_process(
    app: App, workers: WorkerGroup, tmp_path: Path
) -> None:
    workers.spawn("w1").wait_started()
    history = tmp_path / "history.json"
    agent_proc = start_agent(app.dsn, history, "acct-d", "--defer-after", "0.3")
    try:
        assert agent_proc.wait(60) == 0, history.with_suffix(".log").read_text()
    finally:
        if agent_proc.poll() is None:
            agent_proc.kill()
            agent_proc.wait()
    requests = REQUESTS.validate_json(history.with_suffix(".out").read_bytes())
    ((job_id, _),) = executions(app.dsn, "acct-d")  # still held at its gate
    assert (await app.get(job_id)).state == "running"

    open_gate(app.dsn, "acct-d")
    agent, toolset = ledger_agent(app, "acct-d", 1250)
    results = await toolset.results(requests)
    final = await agent.run(message_history=load_history(history), deferred_tool_results=results)

    assert final.output == f'posted {{"entry": "acct-d/1250", "job": {job_id}}}'
    assert executions(app.dsn, "acct-d") == [(job_id, 1)]
