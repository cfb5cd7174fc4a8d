"""A gate that waits a week for a person holds no job running meanwhile: its job waits at a
waitpoint, and the verdict recorded from outside moves the run on; a late or second verdict,
or an answer to the closed waitpoint, is a Conflict that writes nothing."""

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
    async def merge(ctx: Context) -> str:
        return "merged"

    app.pipeline(
        "human", [Stage("qa", tool="review", on={"approve": "merge", "reject": ()}), Stage("merge")]
    )
    yield app
    await app.aclose()


async def test_a_waiting_gate_takes_its_verdict_with_no_job_running(
    app: tenure.App, tables: Tables
) -> None:
    worker = app.worker(poll_interval=0.1)
    running = asyncio.create_task(worker.run(handle_signals=False))
    try:
        run = await app.start_run("human", {}, idempotency_key="pr-7")
        key = f"{run.id}:qa"
        await wait_until_async(lambda: key in HANDED_OUT, timeout=20)
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
