"""The "From an agent" example (docs/guides/agents.md) runs as written, against a real
PostgreSQL, and prints what the page says it prints."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.docs import printed_and_shown


def test_the_from_an_agent_example_runs_and_prints_what_the_page_says(
    tenure_dsn: str, tmp_path: Path
) -> None:
    printed, expected = printed_and_shown("from-an-agent", tenure_dsn, tmp_path)
    head, tail = expected[: expected.index("...")], expected[expected.index("...") + 1 :]
    assert printed[: len(head)] == head, printed
    assert printed[-len(tail) :] == tail, printed
    # Between them, one line per pushed change: states in order, progress counting up.
    middle = printed[len(head) : -len(tail)]
    pages = [int(m.group(1)) for line in middle if (m := re.search(r"page (\d+)", line))]
    assert pages == sorted(pages) and len(set(pages)) == len(pages), middle
    assert all(line.startswith("running page") for line in middle), middle
