"""Verdict ownership: only the gate that still holds the stage may decide it.

A review engine's tracker accepted a gate's verdict only from the gate that still
owned the pull request's gate status, but a late second verdict leaked out as a
generic 500 rather than a conflict. Here a late or
duplicate verdict is a typed Conflict, and the tables are byte-for-byte unchanged.

Gate "workers" are played by the test through the store's claim, so nothing runs in
the background and a snapshot of every table is stable.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.integration.pipeline.pipeline_support import Tables

import tenure
from tenure import Context, Stage, Verdict
from tenure._payload import encode
from tenure._pipeline._engine import Transitions
from tenure._store import ClaimedJob, Finish, Store

LEASE_MS = 60_000


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[tenure.App]:
    app = tenure.App(tenure_dsn)

    @app.tool(lease=60, heartbeat=20, jitter=10)
    async def review(ctx: Context, run_id: int, stage: str) -> None:
        """Hands the review to a gate service, which answers with record_verdict."""

    @app.tool(lease=60, heartbeat=20, jitter=10)
    async def merge(ctx: Context) -> None: ...

    app.pipeline(
        "external",
        [Stage("qa", tool="review", on={"approve": "merge", "reject": ()}), Stage("merge")],
    )
    yield app
    await app.aclose()


@pytest.fixture
async def store(tenure_dsn: str) -> AsyncIterator[Store]:
    store = Store(tenure_dsn)
    await store.open()
    yield store
    await store.close()


async def claim(store: Store, gate: str) -> ClaimedJob:
    (job,) = await store.claim(gate, {"review": LEASE_MS}, 1)
    return job


def expire(tables: Tables, job_id: int) -> None:
    tables.rows(
        # lease_ms = NULL: a lease of its own row (migration 0023), which has run out.
        "UPDATE tenure_jobs SET lease_until = clock_timestamp() - interval '1 second',"
        " lease_ms = NULL WHERE id = %(id)s",
        {"id": job_id},
    )


async def test_a_late_verdict_from_a_gate_that_lost_the_stage_is_a_conflict_and_changes_nothing(
    app: tenure.App, store: Store, tables: Tables
) -> None:
    run = await app.start_run("external", {})
    first = await claim(store, "gate-a")
    expire(tables, first.id)  # gate A stopped heartbeating ...
    second = await claim(store, "gate-b")  # ... and gate B took the stage over
    assert second.id == first.id and second.token > first.token

    before = tables.snapshot()
    with pytest.raises(tenure.Conflict, match=rf"held by token {second.token}"):
        await app.record_verdict(run.id, "qa", first.token, Verdict("approve"))
    assert tables.snapshot() == before

    decided = await app.record_verdict(
        run.id, "qa", second.token, Verdict("reject", reason="r", diagnosis="d")
    )
    assert [(s.name, s.state, s.decision) for s in decided.stages] == [
        ("qa", "succeeded", "reject")
    ]
    assert decided.state == "succeeded"  # reject ends this pipeline
    (qa,) = decided.stages
    assert qa.job is not None and qa.job.state == "succeeded" and qa.job.token == second.token
    assert qa.job.result == {"verdict": "reject", "reason": "r", "diagnosis": "d"}

    # A duplicate verdict, and gate B's own commit arriving late: refused, nothing written.
    before = tables.snapshot()
    with pytest.raises(tenure.Conflict, match="is succeeded"):
        await app.record_verdict(run.id, "qa", second.token, Verdict("approve"))
    finish = Finish(second.id, second.token, "succeeded", encode(Verdict("approve").as_result()))
    # The stage is decided, so the job moves no run; its fenced commit refuses it.
    assert await Transitions(store).commit("gate-b", second, finish) is None
    assert await store.finish_many("gate-b", [finish]) == {second.id: False}
    assert tables.snapshot() == before


async def test_an_accepted_verdict_dispatches_the_next_stage_in_the_same_transaction(
    app: tenure.App, store: Store, tables: Tables
) -> None:
    run = await app.start_run("external", {})
    before = await store.db_now()
    gate = await claim(store, "gate-a")
    decided = await app.record_verdict(run.id, "qa", gate.token, Verdict("approve"))
    ran_ms = (await store.db_now() - before).total_seconds() * 1000
    assert [(s.name, s.state) for s in decided.stages] == [("qa", "succeeded"), ("merge", "open")]
    (merge,) = decided.current()
    assert merge.job is not None and merge.job.state == "queued"
    assert merge.job.idempotency_key == f"run:{run.id}:merge:1"
    # The job commit and the dispatch are one transaction: one journal row each, and the
    # next job's 'dispatched' row names the verdict's job.
    kinds = tables.rows(
        "SELECT kind, job_id, detail, duration_ms FROM tenure_events"
        " WHERE kind IN ('succeeded', 'dispatched')"
        " AND job_id IN (%(gate)s, %(merge)s) ORDER BY id",
        {"gate": gate.id, "merge": merge.job.id},
    )
    assert [(k["kind"], k["job_id"]) for k in kinds] == [
        ("dispatched", gate.id),
        ("succeeded", gate.id),
        ("dispatched", merge.job.id),
    ]
    assert kinds[2]["detail"] == {"run": run.id, "after_job": gate.id}
    # The committed attempt's row says how long it ran, like a worker's commit does.
    # (from its claim to the verdict: no longer than the test's two readings around both)
    assert isinstance(kinds[1]["duration_ms"], int) and kinds[1]["duration_ms"] <= ran_ms + 1

    # A stale verdict for a stage that moved on: the wrong stage, and an unknown decision.
    with pytest.raises(tenure.Conflict, match="not open"):
        await app.record_verdict(run.id, "qa", gate.token, Verdict("reject"))
    with pytest.raises(tenure.PolicyError, match="not a gate"):
        await app.record_verdict(run.id, "merge", gate.token, Verdict("approve"))


async def test_a_verdict_that_cannot_apply_is_refused_before_anything_is_written(
    app: tenure.App, store: Store, tables: Tables
) -> None:
    run = await app.start_run("external", {})
    gate = await claim(store, "gate-a")
    before = tables.snapshot()
    with pytest.raises(tenure.PolicyError, match="knows the decisions"):
        await app.record_verdict(run.id, "qa", gate.token, Verdict("maybe"))
    with pytest.raises(tenure.RunNotFound):
        await app.record_verdict(run.id + 1, "qa", gate.token, Verdict("approve"))
    expire(tables, gate.id)  # the lease ran out and nobody took the stage over yet
    snapshot: dict[str, Any] = tables.snapshot()
    with pytest.raises(tenure.Conflict, match="lease ended"):
        await app.record_verdict(run.id, "qa", gate.token, Verdict("approve"))
    assert tables.snapshot() == snapshot
    assert before["tenure_runs"] == snapshot["tenure_runs"]
