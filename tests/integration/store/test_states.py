"""The state types and the schema's CHECK constraints name the same states."""

from __future__ import annotations

import re
from typing import Any, get_args

import psycopg
import pytest

from tenure._states import (
    TERMINAL_STATES,
    Answerer,
    EndState,
    JobState,
    OnTimeout,
    RunState,
    StageKind,
    StageState,
    WaitpointState,
    has_ended,
)


def _allowed(dsn: str, table: str, column: str) -> set[str]:
    """The values a CHECK constraint on ``table`` allows ``column`` to take."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            """
            SELECT pg_get_constraintdef(c.oid)
            FROM pg_constraint c
            WHERE c.conrelid = %s::regclass AND c.contype = 'c'
            """,
            (table,),
        ).fetchall()
    pattern = re.compile(rf"\(\({column} = ANY \(ARRAY\[(.*?)\]\)\)\)")
    found = [m.group(1) for (definition,) in rows if (m := pattern.search(definition))]
    assert len(found) == 1, (table, column, rows)
    return set(re.findall(r"'([a-z_]+)'::text", found[0]))


@pytest.mark.parametrize(
    ("table", "column", "states"),
    [
        ("tenure_jobs", "state", JobState),
        ("tenure_runs", "state", RunState),
        ("tenure_run_stages", "state", StageState),
        ("tenure_run_stages", "kind", StageKind),
        ("tenure_waitpoints", "state", WaitpointState),
        ("tenure_waitpoints", "on_timeout", OnTimeout),
        ("tenure_waitpoints", "answered_by", Answerer),
    ],
)
def test_each_state_type_matches_its_check_constraint(
    tenure_dsn: str, table: str, column: str, states: Any
) -> None:
    assert _allowed(tenure_dsn, table, column) == set(get_args(states))


def test_ended_states_are_the_terminal_job_states() -> None:
    assert set(get_args(EndState)) == TERMINAL_STATES < set(get_args(JobState))
    assert [s for s in get_args(JobState) if has_ended(s)] == ["succeeded", "failed", "cancelled"]
    assert not has_ended(None)
