"""`tenure demo --agent` end to end: real workers, one SIGKILLed mid-call, the example
case service, and the report's verdict."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("pydantic_ai", reason="needs the extra: pip install -e '.[pydantic-ai]'")

from tests.support.cli import run_tenure

pytestmark = pytest.mark.slow


def test_the_agent_demo_gets_one_answer_and_one_effect_across_a_sigkill(server_dsn: str) -> None:
    done = run_tenure(["demo", "--agent"], dsn=server_dsn, timeout=180)
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    assert done.returncode == 0, out[-4000:]
    assert re.search(r"SIGKILL worker-\d in the middle of the call \(attempt 1\)", out), out
    assert re.search(r"answers the agent gave\s+1\n", out)
    assert re.search(r"its answer\s+I opened case \d+ for customer c-4711\.\n", out)
    assert re.search(r"jobs for its tool call\s+1\n", out)
    assert re.search(r"that job\s+succeeded, attempt 2\n", out)
    assert re.search(r"cases the receiver opened\s+1\n", out)
    assert "verdict: the agent got one answer, the receiver saw one effect" in out
