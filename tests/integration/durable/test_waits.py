"""Durable waits on a real PostgreSQL: `ctx.sleep` and `ctx.wait_for` end the attempt holding
no lease and no worker slot (counted in the database while they wait), resume exactly once,
and replay the steps before them; a child that ends while its parent suspends, or two that
end at once, never leave the parent waiting."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from tests.integration.durable.conftest import rows, running, until_waiting
from tests.integration.store.helpers import new_job
from tests.support.waiting import wait_until_async

import tenure
from tenure import App, Context, RunEvent
from tenure._maintenance._rescuer import RescuerConfig
from tenure._payload import fingerprint
from tenure._store import Finish, NewJob, OpenWaitpoint, Store
from tenure._worker._ownership import Ownership

RAN: Counter[str] = Counter()
GATE: dict[str, asyncio.Event] = {}


def held(dsn: str) -> dict[str, Any]:
    """What the database says is held right now: running jobs (leases), waiting ones."""
    return rows(
        dsn,
        "SELECT count(*) FILTER (WHERE state = 'running') AS running,"
        " count(*) FILTER (WHERE lease_until IS NOT NULL) AS leases,"
        " count(*) FILTER (WHERE state = 'waiting') AS waiting FROM tenure_jobs",
    )[0]


def ran(what: str) -> str:
    RAN[what] += 1
    return what


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[App]:
    RAN.clear()
    GATE.clear()
    app = App(tenure_dsn)
    tool = app.tool(lease=5, heartbeat=1, jitter=1, max_attempts=2)

    @tool
    async def napper(ctx: Context, seconds: float) -> dict[str, Any]:
        before = await ctx.step("before", ran, "before")
        started = await ctx.step("started", time.time)
        await ctx.sleep(seconds)
        after = await ctx.step("after", ran, "after")
        return {"before": before, "after": after, "slept": time.time() - started}

    @tool
    async def quick(ctx: Context, n: int) -> int:
        return n

    @tool
    async def child(ctx: Context, name: str) -> str:
        if name in GATE:
            await GATE[name].wait()
        return f"{name} done"

    @tool
    async def parent(ctx: Context, names: list[str]) -> list[Any]:
        await ctx.step("plan", ran, "plan")
        ids = [await ctx.enqueue("child", {"name": n}) for n in names]
        done = await ctx.wait_for(*ids)
        return [(job.state, job.result) for job in done]

    @app.tool(lease=5, heartbeat=1, jitter=1, max_attempts=2)
    def threaded_parent(ctx: Context) -> list[Any]:
        first = ctx.enqueue_sync("child", {"name": "t"}, name="first")
        ctx.sleep_sync(0.2)
        (done,) = ctx.wait_for_sync(first)
        return [first, done.result]

    yield app
    await app.aclose()


async def test_a_sleeping_job_holds_no_lease_nor_slot_and_resumes_once(
    app: App, tenure_dsn: str
) -> None:
    async with running(app, concurrency=1, rescuer=RescuerConfig(interval=0.1)) as worker:
        nap = await app.enqueue("napper", {"seconds": 1.5})
        await wait_until_async(lambda: held(tenure_dsn)["waiting"] == 1, timeout=20)
        assert held(tenure_dsn) == {"running": 0, "leases": 0, "waiting": 1}
        # The one slot is free: other calls run while it sleeps.
        quick = [await app.enqueue("quick", {"n": n}) for n in range(3)]
        assert [await app.wait(j.id, timeout=20) for j in quick] == [0, 1, 2]
        # The nap holds no slot (the quick calls' own tasks may still be winding down after
        # their commits: the client can see a result before the worker drops the task).
        assert (await app.get(nap.id)).state == "waiting" and nap.id not in worker._active
        result = await app.wait(nap.id, timeout=30)
    assert result["before"] == "before" and result["after"] == "after"
    assert result["slept"] >= 1.5  # the recorded start is replayed: the whole nap counts
    assert RAN == Counter({"before": 1, "after": 1})
    kinds = [
        r["kind"]
        for r in rows(
            tenure_dsn,
            "SELECT kind FROM tenure_events WHERE job_id = %(id)s ORDER BY id",
            {"id": nap.id},
        )
    ]
    assert kinds.count("suspended") == 1 and kinds.count("waitpoint_timed_out") == 1
    assert kinds.count("job_claimed") == 2 and kinds[-1] == "succeeded"
    assert (await app.get(nap.id)).attempt == 1  # sleeping used up no attempt


async def test_a_parent_waits_for_its_children_holding_nothing(app: App, tenure_dsn: str) -> None:
    GATE["slow"] = asyncio.Event()
    async with running(app, concurrency=2):
        job = await app.enqueue("parent", {"names": ["fast", "slow"]})
        await until_waiting(tenure_dsn, job.id)
        await wait_until_async(
            lambda: (
                rows(tenure_dsn, "SELECT count(*) AS n FROM tenure_jobs WHERE state = 'succeeded'")[
                    0
                ]["n"]
                == 1
            ),
            timeout=20,
        )
        # the slow child, once claimed (its claim can come after the fast one's end)
        expected = {"running": 1, "leases": 1, "waiting": 1}
        await wait_until_async(lambda: held(tenure_dsn) == expected, timeout=20)
        wait = rows(tenure_dsn, "SELECT kind, state, waiting_on FROM tenure_waitpoints")
        (slow,) = rows(tenure_dsn, "SELECT id FROM tenure_jobs WHERE payload->>'name' = 'slow'")
        assert wait == [{"kind": "children", "state": "open", "waiting_on": [slow["id"]]}]
        GATE["slow"].set()
        assert await app.wait(job.id, timeout=30) == [
            ["succeeded", "fast done"],
            ["succeeded", "slow done"],
        ]
    children = rows(
        tenure_dsn,
        "SELECT idempotency_key, parent_id FROM tenure_jobs WHERE parent_id IS NOT NULL"
        " ORDER BY id",
    )
    assert children == [
        {"idempotency_key": f"tool-job:{job.id}:start#{n}", "parent_id": job.id} for n in (0, 1)
    ]
    assert RAN == Counter({"plan": 1})  # replayed on the resumed call, never run again
    answered = rows(
        tenure_dsn,
        "SELECT count(*) AS n FROM tenure_events WHERE job_id = %(id)s"
        " AND kind = 'waitpoint_answered'",
        {"id": job.id},
    )
    assert answered == [{"n": 1}]


async def test_a_threaded_tool_starts_sleeps_and_waits(app: App) -> None:
    async with running(app, rescuer=RescuerConfig(interval=0.1)):
        job = await app.enqueue("threaded_parent", {})
        first, result = await app.wait(job.id, timeout=30)
    assert result == "t done" and (await app.get(first)).state == "succeeded"


# -- the statements, race by race --------------------------------------------------------------


async def _claimed_parent_and_child(store: Store) -> tuple[Any, int]:
    """A claimed parent job and one queued child of it."""
    await store.enqueue(new_job("parent"))
    (parent,) = await store.claim("w", {"t": 30_000}, 1)
    text = '{"key": "child"}'
    child = await store.enqueue(
        NewJob("t", "child", text, fingerprint("t\n" + text), 3, parent_id=parent.id)
    )
    return parent, child.id


def _wait_for(parent: Any, children: list[int]) -> Finish:
    wait = OpenWaitpoint(
        "wait#0~1", "a" * 64, 60_000, "resume", None, kind="children", waiting_on=tuple(children)
    )
    return Finish(parent.id, parent.token, "waiting", waitpoint=wait)


async def _end(store: Store, job_id: int) -> None:
    """Claim the job as another worker and commit it succeeded."""
    (claimed,) = [j for j in await store.claim("other", {"t": 30_000}, 5) if j.id == job_id]
    assert await store.finish_many("other", [Finish(claimed.id, claimed.token, "succeeded")])


async def test_a_child_ending_after_the_suspension_queues_its_parent(
    store: Store, tenure_dsn: str
) -> None:
    parent, child = await _claimed_parent_and_child(store)
    assert await store.suspend("w", _wait_for(parent, [child]))
    assert (await store.get_job(parent.id)).state == "waiting"
    await _end(store, child)
    resumed = await store.get_job(parent.id)
    assert resumed.state == "queued" and resumed.attempt == 0  # the wait used no attempt
    assert resumed.waitpoints is not None and resumed.waitpoints["wait#0~1"]["timed_out"] is False
    assert await store.resume_children_waits(100) == []  # once: nothing left for the backstop


async def test_a_child_that_ended_before_the_suspension_queues_the_parent_at_once(
    store: Store, tenure_dsn: str
) -> None:
    parent, child = await _claimed_parent_and_child(store)
    await _end(store, child)
    assert await store.suspend("w", _wait_for(parent, [child]))
    assert (await store.get_job(parent.id)).state == "queued"
    # journaled as a wait answered at once, as if the child's end had answered it
    query = "SELECT kind FROM tenure_events WHERE job_id = %(id)s ORDER BY id"
    kinds = [r["kind"] for r in rows(tenure_dsn, query, {"id": parent.id})]
    assert kinds[-2:] == ["suspended", "waitpoint_answered"]


async def test_a_child_committing_while_its_parent_suspends_is_never_missed(
    store: Store, tenure_dsn: str
) -> None:
    """The child's commit is in flight (its transaction open) when the parent suspends: the
    suspension waits for it (the children are locked FOR SHARE) and sees it ended, so the
    parent is queued, not left waiting on a child whose end found no wait to leave."""
    parent, child = await _claimed_parent_and_child(store)
    (claimed,) = await store.claim("other", {"t": 30_000}, 1)
    assert claimed.id == child
    with psycopg.connect(tenure_dsn) as ending:
        ending.execute(
            "UPDATE tenure_jobs SET state = 'succeeded', lease_until = NULL WHERE id = %(id)s",
            {"id": child},
        )  # not committed yet
        suspending = asyncio.create_task(store.suspend("w", _wait_for(parent, [child])))
        await asyncio.sleep(0.3)
        assert not suspending.done()  # it waits for the child's row
        ending.commit()
    assert await asyncio.wait_for(suspending, 10)
    assert (await store.get_job(parent.id)).state == "queued"


async def test_two_children_ending_at_once_queue_their_parent(
    store: Store, tenure_dsn: str
) -> None:
    parent, first = await _claimed_parent_and_child(store)
    text = '{"key": "second"}'
    second = await store.enqueue(
        NewJob("t", "second", text, fingerprint("t\n" + text), 3, parent_id=parent.id)
    )
    assert await store.suspend("w", _wait_for(parent, [first, second.id]))
    end = "UPDATE tenure_jobs SET state = 'failed' WHERE id = %(id)s"
    with psycopg.connect(tenure_dsn) as one, psycopg.connect(tenure_dsn) as two:
        one.execute(end, {"id": first})
        blocked = asyncio.create_task(asyncio.to_thread(two.execute, end, {"id": second.id}))
        await asyncio.sleep(0.3)
        one.commit()
        await asyncio.wait_for(blocked, 10)
        two.commit()
    assert (await store.get_job(parent.id)).state == "queued"


async def test_the_backstop_resumes_a_wait_whose_child_vanished(
    store: Store, tenure_dsn: str
) -> None:
    parent, child = await _claimed_parent_and_child(store)
    assert await store.suspend("w", _wait_for(parent, [child]))
    with psycopg.connect(tenure_dsn) as conn:
        conn.execute("DELETE FROM tenure_jobs WHERE id = %(id)s", {"id": child})
    assert (await store.get_job(parent.id)).state == "waiting"
    assert await store.resume_children_waits(100) == [
        rows(tenure_dsn, "SELECT id FROM tenure_waitpoints")[0]["id"]
    ]
    assert (await store.get_job(parent.id)).state == "queued"
    assert await store.resume_children_waits(100) == []


async def test_bad_waits_are_refused_before_anything_is_written(app: App) -> None:
    ctx = Context(
        job_id=1,
        tool="t",
        token=1,
        attempt=1,
        max_attempts=1,
        worker="w",
        ownership=Ownership(time.monotonic(), 30),
        safety_margin=0.1,
        waitpoint_secret=b"s",
    )
    for seconds in (-1, float("nan"), True, "1", 10**9):
        with pytest.raises(tenure.PolicyError):
            await ctx.sleep(seconds)  # type: ignore[arg-type]
    with pytest.raises(tenure.PolicyError):
        await ctx.wait_for()
    with pytest.raises(tenure.PolicyError):
        await ctx.wait_for("7")  # type: ignore[arg-type]


async def test_watching_a_parent_tells_its_childrens_start_and_end_and_its_wait(
    app: App,
) -> None:
    GATE["slow"] = asyncio.Event()
    events: list[RunEvent] = []
    async with running(app, concurrency=2):
        job = await app.enqueue("parent", {"names": ["fast", "slow"]})
        async for event in app.watch_run(job.id, timeout=60):
            events.append(event)
            if event.kind == "waiting":
                GATE["slow"].set()
    children = sorted({e.job_id for e in events if e.kind.startswith("tool_")})
    assert len(children) == 2 and job.id not in children
    for child in children:
        told = [e.kind for e in events if e.job_id == child]
        assert told == ["tool_started", "tool_finished"]
    finished = [e.detail for e in events if e.kind == "tool_finished"]
    assert {(d["tool"], d["state"]) for d in finished} == {("child", "succeeded")}
    waiting = [e for e in events if e.kind == "waiting"]
    assert waiting and waiting[0].detail["kind"] == "children"
    assert events[0] == RunEvent("step", job.id, "plan", events[0].detail, events[0].at)
    assert events[-1].kind == "output"
    assert events[-1].detail == {"output": [["succeeded", "fast done"], ["succeeded", "slow done"]]}
