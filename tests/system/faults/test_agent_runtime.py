"""The agent-facing runtime against real worker processes on a real PostgreSQL: typed tools,
results pushed to waiters (never polled for), progress, and a cancel that reaches the tool
at once. The tools heartbeat every 30 s: whatever happens here within seconds did not wait
for a heartbeat."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from tests.apps.agent_app import Report, build_app
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import Journal, WorkerGroup, closing_app

import tenure
from tenure import App

APP = "tests.apps.agent_app:app"


@pytest.fixture
def workers(tenure_dsn: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    with WorkerGroup(tenure_dsn, tmp_path, app=APP) as group:
        yield group


@pytest.fixture
def ops(tenure_dsn: str) -> Iterator[App]:
    """A producer that polls only once a minute: a prompt answer proves the push."""
    yield from closing_app(build_app(tenure_dsn, poll_interval=60))


def rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT count(*) FROM tenure_jobs").fetchone()
    assert found is not None
    return int(found[0])


def test_a_typed_result_comes_back_pushed_from_another_process(
    workers: WorkerGroup, ops: App
) -> None:
    workers.spawn("a").wait_started()

    async def scenario() -> None:
        job = await ops.enqueue(
            "build_report", {"title": "Q3", "pages": 12}, idempotency_key="report:q3"
        )
        report = await ops.wait(key="report:q3", result_type=Report, timeout=30)
        assert report == Report(title="Q3", pages=12, tags=["short"])
        assert await ops.wait(job.id) == {"title": "Q3", "pages": 12, "tags": ["short"]}
        # Typed arguments arrive in the tool as the objects their annotations name.
        other = await ops.enqueue(
            "count_words",
            {"report": Report(title="x", pages=3), "first": {"number": 1, "words": 250}},
        )
        assert await ops.wait(other.id, timeout=30) == {"pages": 3, "first": 250}
        assert (await ops._connection.waiters()).pushed  # the listener's probe came back

    ops._connection.run(scenario())


def test_a_payload_of_the_wrong_type_is_refused_and_nothing_is_written(
    ops: App, tenure_dsn: str
) -> None:
    with pytest.raises(tenure.PayloadError) as refused:
        ops.sync.enqueue("build_report", {"title": 7, "pages": "3", "style": "huge", "x": 1})
    assert sorted(refused.value.problems) == [
        "pages: Input should be a valid integer (got '3')",
        "style: Input should be 'short' or 'long' (got 'huge')",
        "title: Input should be a valid string (got 7)",
        "x: Extra inputs are not permitted (got 1)",
    ]
    assert rows(tenure_dsn) == 0


def test_the_tools_schema_is_the_contract_enqueue_checks(ops: App) -> None:
    schema = ops.registry.tool_schema("build_report")
    assert schema["name"] == "build_report"
    assert schema["description"] == "Build a report of ``pages`` pages."
    parameters = schema["parameters"]
    assert parameters["required"] == ["title", "pages"]
    assert parameters["properties"]["pages"]["type"] == "integer"
    assert parameters["properties"]["style"]["enum"] == ["short", "long"]
    assert parameters["additionalProperties"] is False
    assert [s["name"] for s in ops.registry.tool_schemas()][:2] == ["build_report", "count_words"]


@pytest.mark.parametrize("tool", ["long_async", "long_thread"])
def test_a_cancel_stops_the_running_tool_at_once_not_at_its_heartbeat(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path, tool: str
) -> None:
    marker = tmp_path / "marker.txt"
    workers.spawn("a").wait_started()
    job = ops.sync.enqueue(tool, {"seconds": 120, "marker": str(marker)})
    wait_until(lambda: marker.exists(), timeout=20, message="the tool never started")
    cancelled_at = time.monotonic()
    assert ops.sync.cancel(job.id).state == "cancelled"
    # The next heartbeat would be 30 s after the claim: only the cancel's notification
    # can stop the tool within the deadline below.
    wait_until(
        lambda: "stopped" in marker.read_text(),
        timeout=15,
        message=f"the tool was not stopped:\n{workers.logs()[-3000:]}",
    )
    stopped_at = float(marker.read_text().split("stopped ")[1].split()[0])
    assert stopped_at - cancelled_at < 15
    with pytest.raises(tenure.JobCancelled) as waited:
        ops.sync.wait(job.id, timeout=5)
    assert waited.value.job is not None and waited.value.job.state == "cancelled"
    with pytest.raises(tenure.JobAlreadyEnded):
        ops.sync.cancel(job.id)
    workers["a"].wait_event("call_abandoned", job=job.id, reason="cancelled")
    assert "finished" not in marker.read_text()


def test_progress_is_pushed_to_a_watcher_and_coalesced(
    workers: WorkerGroup, ops: App, tenure_dsn: str
) -> None:
    workers.spawn("a").wait_started()

    async def scenario() -> list[tenure.Job]:
        job = await ops.enqueue("steps", {"total": 200, "pause": 0.005})
        return [seen async for seen in ops.watch(job.id, timeout=60)]

    seen = ops._connection.run(scenario())
    final = seen[-1]
    assert final.state == "succeeded" and final.result == 200
    assert final.progress is not None
    assert (final.progress["done"], final.progress["total"]) == (200, 200)
    assert final.progress["message"] == "step 200 of 200"
    reported = [s.progress["done"] for s in seen if s.progress is not None]
    assert reported == sorted(reported) and len(reported) >= 2  # pushed while running
    # 200 reports in about a second, written a few times a second, not 200 times.
    assert len(seen) < 40
    # The message is the tool's own text: it never enters the journal.
    with psycopg.connect(tenure_dsn) as conn:
        leaked = conn.execute(
            "SELECT count(*) FROM tenure_events WHERE detail::text LIKE '%%step%%'"
        ).fetchone()
    assert leaked == (0,)


def test_failures_and_many_jobs_come_back_with_their_facts(workers: WorkerGroup, ops: App) -> None:
    workers.spawn("a", concurrency=8).wait_started()

    async def scenario() -> None:
        enqueued = await ops.enqueue_many(
            "build_report",
            [{"title": f"t{n}", "pages": n} for n in range(5)],
            idempotency_keys=[f"k{n}" for n in range(5)],
        )
        assert [e.created for e in enqueued] == [True] * 5
        again = await ops.enqueue_many(
            "build_report", [{"title": "t0", "pages": 0}], idempotency_keys=["k0"]
        )
        assert again == [tenure.Enqueued(enqueued[0].id, "k0", False)]
        refused = await ops.enqueue("refuse")
        ended = await ops.wait_many([e.id for e in enqueued] + [refused.id], timeout=30)
        assert [j.state for j in ended] == ["succeeded"] * 5 + ["failed"]
        assert [j.result["pages"] for j in ended[:5]] == list(range(5))
        with pytest.raises(tenure.JobFailed) as failed:
            await ops.wait(refused.id)
        assert (failed.value.code, failed.value.attempts) == ("permanent", 1)
        assert failed.value.job.id == refused.id

    ops._connection.run(scenario())


def test_a_stale_owners_progress_is_refused(tenure_dsn: str) -> None:
    """Progress is fenced like a heartbeat: the owner and token that hold the lease now."""
    from tests.integration.store.helpers import new_job

    from tenure._store import LeaseConnection, Store

    async def scenario() -> None:
        store = Store(tenure_dsn)
        await store.open()
        try:
            await store.enqueue(new_job("k"))
            (old,) = await store.claim("w1", {"t": 60_000}, 1)
            async with store._pool.connection() as conn:  # w1's lease ran out...
                await conn.execute(  # (a lease of its own row, migration 0023)
                    "UPDATE tenure_jobs SET lease_until = clock_timestamp() - interval '1 s',"
                    " lease_ms = NULL"
                )
            (new,) = await store.claim("w2", {"t": 60_000}, 1)  # ...and w2 took the job
            lease = LeaseConnection(tenure_dsn)
            try:
                stale = await asyncio.to_thread(
                    lease.report_progress, "w1", [(old.id, old.token, '{"done": 9}')], 5
                )
                fresh = await asyncio.to_thread(
                    lease.report_progress, "w2", [(new.id, new.token, '{"done": 1}')], 5
                )
            finally:
                lease.close()
            assert stale == set() and fresh == {new.id}
            progress = (await store.get_job(new.id)).progress
            assert progress is not None and progress["done"] == 1
        finally:
            await store.close()

    asyncio.run(scenario())


async def test_a_waiter_hears_of_a_commit_from_a_worker_in_another_process(
    workers: WorkerGroup, tenure_dsn: str
) -> None:
    """The same, from a coroutine: many waiters share one LISTEN connection."""
    app = build_app(tenure_dsn, poll_interval=60)
    try:
        workers.spawn("a", concurrency=4).wait_started()
        jobs = [await app.enqueue("build_report", {"title": "t", "pages": n}) for n in range(6)]
        waits = [asyncio.create_task(app.wait(j.id, timeout=40)) for j in jobs]
        results = await asyncio.gather(*waits)
        assert [r["pages"] for r in results] == list(range(6))
        waiters = await app._connection.waiters()
        await wait_until_async(lambda: not waiters._by_job, timeout=5)
    finally:
        await app.aclose()
