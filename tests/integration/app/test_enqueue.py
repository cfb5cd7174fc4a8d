"""Producer API on a real database: idempotency, typed errors, nothing written on bad input."""

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

import tenure


def make_app(dsn: str) -> tenure.App:
    app = tenure.App(dsn)

    @app.tool("fetch", lease=5, heartbeat=1, jitter=1)
    async def fetch(ctx: tenure.Context, invoice_id: str, pages: int = 1) -> dict[str, str]:
        return {"invoice_id": invoice_id}

    return app


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[tenure.App]:
    app = make_app(tenure_dsn)
    yield app
    await app.aclose()


def count_jobs(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM tenure_jobs").fetchone()
        assert row is not None
        return int(row[0])


async def test_sixteen_producers_one_thousand_keys(app: tenure.App, tenure_dsn: str) -> None:
    async def producer(seed: int) -> set[int]:
        ids = set()
        for i in range(1000):
            k = (i * 7 + seed * 13) % 1000  # every producer walks the keys in its own order
            job = await app.enqueue("fetch", {"invoice_id": f"c-{k}"}, idempotency_key=f"inv:{k}")
            ids.add(job.id)
        return ids

    results = await asyncio.gather(*(producer(s) for s in range(16)))
    assert all(len(ids) == 1000 for ids in results)
    assert all(ids == results[0] for ids in results)
    assert count_jobs(tenure_dsn) == 1000


async def test_repeated_key_returns_the_same_job(app: tenure.App) -> None:
    first = await app.enqueue("fetch", {"invoice_id": "a"}, idempotency_key="k")
    again = await app.enqueue("fetch", {"invoice_id": "a"}, idempotency_key="k")
    assert first.created and not again.created and again.id == first.id


async def test_same_key_different_payload_is_a_clear_error(
    app: tenure.App, tenure_dsn: str
) -> None:
    await app.enqueue("fetch", {"invoice_id": "a"}, idempotency_key="k")
    with pytest.raises(tenure.IdempotencyConflict, match="different payload"):
        await app.enqueue("fetch", {"invoice_id": "b"}, idempotency_key="k")
    assert count_jobs(tenure_dsn) == 1


@pytest.mark.parametrize(
    ("tool", "payload", "error"),
    [
        ("nope", {}, tenure.UnknownTool),
        ("fetch", {"invoice_id": "x" * (1 << 20)}, tenure.PayloadError),
        ("fetch", {"invoice_id": {1, 2}}, tenure.PayloadError),
        ("fetch", {"invoice_id": "a\x00"}, tenure.PayloadError),
        ("fetch", {"invoice_id": "\udc80"}, tenure.PayloadError),
        ("fetch", {"wrong": "argument"}, tenure.PayloadError),
        ("fetch", ["not", "an", "object"], tenure.PayloadError),
    ],
)
async def test_bad_input_gets_a_typed_error_and_writes_nothing(
    app: tenure.App, tenure_dsn: str, tool: str, payload: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await app.enqueue(tool, payload)  # type: ignore[arg-type]
    assert count_jobs(tenure_dsn) == 0


@pytest.mark.parametrize(
    "options",
    [
        {"idempotency_key": ""},
        {"idempotency_key": "x" * 501},
        {"priority": 1000},
        {"delay": -1},
        {"delay": float("nan")},
    ],
)
async def test_bad_options_are_refused(
    app: tenure.App, tenure_dsn: str, options: dict[str, object]
) -> None:
    with pytest.raises(tenure.TenureError):
        await app.enqueue("fetch", {"invoice_id": "a"}, **options)  # type: ignore[arg-type]
    assert count_jobs(tenure_dsn) == 0


def test_malformed_dsn_is_a_config_error() -> None:
    with pytest.raises(tenure.ConfigError, match="malformed DSN"):
        tenure.App("host=localhost port=5432 this is not a dsn")


def test_duplicate_tool_and_bad_signature_are_refused(tenure_dsn: str) -> None:
    app = make_app(tenure_dsn)
    with pytest.raises(tenure.PolicyError, match="already registered"):
        app.tool("fetch")(lambda ctx: None)
    with pytest.raises(tenure.PolicyError, match=r"interval|exceed"):
        app.tool("bad", lease=10, heartbeat=5, jitter=1)(lambda ctx: None)
    with pytest.raises(tenure.PolicyError, match="Context"):
        app.tool("noargs")(lambda: None)


def test_sync_facade_round_trip(tenure_dsn: str) -> None:
    app = make_app(tenure_dsn)
    try:
        job = app.sync.enqueue("fetch", {"invoice_id": "s"}, idempotency_key="sync")
        assert app.sync.get(job.id).state == "queued"
        assert app.sync.cancel(job.id).state == "cancelled"
        with pytest.raises(tenure.JobCancelled, match="cancelled") as cancelled:
            app.sync.wait(job.id, timeout=1)
        assert cancelled.value.job is not None and cancelled.value.job.state == "cancelled"
        with pytest.raises(tenure.JobAlreadyEnded) as ended:
            app.sync.cancel(job.id)
        assert ended.value.job.state == "cancelled"
        assert app.sync.admin.retry(job.id).state == "queued"
        with pytest.raises(tenure.WaitTimeout):
            app.sync.wait(job.id, timeout=0.05)
        with pytest.raises(tenure.JobNotFound):
            app.sync.get(10**9)
    finally:
        app.close()


async def test_end_to_end_with_an_in_process_worker(app: tenure.App) -> None:
    worker = app.worker(concurrency=4, poll_interval=0.2)
    running = asyncio.create_task(worker.run(handle_signals=False))
    try:
        job = await app.enqueue("fetch", {"invoice_id": "c-1048"}, idempotency_key="e2e")
        assert await app.wait(job.id, timeout=20) == {"invoice_id": "c-1048"}
        final = await app.get(job.id)
        assert final.state == "succeeded" and final.attempt == 1 and final.lease_until is None
        kinds = [e["kind"] for e in await app.admin.events(job.id)]
        assert kinds == ["job_claimed", "succeeded"]
    finally:
        worker.stop()
        await running
