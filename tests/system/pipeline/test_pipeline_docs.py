"""The pipelines guide's example (docs/guides/pipelines.md) runs as written, as the script a
reader saves: a patch without a test goes back to ``correct``, comes back to the same gate
in round 2, passes ``secops``, and each of the gate's decisions reaches the outbox's tool
once; it prints what the page shows, and the database agrees."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from tests.support.docs import printed_and_shown

pytestmark = pytest.mark.storage


def test_the_review_example_sends_an_untested_patch_back_and_then_succeeds(
    tenure_dsn: str, tmp_path: Path
) -> None:
    printed, shown = printed_and_shown("pipeline", tenure_dsn, tmp_path)
    assert printed == shown
    with psycopg.connect(tenure_dsn) as db:
        ran = db.execute(
            "SELECT tool, count(*), max(attempt) FROM tenure_jobs WHERE state = 'succeeded'"
            " GROUP BY tool ORDER BY tool"
        ).fetchall()
    # Each stage's job ran once per round, each delivery once: nothing twice.
    assert ran == [
        ("correct", 1, 1),
        ("develop", 1, 1),
        ("qa", 2, 1),
        ("record_gate_status", 2, 1),
        ("secops", 1, 1),
    ], ran
