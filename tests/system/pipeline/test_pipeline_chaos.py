"""300 runs of 5 stages while every worker — and with it every rescuer — is SIGKILLed 8 times.

Three worker processes run the stage app's "chain" pipeline (s1 → s2 → s3, a gate →
s4 → s5). Eight times, at random points of the work, all of them are killed at once and
three new ones started. Afterwards the tables must show: every run succeeded, exactly
one effect per stage (1,500), stages in order, and no committed stage ever run again.

Set ``PIPELINE_CHAOS_SEED`` to replay a run's kill schedule.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from tests.integration.pipeline.pipeline_support import Tables
from tests.support.waiting import wait_until
from tests.support.workers import WorkerGroup

from tenure import App

RUNS = 300
STAGES = ("s1", "s2", "s3", "s4", "s5")
KILLS = 8
WORKERS = 3
CONCURRENCY = 10
PAUSE = 0.35  # a stage's work takes 0.18-0.53 s


def committed(tables: Tables) -> int:
    return int(
        tables.value(
            "SELECT count(*) FROM tenure_run_stages WHERE kind = 'stage' AND state = 'succeeded'"
        )
    )


@pytest.mark.slow
def test_300_runs_of_5_stages_survive_8_kills_of_every_worker(
    ops: App, stage_workers: WorkerGroup, tables: Tables, tenure_dsn: str
) -> None:
    seed = int(os.environ.get("PIPELINE_CHAOS_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    env = {"PIPELINE_TEST_DSN": tenure_dsn}
    runs = [
        ops.sync.start_run("chain", {"pause": PAUSE}, idempotency_key=f"chaos:{i}").id
        for i in range(RUNS)
    ]
    generation = [0]

    def start_workers() -> None:
        generation[0] += 1
        for i in range(WORKERS):
            stage_workers.spawn(f"g{generation[0]}-w{i}", concurrency=CONCURRENCY, env=env)

    began = time.monotonic()
    start_workers()
    # Kill points spread over the work (a share of committed stages), so each kill hits
    # stages in flight; where inside a stage it lands is up to chance.
    total = RUNS * len(STAGES)
    marks = sorted(rng.sample(range(total // 20, total * 9 // 10), KILLS))
    in_flight = []
    for mark in marks:

        def reached(m: int = mark) -> bool:
            return committed(tables) >= m

        wait_until(reached, timeout=60, interval=0.05)
        in_flight.append(tables.value("SELECT count(*) FROM tenure_jobs WHERE state = 'running'"))
        for worker in stage_workers:
            if worker.alive:
                worker.kill()
        start_workers()
    wait_until(
        lambda: tables.value("SELECT count(*) FROM tenure_runs WHERE state <> 'running'") == RUNS,
        timeout=120,
        interval=0.1,
        message=f"seed {seed}: runs still running",
    )
    elapsed = time.monotonic() - began

    context = f"seed {seed}, {elapsed:.1f} s, running at each kill {in_flight}"
    assert all(n > 0 for n in in_flight), context
    states = tables.rows("SELECT state, count(*) AS n FROM tenure_runs GROUP BY state")
    assert states == [{"state": "succeeded", "n": RUNS}], context

    # Exactly one effect per stage of every run, in the pipeline's order.
    effects = tables.rows("SELECT run_id, stage, round FROM pipeline_effects ORDER BY seq")
    assert len(effects) == RUNS * len(STAGES), context
    order: dict[int, list[str]] = {run: [] for run in runs}
    for effect in effects:
        assert effect["round"] == 1, effect
        order[effect["run_id"]].append(effect["stage"])
    assert all(stages == list(STAGES) for stages in order.values()), context
    rows = tables.rows(
        "SELECT run_id, array_agg(name ORDER BY id) AS names,"
        " bool_and(state = 'succeeded') AS ok FROM tenure_run_stages GROUP BY run_id"
    )
    assert all(r["names"] == list(STAGES) and r["ok"] for r in rows) and len(rows) == RUNS

    # No committed stage ran again: no attempt under a token newer than the committing one,
    # no claim after the commit, no second commit.
    late_attempts = tables.value(
        "SELECT count(*) FROM pipeline_attempts a JOIN tenure_jobs j ON j.id = a.job_id"
        " WHERE a.token > j.token"
    )
    late_claims = tables.value(
        "SELECT count(*) FROM tenure_events c JOIN tenure_events s"
        " ON s.job_id = c.job_id AND s.kind = 'succeeded'"
        " WHERE c.kind = 'job_claimed' AND c.id > s.id"
    )
    summary = ops.sync.admin.summary()
    assert (late_attempts, late_claims, summary["duplicate_commits"]) == (0, 0, 0), context
    attempts = tables.value("SELECT count(*) FROM pipeline_attempts")
    print(
        f"\n{context}; {attempts} stage attempts for {len(effects)} effects, "
        f"{summary.get('reclaims', 0)} reclaims"
    )
