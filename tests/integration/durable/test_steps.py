"""Fenced steps (`ctx.step`) on a real PostgreSQL with a worker in this process: a resumed
job replays what it completed instead of doing it again, a step's result is JSON of bounded
size or a typed error at the step, names are unique unless indexed, the journal carries the
step's name and never its result, a step's side-effect key is the same on every attempt, and
a checkpoint written by a stale owner is refused (zero rows)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.integration.durable.conftest import rows, running
from tests.integration.store.helpers import new_job, reclaim

import tenure
from tenure import App, Context, RetryableError
from tenure._store import NewStep, Store
from tenure._worker._ownership import Ownership
from tenure._worker._steps import Steps

SECRET = "the-customer-said-something-private"
RAN: Counter[str] = Counter()
KEYS: list[tuple[int, str]] = []  # (attempt, the step's key as fn saw it)


def ran(what: str) -> str:
    RAN[what] += 1
    return f"{what}-{RAN[what]}"


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[App]:
    RAN.clear()
    KEYS.clear()
    app = App(tenure_dsn)
    tool = app.tool(lease=5, heartbeat=1, jitter=1, max_attempts=3, backoff=0.05)

    @tool
    async def three_steps(ctx: Context) -> dict[str, Any]:
        """Steps a and b, a crash (a retryable error) on the first attempt, then step c."""
        a = await ctx.step("a", ran, "a")
        b = await ctx.step("b", ran, "b")
        if ctx.attempt == 1:
            raise RetryableError("the process died after step b")
        c = await ctx.step("c", ran, "c")
        return {"a": a, "b": b, "c": c}

    @app.tool(lease=5, heartbeat=1, jitter=1, max_attempts=3, backoff=0.05, name="threaded")
    def threaded(ctx: Context) -> list[Any]:
        """The same from a plain function: fn runs in the tool's thread."""
        first = ctx.step_sync("first", lambda: (1, SECRET))  # a tuple comes back a list
        if ctx.attempt == 1:
            raise RetryableError("again")
        return [first, ctx.step_sync("second", ran, "second")]

    @tool
    async def keyed(ctx: Context) -> str:
        """Fails inside its step on the first attempt, after reading the step's key."""

        def charge() -> str:
            KEYS.append((ctx.attempt, ctx.idempotency_key()))
            if ctx.attempt == 1:
                raise RetryableError("no answer from the receiver")
            return "charged"

        return str(await ctx.step("charge", charge))

    @app.tool(max_attempts=1)
    async def repeats(ctx: Context, indexed: bool) -> list[Any]:
        """Uses one step name twice: refused, unless each use is indexed."""
        if indexed:
            return [await ctx.step("fetch", ran, f"page{n}", index=n) for n in range(3)]
        await ctx.step("fetch", ran, "page")
        return [await ctx.step("fetch", ran, "page")]

    @app.tool(max_attempts=1)
    async def bad_result(ctx: Context, what: str) -> str:
        """A step whose result cannot be recorded: not JSON, or too large."""
        value: Any = {1, 2} if what == "set" else "x" * (5 << 20)
        try:
            await ctx.step("unstorable", lambda: value)
        except tenure.PayloadError as exc:
            return f"PayloadError: {exc}"
        return "recorded"

    yield app
    await app.aclose()


async def test_a_resumed_job_skips_its_completed_steps(app: App, tenure_dsn: str) -> None:
    async with running(app):
        job = await app.enqueue("three_steps", {})
        result = await app.wait(job.id, timeout=30)
    assert result == {"a": "a-1", "b": "b-1", "c": "c-1"}
    assert RAN == Counter({"a": 1, "b": 1, "c": 1})  # a and b ran once over two attempts
    steps = rows(
        tenure_dsn,
        "SELECT name, result, attempt FROM tenure_steps WHERE job_id = %(id)s ORDER BY name",
        {"id": job.id},
    )
    assert steps == [
        {"name": "a", "result": "a-1", "attempt": 1},
        {"name": "b", "result": "b-1", "attempt": 1},
        {"name": "c", "result": "c-1", "attempt": 2},
    ]


async def test_a_threaded_tool_steps_and_replays_the_json_form(app: App) -> None:
    async with running(app):
        job = await app.enqueue("threaded", {})
        result = await app.wait(job.id, timeout=30)
    assert result == [[1, SECRET], "second-1"]


async def test_a_steps_side_effect_key_is_the_same_on_every_attempt(app: App) -> None:
    async with running(app):
        job = await app.enqueue("keyed", {})
        assert await app.wait(job.id, timeout=30) == "charged"
    assert KEYS == [(1, f"tool-job:{job.id}:charge"), (2, f"tool-job:{job.id}:charge")]


async def test_a_repeated_step_name_is_refused_unless_indexed(app: App, tenure_dsn: str) -> None:
    async with running(app):
        refused = await app.enqueue("repeats", {"indexed": False})
        with pytest.raises(tenure.JobFailed):
            await app.wait(refused.id, timeout=30)
        indexed = await app.enqueue("repeats", {"indexed": True})
        assert await app.wait(indexed.id, timeout=30) == ["page0-1", "page1-1", "page2-1"]
    failed = await app.get(refused.id)
    assert failed.error is not None and failed.error["type"] == "PolicyError"
    assert "already used" in failed.error["message"]
    names = rows(
        tenure_dsn,
        "SELECT job_id, name FROM tenure_steps WHERE job_id = ANY(%(ids)s) ORDER BY 1, 2",
        {"ids": [refused.id, indexed.id]},
    )
    assert names == [
        {"job_id": refused.id, "name": "fetch"},
        *({"job_id": indexed.id, "name": f"fetch#{n}"} for n in range(3)),
    ]


@pytest.mark.parametrize(("what", "says"), [("set", "is not JSON"), ("big", "the limit is")])
async def test_a_result_that_cannot_be_recorded_is_a_payload_error_at_the_step(
    app: App, tenure_dsn: str, what: str, says: str
) -> None:
    async with running(app):
        job = await app.enqueue("bad_result", {"what": what})
        message = await app.wait(job.id, timeout=30)
    assert message.startswith("PayloadError: step 'unstorable' result") and says in message
    assert rows(tenure_dsn, "SELECT * FROM tenure_steps") == []


async def test_steps_are_journaled_without_their_content(app: App, tenure_dsn: str) -> None:
    async with running(app):
        job = await app.enqueue("threaded", {})
        await app.wait(job.id, timeout=30)
    events = rows(
        tenure_dsn,
        "SELECT kind, detail, attempt, token FROM tenure_events WHERE kind = 'step_recorded'"
        " AND job_id = %(id)s ORDER BY id",
        {"id": job.id},
    )
    assert [e["detail"] for e in events] == [
        {"step": "first", "kind": "step"},
        {"step": "second", "kind": "step"},
    ]
    assert [e["attempt"] for e in events] == [1, 2]
    everything = rows(tenure_dsn, "SELECT to_jsonb(e)::text AS row FROM tenure_events e")
    assert not any(SECRET in r["row"] for r in everything)


async def test_a_stale_owners_checkpoint_is_refused(store: Store, tenure_dsn: str) -> None:
    """The old owner's lease ran out and another worker took the job over: the old owner's
    step is refused (zero rows), nothing of it is recorded, and it learns its lease is lost;
    the new owner's checkpoint is the one kept."""
    leases = {"t": 600}  # ms
    await store.enqueue(new_job("k"))
    (old,) = await store.claim("old", leases, 1)
    new = await reclaim(store, "new", {"t": 30_000})
    assert new.token > old.token
    loop = asyncio.get_running_loop()
    stale = Ownership(time.monotonic(), 30)  # what the old owner believes
    checkpoints = Steps(store, "old", loop).checkpoints(old.id, old.token, stale)
    assert await checkpoints.lookup("charge") == (False, None)
    with pytest.raises(tenure.LeaseLost):
        await checkpoints.record("charge", {"by": "old"}, 0.01)
    assert stale.status == "lost" and stale.refused
    verdict = await store.record_step(
        "new", NewStep(new.id, new.token, "charge", '{"by": "new"}', 10)
    )
    assert verdict == ("recorded", None)
    assert rows(tenure_dsn, "SELECT name, result, token FROM tenure_steps") == [
        {"name": "charge", "result": {"by": "new"}, "token": new.token}
    ]
