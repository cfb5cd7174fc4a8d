"""The "From an agent" example (docs/guides/agents.md) runs as written, against a real
PostgreSQL, and prints what the page says it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.docs import example

pytestmark = pytest.mark.storage


def test_the_from_an_agent_example_runs_and_prints_what_the_page_says(
    tenure_dsn: str, tmp_path: Path
) -> None:
    block = example("from-an-agent")
    code, shown = block.code, block.shown
    assert shown is not None, block.where
    script = tmp_path / "agent_example.py"
    script.write_text(code)
    env = {**os.environ, "TENURE_DSN": tenure_dsn, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    printed = done.stdout.splitlines()
    expected = shown.splitlines()
    head, tail = expected[: expected.index("...")], expected[expected.index("...") + 1 :]
    assert printed[: len(head)] == head, printed
    assert printed[-len(tail) :] == tail, printed
    # Between them, one line per pushed change: states in order, progress counting up.
    middle = printed[len(head) : -len(tail)]
    pages = [int(m.group(1)) for line in middle if (m := re.search(r"page (\d+)", line))]
    assert pages == sorted(pages) and len(set(pages)) == len(pages), middle
    assert all(line.startswith("running page") for line in middle), middle
