"""The tracing example (docs/operations/tracing.md) runs as written and prints one trace,
as the page shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from tests.support.docs import example

pytestmark = pytest.mark.storage


def shape(lines: list[str]) -> tuple[list[str], set[str]]:
    """Each line with its trace id blanked, and the trace ids seen."""
    ids = {m.group(1) for line in lines if (m := re.search(r"trace=([0-9a-f]{32})", line))}
    return [re.sub(r"trace=[0-9a-f]{32}", "trace=<id>", line) for line in lines], ids


def test_the_tracing_example_prints_one_trace_as_the_page_says(tenure_dsn: str) -> None:
    block = example("traces")
    code, shown = block.code, block.shown
    assert shown is not None, block.where
    env = {**os.environ, "TENURE_DSN": tenure_dsn, "PYTHONUNBUFFERED": "1"}
    run = [sys.executable, "-c", code]
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    printed, ids = shape(done.stdout.splitlines())
    assert (printed, len(ids)) == (shape(shown.splitlines())[0], 1), done.stdout
