"""Durable waits under the waitpoint rules, on a real PostgreSQL.

A durable sleep and a wait for child jobs are waitpoints, so the waitpoints' rules reach
them: nothing answers them from outside (their token is derived like any other, and
answers nothing; they are declared answered by ``nobody``); a children wait is not answered
past its deadline (the rescuer's expiry decides there); a retried call reaches a wait that
closed without its end (a cancel) and waits there again, without breaking the waitpoints'
``UNIQUE (job_id, name)``; and a sleep that ended is not slept again after a retry. The
steps and waits' own statements raise the store's typed errors, as a commit does.
"""

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
from tests.integration.store.test_waitpoint_answers import past_deadline, written

import tenure
from tenure import App, Context
from tenure._cli import main
from tenure._errors import ConstraintViolation
from tenure._maintenance._rescuer import RescuerConfig
from tenure._payload import fingerprint
from tenure._store import ClaimedJob, Finish, NewJob, NewStep, OpenWaitpoint, Store
from tenure._waitpoint import derive_token, token_hash
from tenure.mcp._ask import open_waitpoints, waiting_message

LEASES = {"t": 30_000}
SLEPT: Counter[str] = Counter()
GATE: dict[str, asyncio.Event] = {}
FAIL_AFTER_SLEEP: set[str] = set()


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[App]:
    SLEPT.clear()
    GATE.clear()
    FAIL_AFTER_SLEEP.clear()
    app = App(tenure_dsn)
    tool = app.tool(lease=5, heartbeat=1, jitter=1, max_attempts=1)

    @tool
    async def nap(ctx: Context, seconds: float, name: str) -> str:
        await ctx.sleep(seconds)
        SLEPT[name] += 1  # reached past the sleep (each call that got here)
        if name in FAIL_AFTER_SLEEP:
            FAIL_AFTER_SLEEP.discard(name)
            raise tenure.PermanentError("failed after its sleep")
        return f"{name} rested"

    @tool
    async def child(ctx: Context, name: str) -> str:
        await GATE[name].wait()
        return f"{name} done"

    @tool
    async def parent(ctx: Context, name: str) -> str:
        kid = await ctx.enqueue("child", {"name": name})
        (done,) = await ctx.wait_for(kid)
        return str(done.result)

    yield app
    await app.aclose()


# -- nobody answers a sleep or a children wait ---------------------------------------------


async def _claimed(store: Store, key: str) -> ClaimedJob:
    await store.enqueue(new_job(key))
    (job,) = [j for j in await store.claim("w", LEASES, 5) if j.idempotency_key == key]
    return job


async def _suspend_sleep(store: Store, key: str, timeout_ms: int) -> tuple[ClaimedJob, str]:
    """A job suspended in a durable sleep "sleep#0", as ctx.sleep makes it; its token."""
    job = await _claimed(store, key)
    token = derive_token(await store.waitpoint_secret(), job.id, "sleep#0")
    sleep = OpenWaitpoint(
        "sleep#0", token_hash(token), timeout_ms, "resume", None, "nobody", kind="sleep"
    )
    assert await store.suspend("w", Finish(job.id, job.token, "waiting", waitpoint=sleep))
    return job, token


async def _suspend_for_child(
    store: Store, key: str, timeout_ms: int
) -> tuple[ClaimedJob, str, int]:
    """A job suspended waiting for a queued child of its own, as ctx.wait_for makes it."""
    job = await _claimed(store, key)
    text = f'{{"key": "{key}-child"}}'
    kid = await store.enqueue(
        NewJob("t", f"{key}-child", text, fingerprint("t\n" + text), 3, parent_id=job.id)
    )
    token = derive_token(await store.waitpoint_secret(), job.id, "wait#0~1")
    wait = OpenWaitpoint(
        "wait#0~1", token_hash(token), timeout_ms, "resume", None, "nobody", kind="children",
        waiting_on=(kid.id,),
    )  # fmt: skip
    assert await store.suspend("w", Finish(job.id, job.token, "waiting", waitpoint=wait))
    return job, token, kid.id


async def test_no_token_and_no_caller_answers_a_sleep_or_a_childrens_wait(
    store: Store, app: App, tenure_dsn: str
) -> None:
    """Without complete_waitpoint's kind check, the sleep's derived token woke it early."""
    sleeping, sleep_token = await _suspend_sleep(store, "sleeping", 3_600_000)
    waiting, wait_token, _ = await _suspend_for_child(store, "waiting", 3_600_000)
    for job, token, name in ((sleeping, sleep_token, "sleep#0"), (waiting, wait_token, "wait#0~1")):
        before = written(tenure_dsn, job.id)
        with pytest.raises(tenure.Conflict):
            await app.answer_waitpoint(token, "wake up")
        with pytest.raises(tenure.Conflict):
            await app.answer_waitpoint(answer="wake up", job_id=job.id, name=name)
        assert written(tenure_dsn, job.id) == before  # still waiting there, nothing journaled
    declared = rows(tenure_dsn, "SELECT kind, answered_by FROM tenure_waitpoints ORDER BY id")
    assert declared == [
        {"kind": "sleep", "answered_by": "nobody"},
        {"kind": "children", "answered_by": "nobody"},
    ]


async def test_operators_and_callers_are_told_nobody_answers_a_sleep(
    store: Store,
    app: App,
    tenure_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job, _ = await _suspend_sleep(store, "told", 3_600_000)
    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    assert await asyncio.to_thread(main, ["jobs", "show", str(job.id)]) == 0
    assert "nobody (a sleep or child jobs)" in capsys.readouterr().out
    row = await app.get(job.id)
    said = waiting_message(row, await open_waitpoints(app, row))
    assert said.startswith("waiting for a timer at 'sleep#0'") and "nobody answers it" in said


async def test_the_schema_ties_who_answers_to_what_is_waited_for(store: Store) -> None:
    """A sleep declared answered by its token's holder is refused by the database (a CHECK),
    as the constraint it breaks: a StoreError that fails, never an uncertain commit."""
    job = await _claimed(store, "odd")
    token = derive_token(await store.waitpoint_secret(), job.id, "sleep#0")
    odd = OpenWaitpoint("sleep#0", token_hash(token), 60_000, "resume", None, kind="sleep")
    with pytest.raises(ConstraintViolation) as refused:
        await store.suspend("w", Finish(job.id, job.token, "waiting", waitpoint=odd))
    assert refused.value.verdict == "fail"
    assert refused.value.constraint == "tenure_waitpoints_answerable"
    assert (await store.get_job(job.id)).state == "running"  # the statement wrote nothing


async def test_a_childrens_wait_is_not_answered_past_its_deadline(
    store: Store, tenure_dsn: str
) -> None:
    """The last child ending after the deadline leaves the wait to the rescuer's expiry,
    as an answer after it is refused. Without the deadline check in
    tenure_resume_children_wait the child's end queued the parent as answered."""
    job, _, kid = await _suspend_for_child(store, "late", 1_000)
    await past_deadline(tenure_dsn, job.id)
    with psycopg.connect(tenure_dsn) as conn:
        conn.execute("UPDATE tenure_jobs SET state = 'succeeded' WHERE id = %(id)s", {"id": kid})
    assert (await store.get_job(job.id)).state == "waiting"  # the child's end answered nothing
    assert await store.resume_children_waits(10) == []  # nor does the backstop
    assert await store.expire_waitpoints(10) == [job.id]  # the deadline decides
    resumed = await store.get_job(job.id)
    assert resumed.state == "queued"
    assert resumed.waitpoints is not None and resumed.waitpoints["wait#0~1"]["timed_out"] is True


# -- retries reach their waits again -------------------------------------------------------


def _waits(dsn: str, job_id: int) -> list[dict[str, Any]]:
    return rows(
        dsn,
        "SELECT name, kind, state, answered_by, token_hash FROM tenure_waitpoints"
        " WHERE job_id = %(id)s ORDER BY id",
        {"id": job_id},
    )


def _journal(dsn: str, job_id: int) -> list[dict[str, Any]]:
    return rows(
        dsn,
        "SELECT kind, detail FROM tenure_events WHERE job_id = %(id)s ORDER BY at, id",
        {"id": job_id},
    )


async def test_a_job_cancelled_in_its_sleep_sleeps_again_in_full_when_retried(
    app: App, tenure_dsn: str
) -> None:
    """The sleep's waitpoint closed (cancelled) opens again under the same token with a
    fresh deadline, as a waitpoint asked again does; the retried job does not fail on
    UNIQUE (job_id, name)."""
    async with running(app, rescuer=RescuerConfig(interval=0.1)):
        job = await app.enqueue("nap", {"seconds": 2.0, "name": "cancelled"})
        await until_waiting(tenure_dsn, job.id)
        (first,) = _waits(tenure_dsn, job.id)
        await app.cancel(job.id)
        assert _waits(tenure_dsn, job.id)[0]["state"] == "cancelled"
        retried_at = time.monotonic()
        await app.admin.retry(job.id)
        await until_waiting(tenure_dsn, job.id)
        assert _waits(tenure_dsn, job.id) == [{**first, "state": "open"}]
        assert await app.wait(job.id, timeout=30) == "cancelled rested"
    assert time.monotonic() - retried_at >= 2.0  # the whole sleep again, from the retry
    suspensions = [e["detail"] for e in _journal(tenure_dsn, job.id) if e["kind"] == "suspended"]
    assert [s.get("reopened", False) for s in suspensions] == [False, True]
    assert all(s["kind"] == "sleep" for s in suspensions)


async def test_a_sleep_that_ended_is_not_slept_again_after_a_retry(
    app: App, tenure_dsn: str
) -> None:
    """The call slept, went on and failed; its retry replays past the sleep at once.
    Without retry_job keeping a sleep that reached its deadline, the retry slept again
    (the waitpoint reopened: two suspensions)."""
    FAIL_AFTER_SLEEP.add("ended")
    async with running(app, rescuer=RescuerConfig(interval=0.1)):
        job = await app.enqueue("nap", {"seconds": 1.0, "name": "ended"})
        with pytest.raises(tenure.JobFailed):
            await app.wait(job.id, timeout=30)
        await app.admin.retry(job.id)
        assert await app.wait(job.id, timeout=30) == "ended rested"
    kinds = [e["kind"] for e in _journal(tenure_dsn, job.id)]
    assert kinds.count("suspended") == 1 and kinds.count("waitpoint_timed_out") == 1
    assert SLEPT["ended"] == 2  # past the sleep once per call: the failed one and its retry
    assert _waits(tenure_dsn, job.id)[0]["state"] == "timed_out"  # the sleep, closed once


async def test_a_job_cancelled_while_waiting_for_children_waits_again_when_retried(
    app: App, tenure_dsn: str
) -> None:
    """The children wait closed with its cancelled job opens again for the retry (same
    name and token), still waiting for the child, and the child's end resumes it. Without
    the reopen in suspend_for_children the retried job failed: commit_refused, UNIQUE."""
    GATE["kid"] = asyncio.Event()
    async with running(app, concurrency=2):
        job = await app.enqueue("parent", {"name": "kid"})
        await until_waiting(tenure_dsn, job.id)
        (first,) = _waits(tenure_dsn, job.id)
        await app.cancel(job.id)
        await app.admin.retry(job.id)
        await until_waiting(tenure_dsn, job.id)
        assert _waits(tenure_dsn, job.id) == [{**first, "state": "open"}]
        GATE["kid"].set()
        assert await app.wait(job.id, timeout=30) == "kid done"
    children = rows(tenure_dsn, "SELECT count(*) AS n FROM tenure_jobs WHERE parent_id = %(id)s",
                    {"id": job.id})  # fmt: skip
    assert children == [{"n": 1}]  # the start was a step: the retry found the same child
    suspensions = [e["detail"] for e in _journal(tenure_dsn, job.id) if e["kind"] == "suspended"]
    assert [s.get("reopened", False) for s in suspensions] == [False, True]


# -- steps and waits raise the store's typed errors ----------------------------------------


async def test_a_step_the_database_refuses_is_a_store_error_with_its_verdict(
    store: Store,
) -> None:
    """Before, record_step let psycopg's CheckViolation through to the tool."""
    job = await _claimed(store, "stepper")
    bad = NewStep(job.id, job.token, "s", "1", 0, kind="nonsense")
    with pytest.raises(ConstraintViolation) as refused:
        await store.record_step("w", bad)
    assert refused.value.verdict == "fail" and refused.value.sqlstate == "23514"
    assert await store.job_steps(job.id) == {}


async def test_a_child_start_the_database_refuses_is_a_store_error(store: Store) -> None:
    job = await _claimed(store, "starter")
    text = '{"key": "kid"}'
    kid = NewJob("t", "kid", text, fingerprint("t\n" + text), 3, parent_id=job.id)
    bad = NewStep(job.id, job.token, "s", "null", 0, kind="nonsense")
    with pytest.raises(ConstraintViolation):
        await store.start_child("w", kid, bad)
    assert await store.job_steps(job.id) == {}
    assert [j.idempotency_key for j in await store.list_jobs()] == ["starter"]  # rolled back
