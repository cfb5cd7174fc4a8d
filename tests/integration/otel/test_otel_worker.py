"""Spans of one process's producer and worker: a refused commit, a lost lease, batches, a
tool's own spans, an enqueue that is refused — and rows without tracing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import psycopg
import pytest
from opentelemetry import trace
from tests.integration.otel.helpers import finished, running
from tests.integration.otel.spans import Traced, leaks, named, one

import tenure.otel
from tenure import App, Context, IdempotencyConflict

SECRET = "payload-text-41d0"


class Gate:
    """Holds a tool until the test lets it go (threading: sync tools wait on it too)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[App]:
    app = App(tenure_dsn)
    yield app
    await app.aclose()


def token_of(dsn: str, job_id: int) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT token FROM tenure_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return int(row[0])


def steal(dsn: str, job_id: int) -> None:
    """Another owner's token, as after a takeover: the holder's writes now match no row."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE tenure_jobs SET token = nextval('tenure_fence_token') WHERE id = %s",
            (job_id,),
        )


async def test_a_refused_commit_is_an_error_span_and_the_call_still_succeeded(
    tracing: Traced, app: App, tenure_dsn: str
) -> None:
    gate = Gate()

    @app.tool(lease=60, heartbeat=20, jitter=5)  # no beat before the commit: it decides
    async def slow(ctx: Context, note: str) -> dict[str, str]:
        gate.entered.set()
        await asyncio.to_thread(gate.release.wait, 30)
        return {"note": note}

    async with running(app):
        job = await app.enqueue("slow", {"note": SECRET})
        await asyncio.to_thread(gate.entered.wait, 30)
        token = token_of(tenure_dsn, job.id)
        steal(tenure_dsn, job.id)
        gate.release.set()
        await finished(tracing, "tenure.commit")
    spans = tracing.spans()
    call, commit = one(spans, "tenure.call"), one(spans, "tenure.commit")
    assert call.attributes["tenure.outcome"] == "succeeded" and call.status == "UNSET"
    assert commit.attributes["tenure.commit.accepted"] is False
    assert commit.attributes["tenure.job.token"] == token
    assert (commit.status, commit.description) == ("ERROR", "result_rejected")
    assert leaks(spans, SECRET) == []


async def test_a_lease_refused_by_the_database_is_a_heartbeat_lost_span_under_the_call(
    tracing: Traced, app: App, tenure_dsn: str
) -> None:
    gate = Gate()

    @app.tool(lease=1.5, heartbeat=0.3, jitter=0.5, missed_beats=2)
    async def held(ctx: Context, note: str) -> None:
        gate.entered.set()
        await asyncio.sleep(30)

    async with running(app):
        job = await app.enqueue("held", {"note": SECRET})
        await asyncio.to_thread(gate.entered.wait, 30)
        steal(tenure_dsn, job.id)
        await finished(tracing, "tenure.call")
    spans = tracing.spans()
    claim, call = one(spans, "tenure.claim"), one(spans, "tenure.call")
    loss = one(spans, "tenure.heartbeat_lost")
    assert loss.parent_id == call.span_id and call.parent_id == claim.span_id
    assert loss.attributes["tenure.reason"] == "zero_rows"
    assert loss.attributes["tenure.job.id"] == job.id
    assert (call.attributes["tenure.outcome"], call.attributes["tenure.code"]) == (
        "abandoned",
        "lease_lost",
    )
    assert named(spans, "tenure.commit") == []
    assert leaks(spans, SECRET) == []


@pytest.mark.parametrize("mode", ["async", "thread"])
async def test_the_tools_own_spans_nest_under_its_call(
    tracing: Traced, app: App, mode: str
) -> None:
    tracer = tracing.tracer

    if mode == "async":

        @app.tool("work", lease=5, heartbeat=1, jitter=1)
        async def work_async(ctx: Context) -> None:
            with tracer.start_as_current_span("tool.inner"):
                pass

    else:

        @app.tool("work", lease=5, heartbeat=1, jitter=1)
        def work_thread(ctx: Context) -> None:
            with tracer.start_as_current_span("tool.inner"):
                pass

    async with running(app):
        job = await app.enqueue("work", {})
        await app.wait(job.id, timeout=20)
        await finished(tracing, "tenure.commit")
    spans = tracing.spans()
    assert one(spans, "tool.inner").parent_id == one(spans, "tenure.call").span_id


async def test_a_batch_is_one_producer_span_and_every_job_continues_it(
    tracing: Traced, app: App, tenure_dsn: str
) -> None:
    @app.tool(lease=5, heartbeat=1, jitter=1)
    async def noop(ctx: Context, n: int) -> None:
        return None

    with tracing.tracer.start_as_current_span("producer.batch") as parent:
        done = await app.enqueue_many("noop", [{"n": n} for n in range(3)])
    async with running(app):
        ended = await app.wait_many([e.id for e in done], timeout=20)
        assert {job.state for job in ended} == {"succeeded"}
        await finished(tracing, "tenure.commit", 3)
    spans = tracing.spans()
    enqueue = one(spans, "tenure.enqueue")
    assert enqueue.attributes["tenure.jobs.count"] == 3
    assert enqueue.attributes["tenure.jobs.created"] == 3
    assert enqueue.trace_id == f"0x{parent.get_span_context().trace_id:032x}"
    claims = named(spans, "tenure.claim")
    assert sorted(c.job for c in claims if c.job is not None) == sorted(e.id for e in done)
    assert {c.parent_id for c in claims} == {enqueue.span_id}


async def test_a_refused_enqueue_names_the_error_class_and_nothing_of_its_message(
    tracing: Traced, app: App
) -> None:
    @app.tool(lease=5, heartbeat=1, jitter=1)
    async def noop(ctx: Context, note: str) -> None:
        return None

    await app.enqueue("noop", {"note": "a"}, idempotency_key=SECRET)
    with pytest.raises(IdempotencyConflict, match=SECRET):
        await app.enqueue("noop", {"note": "b"}, idempotency_key=SECRET)
    refused = named(tracing.spans(), "tenure.enqueue")[1]
    assert (refused.status, refused.description) == ("ERROR", "IdempotencyConflict")
    assert refused.events == []
    assert leaks(tracing.spans(), SECRET) == []


async def test_without_instrument_rows_carry_no_trace_context_and_nothing_is_traced(
    app: App, tenure_dsn: str
) -> None:
    @app.tool(lease=5, heartbeat=1, jitter=1)
    async def noop(ctx: Context) -> None:
        return None

    assert not tenure.otel.is_instrumented()
    with trace.get_tracer("tests").start_as_current_span("not-ours"):
        job = await app.enqueue("noop", {})
    async with running(app):
        await app.wait(job.id, timeout=20)
    with psycopg.connect(tenure_dsn) as conn:
        row = conn.execute("SELECT trace_context FROM tenure_jobs WHERE id = %s", (job.id,))
        assert row.fetchone() == (None,)
