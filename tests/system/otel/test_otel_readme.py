"""The tracing example (docs/operations/tracing.md) runs as written and prints one trace,
as the page shows."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.docs import printed_and_shown


def shape(lines: list[str]) -> tuple[list[str], set[str]]:
    """Each line with its trace id blanked, and the trace ids seen."""
    ids = {m.group(1) for line in lines if (m := re.search(r"trace=([0-9a-f]{32})", line))}
    return [re.sub(r"trace=[0-9a-f]{32}", "trace=<id>", line) for line in lines], ids


def test_the_tracing_example_prints_one_trace_as_the_page_says(
    tenure_dsn: str, tmp_path: Path
) -> None:
    lines, shown = printed_and_shown("traces", tenure_dsn, tmp_path)
    printed, ids = shape(lines)
    assert (printed, len(ids)) == (shape(shown)[0], 1), lines
