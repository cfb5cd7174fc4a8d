"""The OpenAI Agents SDK example of docs/guides/agent-frameworks.md runs as written,
offline.

The page's module is saved and imported as a reader's would be (``app``, ``agent`` and
``main`` at its top level); only the model is replaced, with the adapter tests' local
`LedgerModel` (tracing off: nothing leaves the machine), which calls ``open_case`` and
then reports what came back. The call outlasts ``defer_after``, so the run is
interrupted; the saved state, approved, resumes it with the job's result: one job,
under the conversation's key, run once.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import psycopg
import pytest
from tests.adapters.openai_agents.ledger_openai import LedgerModel
from tests.support.docs import example

pytestmark = pytest.mark.storage


async def test_the_interrupted_run_is_resumed_with_its_jobs_result(
    tenure_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    module = tmp_path / "support_agent.py"
    module.write_text(example("openai-agents").code, encoding="utf-8")
    names = runpy.run_path(str(module), run_name="support_agent")
    model = LedgerModel("open_case", {"customer_id": "c-4711"})
    names["agent"].model = model

    await names["main"]()

    assert capsys.readouterr().out.splitlines() == [
        "interrupted: ['open_case']",
        'posted {"case_id": "case-c-4711"}',
    ]
    with psycopg.connect(tenure_dsn) as db:
        jobs = db.execute("SELECT tool, idempotency_key, state, attempt FROM tenure_jobs")
        ((tool, key, state, attempt),) = jobs.fetchall()
    assert (tool, state, attempt) == ("open_case", "succeeded", 1)
    assert key.startswith("openai-agents:chat-42:call-"), key
