"""A gate that waits a week for a person holds no job running meanwhile: its job waits at a
waitpoint, and the verdict recorded from outside moves the run on; a late or second verdict,
an answer to the closed waitpoint, or a verdict past the waitpoint's deadline, is a Conflict
that writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from tests.integration.pipeline.pipeline_support import Tables
from tests.support.waiting import wait_until_async

import tenure
from tenure import Context, Stage, Verdict

HANDED_OUT: dict[str, int] = {}  # what the gate "sent" the reviewer: run:stage → token


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[tenure.App]:
    HANDED_OUT.clear()  # run ids restart at 1 in every test's schema
    app = tenure.App(tenure_dsn)

    @app.tool(lease=3, heartbeat=0.5, jitter=1)
    def review(ctx: Context, run_id: int, stage: str) -> Verdict:
        """Asks a person, then waits for them: for days, with no lease held."""
        wp = ctx.waitpoint("reviewer", timeout=7 * 24 * 3600)
        if wp.pending:
            HANDED_OUT[f"{run_id}:{stage}"] = ctx.token  # the reviewer's link carries it
            HANDED_OUT[f"{run_id}:{stage}:waitpoint"] = len(wp.token)
            ctx.suspend(wp, request={"please": "review"})
        raise AssertionError("the verdict ends this job; it is never called again")

    @app.tool(lease=3, heartbeat=0.5, jitter=1)
    def hurried_review(ctx: Context, run_id: int, stage: str) -> Verdict:
        """Waits one second for a person, then fails."""
        wp = ctx.waitpoint("reviewer", timeout=1, on_timeout="fail")
        if wp.pending:
            HANDED_OUT[f"{run_id}:{stage}"] = ctx.token
            ctx.suspend(wp)
        raise AssertionError("never called again: the verdict or the deadline ends it")

    @app.tool(lease=3, heartbeat=0.5, jitter=1)
    async def merge(ctx: Context) -> str:
        return "merged"

    app.pipeline(
        "human", [Stage("qa", tool="review", on={"approve": "merge", "reject": ()}), Stage("merge")]
    )
    app.pipeline(
        "hurried",
        [Stage("qa", tool="hurried_review", on={"approve": "merge", "reject": ()}), Stage("merge")],
    )
    yield app
    await app.aclose()


async def gate_waits(
    app: tenure.App, tables: Tables, pipeline: str, key: str
) -> tuple[tenure.Run, int]:
    """Start a run of ``pipeline``; once its gate's job waits at its waitpoint: the run and
    that job's id."""
    run = await app.start_run(pipeline, {}, idempotency_key=key)
    await wait_until_async(lambda: f"{run.id}:qa" in HANDED_OUT, timeout=20)
    (gate,) = [s for s in (await app.get_run(run.id)).stages if s.name == "qa"]
    assert gate.job is not None
    job_id = gate.job.id
    await wait_until_async(
        lambda: (
            tables.value("SELECT state FROM tenure_jobs WHERE id = %(id)s", {"id": job_id})
            == "waiting"
        ),
        timeout=20,
    )
    return run, job_id


async def test_a_waiting_gate_takes_its_verdict_with_no_job_running(
    app: tenure.App, tables: Tables
) -> None:
    worker = app.worker(poll_interval=0.1)
    running = asyncio.create_task(worker.run(handle_signals=False))
    try:
        run, job_id = await gate_waits(app, tables, "human", "pr-7")
        key = f"{run.id}:qa"
        # Nothing is running while the person thinks (the call ends once its suspension
        # is committed).
        await wait_until_async(lambda: worker._active == {}, timeout=20)

        done = await app.record_verdict(run.id, "qa", HANDED_OUT[key], Verdict("approve"))
        assert [s.name for s in done.stages] == ["qa", "merge"]
        # What a second verdict could write: the gate's stage, its job, its waitpoint and
        # journal rows about them (the worker meanwhile runs `merge`, which is not).
        gate_rows = """
            SELECT 'stage' AS what, to_jsonb(s) AS row FROM tenure_run_stages s
            WHERE s.name = 'qa'
            UNION ALL SELECT 'job', to_jsonb(j) FROM tenure_jobs j WHERE j.id = %(job)s
            UNION ALL SELECT 'waitpoint', to_jsonb(w) FROM tenure_waitpoints w
            UNION ALL SELECT 'event', to_jsonb(e) FROM tenure_events e WHERE e.job_id = %(job)s
            ORDER BY 1, 2
        """
        before = tables.rows(gate_rows, {"job": job_id})
        with pytest.raises(tenure.Conflict):  # a second verdict for the same gate
            await app.record_verdict(run.id, "qa", HANDED_OUT[key], Verdict("reject"))
        assert tables.rows(gate_rows, {"job": job_id}) == before
        finished = await app.wait_run(run.id, timeout=30)
        assert finished.state == "succeeded"
        waits = tables.rows("SELECT name, state FROM tenure_waitpoints")
        assert waits == [{"name": "reviewer", "state": "answered"}]  # closed by the verdict
    finally:
        worker.stop()
        await running


async def test_a_verdict_past_the_gates_deadline_is_a_conflict(
    app: tenure.App, tables: Tables
) -> None:
    """The deadline is the database's clock, compared in the verdict's own compare-and-set:
    with no rescuer running to sweep the waitpoint, a verdict past it still writes nothing."""
    worker = app.worker(poll_interval=0.1)
    running = asyncio.create_task(worker.run(handle_signals=False))
    try:
        run, job_id = await gate_waits(app, tables, "hurried", "pr-8")
    finally:
        worker.stop()  # and with it the rescuer: nothing sweeps the deadline
        await running
    await wait_until_async(
        lambda: tables.value(
            "SELECT clock_timestamp() > deadline FROM tenure_waitpoints WHERE job_id = %(id)s",
            {"id": job_id},
        ),
        timeout=30,
        interval=0.05,
    )
    everything = """
        SELECT 'stage' AS what, to_jsonb(s) AS row FROM tenure_run_stages s
        UNION ALL SELECT 'run', to_jsonb(r) FROM tenure_runs r
        UNION ALL SELECT 'job', to_jsonb(j) FROM tenure_jobs j
        UNION ALL SELECT 'waitpoint', to_jsonb(w) FROM tenure_waitpoints w
        UNION ALL SELECT 'event', to_jsonb(e) FROM tenure_events e
        ORDER BY 1, 2
    """
    before = tables.rows(everything)
    with pytest.raises(tenure.Conflict):
        await app.record_verdict(run.id, "qa", HANDED_OUT[f"{run.id}:qa"], Verdict("approve"))
    assert tables.rows(everything) == before
