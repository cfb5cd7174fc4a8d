"""The README's "From an agent" example runs as written, against a real PostgreSQL, and
prints what the README says it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MARKER = "<!-- example: from-an-agent"


def example() -> tuple[str, str]:
    """The example's code and the output the README shows for it."""
    text = (ROOT / "README.md").read_text()
    after = text.split(MARKER, 1)[1]
    code, shown = re.findall(r"```(?:python)?\n(.*?)\n```", after, re.S)[:2]
    return code, shown


def test_the_from_an_agent_example_runs_and_prints_what_the_readme_says(
    tenure_dsn: str, tmp_path: Path
) -> None:
    code, shown = example()
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
