"""The rescuer: exact, and safe to run on every replica at once.

Rows are taken FOR UPDATE SKIP LOCKED and changed only while their state still calls
for it, so two rescuers split the work and neither repeats the other's. Expired leases
with attempts left are left to the claim, which counts each take-over as a reclaim.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from tests.integration.pipeline.pipeline_support import Tables

import tenure
from tenure import Context, Stage, Verdict
from tenure._maintenance._rescuer import Rescuer, RescuerConfig
from tenure._store import Finish, Store

LEASE_MS = 60_000


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[tenure.App]:
    app = tenure.App(tenure_dsn)

    @app.tool(lease=60, heartbeat=20, jitter=10, max_attempts=3)
    async def t(ctx: Context) -> None: ...

    @app.tool(lease=60, heartbeat=20, jitter=10, max_attempts=3)
    async def gate(ctx: Context) -> Verdict:
        return Verdict("approve")

    app.pipeline("one", [Stage("only", tool="t")])
    app.pipeline(
        "two", [Stage("check", tool="gate", on={"approve": "after"}), Stage("after", tool="t")]
    )
    yield app
    await app.aclose()


@pytest.fixture
async def stores(tenure_dsn: str) -> AsyncIterator[list[Store]]:
    opened = [Store(tenure_dsn, max_size=2) for _ in range(3)]
    for store in opened:
        await store.open()
    yield opened
    for store in opened:
        await store.close()


EXPIRE_ALL = """
UPDATE tenure_jobs
SET state = 'running', owner = 'ghost', token = nextval('tenure_fence_token'),
    attempt = CASE WHEN id %% 2 = 0 THEN max_attempts ELSE 1 END,
    heartbeat_at = clock_timestamp() - interval '90 seconds',
    lease_until = clock_timestamp() - interval '1 second'
WHERE id = ANY(%(ids)s)
"""


async def test_two_rescuers_at_once_over_1000_expired_rows_touch_no_row_twice(
    app: tenure.App, stores: list[Store], tables: Tables, caplog: pytest.LogCaptureFixture
) -> None:
    # 1,000 expired rows: 100 stage jobs and 900 plain jobs; 100 more runs lose their job.
    starts = [app.start_run("one", {}, idempotency_key=f"r{i}") for i in range(200)]
    runs = list(await asyncio.gather(*starts))
    await app.enqueue_many("t", [{}] * 900)
    vanished = {r.id for r in runs[100:]}
    tables.rows(
        "DELETE FROM tenure_jobs WHERE idempotency_key LIKE 'run:%%' AND"
        " split_part(idempotency_key, ':', 2)::bigint = ANY(%(runs)s)",
        {"runs": list(vanished)},
    )
    ids = [row["id"] for row in tables.rows("SELECT id FROM tenure_jobs ORDER BY id")]
    assert len(ids) == 1000
    tables.rows(EXPIRE_ALL, {"ids": ids})
    exhausted = {i for i in ids if i % 2 == 0}
    stage_of = {
        row["job_id"]: row["run_id"]
        for row in tables.rows("SELECT job_id, run_id FROM tenure_run_stages")
    }
    doomed_runs = {stage_of[i] for i in exhausted if i in stage_of}
    claimable_before = tables.rows(
        "SELECT * FROM tenure_jobs WHERE id = ANY(%(ids)s) ORDER BY id",
        {"ids": sorted(set(ids) - exhausted)},
    )

    config = RescuerConfig(batch=50, run_batch=10)
    first, second = (Rescuer(store, config) for store in stores[:2])
    with caplog.at_level(logging.INFO, logger="tenure.rescuer"):
        a, b = await asyncio.gather(first.run_once(), second.run_once())
    assert a.acted and b.acted  # both took part
    assert not set(a.failed) & set(b.failed)
    assert set(a.failed) | set(b.failed) == exhausted
    assert a.adopted + b.adopted == len(doomed_runs)
    assert a.redispatched + b.redispatched == len(vanished)
    assert a.resent + b.resent + a.ended + b.ended == 0
    assert [r.getMessage().split()[0] for r in caplog.records] == ["event=rescued"] * 2

    # Every exhausted job failed once, with the reason, and its run failed with it.
    failed_events = tables.rows(
        "SELECT job_id, count(*) AS n, min(detail ->> 'code') AS code FROM tenure_events"
        " WHERE kind = 'failed' GROUP BY job_id"
    )
    assert {e["job_id"] for e in failed_events} == exhausted
    assert {(e["n"], e["code"]) for e in failed_events} == {(1, "lease_expired")}
    errors = tables.rows(
        "SELECT error FROM tenure_runs WHERE id = ANY(%(ids)s)", {"ids": list(doomed_runs)}
    )
    assert {(e["error"]["code"], e["error"]["cause"]) for e in errors} == {
        ("stage_failed", "lease_expired")
    }
    # Each vanished stage job was dispatched again, once, under its own key.
    again = tables.rows(
        "SELECT s.run_id, j.idempotency_key, j.state FROM tenure_run_stages s"
        " JOIN tenure_jobs j ON j.id = s.job_id WHERE s.run_id = ANY(%(runs)s)",
        {"runs": list(vanished)},
    )
    assert {(r["idempotency_key"], r["state"]) for r in again} == {
        (f"run:{run}:only:1", "queued") for run in vanished
    }
    # Expired leases with attempts left were not touched: the claim takes them.
    assert (
        tables.rows(
            "SELECT * FROM tenure_jobs WHERE id = ANY(%(ids)s) ORDER BY id",
            {"ids": sorted(set(ids) - exhausted)},
        )
        == claimable_before
    )

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tenure.rescuer"):
        idle = await asyncio.gather(first.run_once(), second.run_once())
    assert not any(report.acted for report in idle)
    assert caplog.records == []  # silent when there was nothing to do

    claimed = await stores[2].claim("survivor", {"t": LEASE_MS}, 1000)
    reclaimed = [job for job in claimed if job.previous_token is not None]
    assert len(reclaimed) == len(claimable_before)
    assert {job.previous_owner for job in reclaimed} == {"ghost"}
    assert len(claimed) == len(claimable_before) + len(vanished)


async def test_runs_whose_stage_ended_outside_a_transition_are_moved_on(
    app: tenure.App, stores: list[Store], tables: Tables
) -> None:
    store = stores[0]
    by_old_worker = await app.start_run("two", {})
    cancelled = await app.start_run("two", {})
    edited = await app.start_run("two", {})
    # An older worker (no pipelines) commits the gate's verdict as a plain job.
    claimed = {j.id: j for j in await store.claim("old", {"gate": LEASE_MS}, 3)}
    job = claimed[by_old_worker.stages[0].job_id or 0]
    verdict = Finish(job.id, job.token, "succeeded", '{"verdict": "approve"}')
    assert await store.finish_many("old", [verdict]) == {job.id: True}
    # An operator cancels a stage's job; someone deletes a run's stages by hand.
    assert cancelled.stages[0].job_id is not None
    await app.cancel(cancelled.stages[0].job_id)
    tables.rows("DELETE FROM tenure_run_stages WHERE run_id = %(id)s", {"id": edited.id})

    report = await Rescuer(store, RescuerConfig()).run_once()
    assert (report.adopted, report.redispatched, report.ended) == (2, 1, 0)
    moved = await app.get_run(by_old_worker.id)
    assert [(s.name, s.state, s.decision) for s in moved.stages] == [
        ("check", "succeeded", "approve"),
        ("after", "open", None),
    ]
    stopped = await app.get_run(cancelled.id)
    assert stopped.state == "cancelled" and stopped.error is not None
    assert stopped.error["code"] == "stage_cancelled"
    restarted = await app.get_run(edited.id)
    assert [(s.name, s.round, s.state) for s in restarted.stages] == [("check", 1, "open")]
    job_of_restarted = restarted.stages[0].job
    assert job_of_restarted is not None and job_of_restarted.state in ("queued", "running")
    assert not (await Rescuer(store, RescuerConfig()).run_once()).acted
