"""`tenure demo --agent` end to end: a durable pydantic-ai agent run twice on real workers,
the second time with its run's worker SIGKILLed mid-run and its tool's worker mid-call, the
example case service counting effects, and the report's verdict."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("pydantic_ai", reason="needs the extra: pip install -e '.[pydantic-ai]'")

from tests.support.cli import run_tenure

pytestmark = pytest.mark.slow

ANSWER = "Invoice inv-2024-118 has 40 lines; I opened a case for customer c-4711."


def test_the_agent_demo_resumes_a_killed_run_with_model_calls_equal_to_steps(
    server_dsn: str,
) -> None:
    done = run_tenure(["demo", "--agent"], dsn=server_dsn, timeout=240)
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    assert done.returncode == 0, out[-4000:]
    assert re.search(r"SIGKILL worker-\d in the middle of run 2 \(job \d+, read_invoice", out)
    assert re.search(r"SIGKILL worker-\d in the middle of create_case \(job \d+\)", out), out
    assert re.search(rf"run 1 \(left alone\) answered\s+{re.escape(ANSWER)}\n", out)
    assert re.search(rf"run 2 \(workers killed\) answered\s+{re.escape(ANSWER)}\n", out)
    assert re.search(r"run 2: model calls / model steps\s+3 / 3\n", out)
    assert re.search(r"run 2: create_case jobs\s+1 \(succeeded, attempt 2\)\n", out)
    assert re.search(r"cases the receiver opened \(2 runs\)\s+2\n", out)
    assert re.search(r"duplicate side effects applied\s+0\n", out)
    assert "verdict: model calls = steps, one effect per tool call, the same answer" in out
