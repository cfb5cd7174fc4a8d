"""Waitpoints at the store, on a real PostgreSQL, decided by the database's clock and its
verdict on each error:

- an answer at or past the deadline is a Conflict that writes nothing, whether or not the
  rescuer has swept the waitpoint yet, and an ``on_timeout="fail"`` job then fails;
- a suspension the database refuses for a constraint ends its job at once, failed with a
  clear code, and is never retried as an uncertain commit;
- a retried job's waitpoint that closed without an answer opens again when the call
  suspends there again, under the same token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from tests.integration.store.helpers import new_job
from tests.support.waiting import wait_until_async

import tenure
from tenure._store import ClaimedJob, Finish, OpenWaitpoint, Store
from tenure._waitpoint import derive_token, token_hash
from tenure._worker._completer import Completer
from tenure._worker._ownership import Ownership

LEASES = {"t": 30_000}


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[tenure.App]:
    app = tenure.App(tenure_dsn)
    yield app
    await app.aclose()


def rows(dsn: str, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute(query, params or {}).fetchall()


def written(dsn: str, job_id: int) -> list[dict[str, Any]]:
    """Everything an answer could write about a job: its row, its waitpoints, its journal."""
    return rows(
        dsn,
        """
        SELECT 'job' AS what, to_jsonb(j) AS row FROM tenure_jobs j WHERE j.id = %(id)s
        UNION ALL SELECT 'waitpoint', to_jsonb(w) FROM tenure_waitpoints w WHERE w.job_id = %(id)s
        UNION ALL SELECT 'event', to_jsonb(e) FROM tenure_events e WHERE e.job_id = %(id)s
        ORDER BY 1, 2
        """,
        {"id": job_id},
    )


async def suspended(
    store: Store, key: str, *, timeout_ms: int, on_timeout: str = "resume"
) -> tuple[ClaimedJob, str]:
    """A job claimed and suspended at waitpoint "approval"; it and the waitpoint's token."""
    await store.enqueue(new_job(key))
    (job,) = await store.claim("w", LEASES, 1)
    token = derive_token(await store.waitpoint_secret(), job.id, "approval")
    at = OpenWaitpoint("approval", token_hash(token), timeout_ms, on_timeout, None)
    assert await store.suspend("w", Finish(job.id, job.token, "waiting", waitpoint=at))
    return job, token


async def past_deadline(dsn: str, job_id: int) -> None:
    """Until the database's own clock has passed the waitpoint's deadline."""

    def passed() -> bool:
        (row,) = rows(
            dsn,
            "SELECT clock_timestamp() > deadline AS passed FROM tenure_waitpoints "
            "WHERE job_id = %(id)s",
            {"id": job_id},
        )
        return bool(row["passed"])

    await wait_until_async(passed, timeout=30, interval=0.05, message="deadline never passed")


async def test_an_answer_past_the_deadline_is_a_conflict_before_any_sweep(
    store: Store, app: tenure.App, tenure_dsn: str
) -> None:
    """No worker, no rescuer: only the answer's compare-and-set can refuse it."""
    late, late_token = await suspended(store, "late", timeout_ms=1000, on_timeout="fail")
    _, timely_token = await suspended(store, "timely", timeout_ms=3_600_000)
    await past_deadline(tenure_dsn, late.id)
    before = written(tenure_dsn, late.id)
    with pytest.raises(tenure.Conflict):
        await app.answer_waitpoint(late_token, {"approved": True})
    assert written(tenure_dsn, late.id) == before  # nothing written: still open, still waiting
    assert (await app.answer_waitpoint(timely_token, {"approved": True})).state == "queued"
    # The sweep then does what the deadline says: on_timeout="fail" fails the job ...
    assert await store.expire_waitpoints(10) == [late.id]
    failed = await app.get(late.id)
    assert failed.state == "failed" and (failed.error or {})["code"] == "waitpoint_timeout"
    # ... and it stays failed: a later answer is refused as well.
    with pytest.raises(tenure.Conflict):
        await app.answer_waitpoint(late_token, {"approved": True})
    assert (await app.get(late.id)).state == "failed"


async def test_a_refused_suspension_fails_its_job_at_once_never_uncertain(
    store: Store, tenure_dsn: str
) -> None:
    """The database refuses the suspension (UNIQUE (job_id, name): this job already holds
    an answered waitpoint of that name). Retrying cannot help: the job must end failed,
    with a code that says so, long before its 30 s lease would run out."""
    await store.enqueue(new_job("twice"))
    (job,) = await store.claim("w", LEASES, 1)
    with psycopg.connect(tenure_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tenure_waitpoints (job_id, name, token_hash, token, state, on_timeout,"
            " deadline) VALUES (%s, 'approval', repeat('0', 64), %s, 'answered', 'resume',"
            " clock_timestamp())",
            (job.id, job.token),
        )
    at = OpenWaitpoint("approval", token_hash("wp_x"), 60_000, "resume", None)
    kinds: list[str] = []
    completer = Completer(store, "w", kinds.append)
    completer.start()
    started = time.monotonic()
    try:
        accepted = await asyncio.wait_for(
            completer.commit(
                job,
                Finish(job.id, job.token, "waiting", waitpoint=at),
                Ownership(time.monotonic(), 30),
            ),
            10,
        )
    finally:
        await completer.stop()
    assert time.monotonic() - started < 10
    assert accepted and kinds == ["failed"]  # its failure was committed, not the suspension
    row = await store.get_job(job.id)
    assert row.state == "failed"
    assert row.error is not None
    assert row.error["code"] == "commit_refused"
    assert row.error["type"] == "UniqueViolation" and row.error["sqlstate"] == "23505"
    assert row.error["constraint"] == "tenure_waitpoints_job_id_name_key"
    (failed,) = rows(
        tenure_dsn,
        "SELECT code FROM tenure_events WHERE job_id = %(id)s AND kind = 'failed'",
        {"id": job.id},
    )
    assert failed["code"] == "commit_refused"  # journaled like any failure
    states = rows(
        tenure_dsn, "SELECT state FROM tenure_waitpoints WHERE job_id = %(id)s", {"id": job.id}
    )
    assert states == [{"state": "answered"}]  # nothing opened


async def test_a_retry_opens_a_waitpoint_closed_without_an_answer_again(
    store: Store, app: tenure.App, tenure_dsn: str
) -> None:
    job, token = await suspended(store, "again", timeout_ms=3_600_000)
    await app.cancel(job.id)  # closes the waitpoint with the job
    await app.admin.retry(job.id)
    (again,) = await store.claim("w", LEASES, 1)
    assert again.id == job.id and not again.waitpoints  # it never had an answer
    assert derive_token(await store.waitpoint_secret(), job.id, "approval") == token
    at = OpenWaitpoint("approval", token_hash(token), 60_000, "fail", '{"again": true}')
    assert await store.suspend("w", Finish(job.id, again.token, "waiting", waitpoint=at))
    (wp,) = await store.job_waitpoints(job.id)
    assert wp["state"] == "open" and wp["on_timeout"] == "fail" and wp["request"] == {"again": True}
    assert 0 < wp["seconds_left"] <= 60
    (event,) = rows(
        tenure_dsn,
        "SELECT detail FROM tenure_events WHERE job_id = %(id)s AND kind = 'suspended' "
        "AND token = %(token)s",
        {"id": job.id, "token": again.token},
    )
    assert event["detail"]["reopened"] is True
    # The token the person was first given answers the wait that opened again.
    answered = await app.answer_waitpoint(token, {"approved": True})
    assert answered.state == "queued"
    assert answered.waitpoints is not None
    assert answered.waitpoints["approval"]["answer"] == {"approved": True}


async def test_a_retry_forgets_a_timeout_and_keeps_an_answer(
    store: Store, app: tenure.App, tenure_dsn: str
) -> None:
    """A waitpoint that timed out (resuming the call, which then failed) is asked again
    after a retry; an answered one keeps its answer."""
    job, _ = await suspended(store, "timeout", timeout_ms=1000)
    await past_deadline(tenure_dsn, job.id)
    assert await store.expire_waitpoints(10) == [job.id]
    (resumed,) = await store.claim("w", LEASES, 1)
    assert resumed.waitpoints is not None and resumed.waitpoints["approval"]["timed_out"]
    failed = Finish(job.id, resumed.token, "failed", error={"code": "permanent"})
    assert (await store.finish_many("w", [failed]))[job.id]
    await app.admin.retry(job.id)
    (again,) = await store.claim("w", LEASES, 1)
    assert not again.waitpoints  # asked again, from the top


async def test_the_cli_answers_through_the_same_door_once(
    store: Store,
    tenure_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`tenure jobs answer TOKEN ANSWER` is `App.answer_waitpoint`: it queues the job again
    with the answer, and a second answer is refused (exit 1, one line) and writes nothing."""
    from tenure._cli import main

    job, token = await suspended(store, "by-cli", timeout_ms=3_600_000)
    monkeypatch.setenv("TENURE_DSN", tenure_dsn)
    answer = ["jobs", "answer", token, '{"approved": true}']
    assert await asyncio.to_thread(main, answer) == 0
    assert "queued" in capsys.readouterr().out
    (row,) = rows(
        tenure_dsn, "SELECT answer FROM tenure_waitpoints WHERE job_id = %(id)s", {"id": job.id}
    )
    assert row["answer"] == {"approved": True}
    before = written(tenure_dsn, job.id)
    assert await asyncio.to_thread(main, answer) == 1
    assert "no open waitpoint has this token" in capsys.readouterr().err
    assert written(tenure_dsn, job.id) == before
