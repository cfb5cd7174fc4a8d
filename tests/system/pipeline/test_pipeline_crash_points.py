"""SIGKILL a worker at each point of a stage, then restart: the run ends, every effect once.

A review engine that recorded a gate's verdict and then dispatched the next step in a
separate call lost work in two windows: a crash before the gate recorded its verdict,
and a crash after the verdict was recorded but before the call that dispatched the
next step. Here the stage app's hooks kill the worker at exact points
of the QA gate and the stages around it. Only one worker runs until it dies, so the
tables show exactly what the crash left; then a second worker takes over.

The run is that engine's review: develop → QA (rejects round 1 with a reason) → correct → QA
(approves) → SecOps (approves).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.integration.pipeline.pipeline_support import Tables, worker_env
from tests.support.waiting import wait_until
from tests.support.workers import WorkerGroup

from tenure import App

EXPECTED = [
    ("develop", 1, "succeeded", None),
    ("qa", 1, "succeeded", "reject"),
    ("correct", 1, "succeeded", None),
    ("qa", 2, "succeeded", "approve"),
    ("secops", 1, "succeeded", "approve"),
]

# (point, stage the hook fires at, whether that stage's work runs a second time)
POINTS = [
    ("during", "qa", True),  # the gate is working; no verdict yet
    ("before_commit", "qa", True),  # the verdict is decided; nothing is written
    ("in_transaction", "qa", True),  # the transition ran; its transaction never committed
    ("after_commit", "qa", False),  # verdict and next step committed; the worker never heard
    ("during", "correct", True),  # during the next stage
    ("after_commit", "secops", False),  # the last verdict: the run ended with it
]


def stage_rows(tables: Tables, run_id: int) -> list[dict[str, object]]:
    return tables.rows(
        "SELECT s.name, s.round, s.state, s.decision, j.state AS job_state, j.attempt"
        " FROM tenure_run_stages s LEFT JOIN tenure_jobs j ON j.id = s.job_id"
        " WHERE s.run_id = %(run)s ORDER BY s.id",
        {"run": run_id},
    )


def check_what_the_crash_left(tables: Tables, run_id: int, point: str, stage: str) -> None:
    rows = {(r["name"], r["round"]): r for r in stage_rows(tables, run_id)}
    hit = rows[(stage, 1)]
    if point == "after_commit":
        # The verdict is recorded only together with its consequence.
        assert hit["state"] == "succeeded" and hit["job_state"] == "succeeded", rows
        if stage == "qa":
            assert rows[("correct", 1)]["state"] == "open", rows
            assert rows[("correct", 1)]["job_state"] == "queued", rows
        else:
            state = tables.value("SELECT state FROM tenure_runs WHERE id = %(id)s", {"id": run_id})
            assert state == "succeeded"
        return
    # Before the commit nothing of the outcome exists: the stage is open, its job still
    # held by the dead worker (until its lease runs out), and no later stage exists.
    assert hit["state"] == "open" and hit["job_state"] == "running", rows
    later = [key for key in rows if list(rows).index(key) > list(rows).index((stage, 1))]
    assert later == [], rows
    succeeded = tables.value(
        "SELECT count(*) FROM tenure_events e JOIN tenure_run_stages s ON s.job_id = e.job_id"
        " WHERE s.run_id = %(run)s AND s.name = %(stage)s AND e.kind = 'succeeded'",
        {"run": run_id, "stage": stage},
    )
    assert succeeded == 0


@pytest.mark.parametrize(
    ("point", "stage", "reruns"), POINTS, ids=[f"{p}-{s}" for p, s, _ in POINTS]
)
def test_sigkill_at_a_point_of_a_stage_then_restart(
    point: str,
    stage: str,
    reruns: bool,
    ops: App,
    stage_workers: WorkerGroup,
    tables: Tables,
    crash_dir: Path,
    tenure_dsn: str,
) -> None:
    env = worker_env(tenure_dsn, crash_dir)
    run = ops.sync.start_run(
        "review", {"rejects": {"qa": 1}, "pause": 0.05}, idempotency_key=f"pr:{point}:{stage}"
    )
    (crash_dir / f"{point}-{run.id}-{stage}").touch()

    # One slot: while the stage commits, the worker cannot claim the next one, so the
    # tables show the crash's leftovers exactly.
    first = stage_workers.spawn("first", concurrency=1, env=env)
    wait_until(lambda: not first.alive, timeout=30, message=f"no crash {point} at {stage}")
    assert first.proc.returncode == -9, first.log()[-2000:]
    check_what_the_crash_left(tables, run.id, point, stage)

    stage_workers.spawn("second", concurrency=2, env=env)
    done = ops.sync.wait_run(run.id, timeout=30)
    assert [(s.name, s.round, s.state, s.decision) for s in done.stages] == EXPECTED

    # Each stage execution applied its effect exactly once ...
    effects = tables.rows(
        "SELECT stage, round, count(*) AS n FROM pipeline_effects WHERE run_id = %(run)s"
        " GROUP BY stage, round",
        {"run": run.id},
    )
    assert {(e["stage"], e["round"]): e["n"] for e in effects} == {
        (name, round_): 1 for name, round_, _, _ in EXPECTED
    }
    # ... committed once, and only the interrupted stage ran twice; a committed stage never.
    attempts = tables.rows(
        "SELECT stage, round, count(*) AS n FROM pipeline_attempts WHERE run_id = %(run)s"
        " GROUP BY stage, round",
        {"run": run.id},
    )
    twice = {(stage, 1)} if reruns else set()
    assert {(a["stage"], a["round"]): a["n"] for a in attempts} == {
        (name, round_): 2 if (name, round_) in twice else 1 for name, round_, _, _ in EXPECTED
    }
    assert ops.sync.admin.summary()["duplicate_commits"] == 0
