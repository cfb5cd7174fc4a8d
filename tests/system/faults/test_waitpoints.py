"""Waitpoints on a real PostgreSQL with real worker processes: a call that waits for a
person holds no lease and no worker slot, survives its worker's death and the database's
restart, is answered exactly once, and resumes where it asked."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from tests.apps.wait_app import build_app
from tests.integration.fence.helpers import Receivers, count_rows
from tests.support.schemas import fresh_schema_dsn
from tests.support.waiting import wait_until
from tests.support.workers import Journal, WorkerGroup, closing_app, wait_job

import tenure
from tenure import App
from tenure._dashboard._dashboard import create_dashboard
from tenure._embedded import EmbeddedPostgres
from tenure._observe._http import ServerThread
from tenure._store import migrate

APP = "tests.apps.wait_app:app"


@pytest.fixture
def workers(tenure_dsn: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    with WorkerGroup(tenure_dsn, tmp_path, app=APP) as group:
        yield group


@pytest.fixture
def ops(tenure_dsn: str) -> Iterator[App]:
    yield from closing_app(build_app(tenure_dsn))


def asked(notes: Path) -> list[list[str]]:
    """``asked JOB WORKER TOKEN`` lines, in order."""
    if not notes.exists():
        return []
    return [line.split() for line in notes.read_text().splitlines() if line.startswith("asked")]


def test_a_waiting_call_holds_no_slot_and_a_timeout_resumes_or_fails_it(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    worker = workers.spawn("a", concurrency=1)  # one slot: a waiting call must not hold it
    worker.wait_started()
    resumed = ops.sync.enqueue("wait_briefly", {"notes": str(notes)})
    failed = ops.sync.enqueue("wait_briefly", {"notes": str(notes), "on_timeout": "fail"})
    assert ops.sync.wait(resumed.id, timeout=30) == "timed out"
    with pytest.raises(tenure.JobFailed) as waited:
        ops.sync.wait(failed.id, timeout=30)
    assert waited.value.code == "waitpoint_timeout"
    assert waited.value.attempts == 1  # suspending did not use up an attempt
    kinds = journal.kinds(resumed.id)
    assert kinds[:2] == ["job_claimed", "suspended"] and "waitpoint_timed_out" in kinds
    assert journal.job(resumed.id)["attempt"] == 1
    # Both calls waited at once on a worker with one slot: neither held it.
    assert len(asked(notes)) == 2


def test_an_answer_is_accepted_once_and_a_cancel_closes_the_waitpoint(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    workers.spawn("a").wait_started()
    jobs = [
        ops.sync.enqueue(
            "capture_when_approved",
            {
                "payment_id": f"p{n}",
                "amount_cents": 100,
                "receiver": "http://127.0.0.1:9",
                "notes": str(notes),
            },
        )
        for n in range(2)
    ]
    wait_until(lambda: len(asked(notes)) == 2, timeout=20, message="never asked")
    tokens = {int(job): token for _, job, _, token in asked(notes)}
    for job in jobs:
        row = wait_job(journal, job.id, lambda j: j["state"] == "waiting", "never waited")
        assert row["lease_until"] is None
    refused = ops.sync.answer_waitpoint(tokens[jobs[0].id], {"approved": False})
    assert refused.state == "queued"
    with pytest.raises(tenure.Conflict):  # a second answer writes nothing
        ops.sync.answer_waitpoint(tokens[jobs[0].id], {"approved": True})
    with pytest.raises(tenure.JobFailed, match="permanent"):
        ops.sync.wait(jobs[0].id, timeout=30)
    assert journal.job(jobs[0].id)["waitpoints"]["approval"]["answer"] == {"approved": False}
    ops.sync.cancel(jobs[1].id)
    with pytest.raises(tenure.Conflict):  # its waitpoint closed with the job
        ops.sync.answer_waitpoint(tokens[jobs[1].id], {"approved": True})
    with pytest.raises(tenure.Conflict):
        ops.sync.answer_waitpoint("wp_not-a-token", {"approved": True})
    assert journal.kinds(jobs[1].id).count("waitpoint_answered") == 0


async def test_a_watcher_is_told_when_a_call_suspends(
    workers: WorkerGroup, tenure_dsn: str, tmp_path: Path
) -> None:
    """``App.watch`` sees a job go to ``waiting`` because the suspension notifies, not
    because it reads again later: its App reads unprompted only once an hour."""
    app = build_app(tenure_dsn)
    app._connection.poll_interval = 3600.0
    try:
        workers.spawn("a")
        arguments = {
            "payment_id": "pay-9",
            "amount_cents": 10,
            "receiver": "http://127.0.0.1:9",
            "notes": str(tmp_path / "notes.txt"),
        }
        job = await app.enqueue("capture_when_approved", arguments)
        seen: list[str] = []
        async with asyncio.timeout(60):  # the test's bound, far below the hour
            async for now in app.watch(job.id):
                seen.append(now.state)
                if now.state == "waiting":
                    break
        assert seen[-1] == "waiting", seen
    finally:
        await app.aclose()


@pytest.fixture
def private_server() -> Iterator[EmbeddedPostgres]:
    root = Path(tempfile.mkdtemp(prefix="tenure-wait-"))
    os.chmod(root, 0o755)
    server = EmbeddedPostgres(root / "data", port=5436)
    try:
        migrate(server.start())
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_a_call_waits_out_a_killed_worker_and_a_restarted_database_then_pays_once(
    private_server: EmbeddedPostgres, tmp_path: Path
) -> None:
    dsn = private_server.dsn
    receivers = Receivers(fresh_schema_dsn(dsn, "r"), tmp_path)
    journal = Journal(dsn)
    notes = tmp_path / "notes.txt"
    ops = build_app(dsn)
    try:
        receiver = receivers.start()
        with WorkerGroup(dsn, tmp_path, app=APP) as workers:
            first = workers.spawn("a")
            first.wait_started()
            job = ops.sync.enqueue(
                "capture_when_approved",
                {
                    "payment_id": "pay-7",
                    "amount_cents": 1250,
                    "receiver": receiver.url,
                    "notes": str(notes),
                },
                idempotency_key="invoice-7:capture",
            )
            wait_until(lambda: asked(notes), timeout=20, message="never asked")
            ((_, _, asker, token),) = asked(notes)
            waiting = wait_job(journal, job.id, lambda j: j["state"] == "waiting", "no wait")
            assert asker == "a" and waiting["lease_until"] is None

            assert first.kill() == -9  # while it waits, nobody holds anything to lose
            private_server.restart("immediate")
            assert journal.job(job.id)["state"] == "waiting"  # survived the crash restart

            resumed = ops.sync.answer_waitpoint(token, {"approved": True, "by": "alice"})
            assert resumed.state == "queued"
            with pytest.raises(tenure.Conflict):  # a duplicate answer
                ops.sync.answer_waitpoint(token, {"approved": False, "by": "mallory"})

            workers.spawn("b").wait_started()
            done = wait_job(
                journal,
                job.id,
                lambda j: j["state"] in ("succeeded", "failed"),
                "never resumed",
                workers,
            )
            assert done["state"] == "succeeded", done
            assert done["result"]["by"] == "alice" and done["result"]["worker"] == "b"
            with pytest.raises(tenure.Conflict):  # a late answer, once it resumed
                ops.sync.answer_waitpoint(token, {"approved": True})
        # The side effect happened once, under the resuming owner's token.
        key = f"tool-job:{job.id}:capture"
        assert count_rows(receivers.dsn, "example_payments", key) == 1
        accepted = [d for d in receivers.started[0].decisions(key) if d["decision"] == "accepted"]
        assert [d["token"] for d in accepted] == [done["token"]]
        kinds = journal.kinds(job.id)
        assert kinds[:3] == ["job_claimed", "suspended", "waitpoint_answered"], kinds
        assert kinds.count("suspended") == kinds.count("waitpoint_answered") == 1
        assert kinds.count("succeeded") == 1
        # After the answer only worker b ran it (the receiver, restarted with the database,
        # may refuse its first request: a retry with the same key, never a second payment).
        later = journal.events(job.id, "job_claimed")[1:]
        assert later and {e["worker"] for e in later} == {"b"}
    finally:
        ops.close()
        receivers.stop_all()


def test_a_webhook_answers_through_the_dashboard_once(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path, tenure_dsn: str
) -> None:
    """``POST /waitpoints/{token}``: the token is the only key the webhook needs, even on a
    dashboard that asks every person for its access token."""
    notes = tmp_path / "notes.txt"
    workers.spawn("a").wait_started()
    job = ops.sync.enqueue("wait_briefly", {"notes": str(notes), "timeout": 600})
    wait_until(lambda: asked(notes), timeout=20, message="never asked")
    ((_, _, _, token),) = asked(notes)
    board = create_dashboard(tenure_dsn, access_token="dashboard-test-token-0123456789")
    server = ServerThread(board, "127.0.0.1", 0)
    url = server.start()
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            assert client.get("/api/overview").status_code == 401  # people still need the token
            refused = client.post(f"/waitpoints/{token}", content=b"{not json")
            assert refused.status_code == 400
            answered = client.post(f"/waitpoints/{token}", json={"carrier": "delivered"})
            assert answered.status_code == 200 and answered.json() == {
                "job": job.id,
                "state": "queued",
            }
            again = client.post(f"/waitpoints/{token}", json={"carrier": "lost"})
            assert again.status_code == 409
            assert client.post("/waitpoints/wp_guess", json=1).status_code == 409
    finally:
        server.stop()
    assert ops.sync.wait(job.id, timeout=30) == "answered {'carrier': 'delivered'}"
    assert journal.kinds(job.id).count("waitpoint_answered") == 1


def deadline_passed(dsn: str, job_id: int) -> bool:
    """Whether the database's own clock has passed the job's waitpoint deadline."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT clock_timestamp() > deadline FROM tenure_waitpoints WHERE job_id = %s",
            (job_id,),
        ).fetchone()
    return bool(row and row[0])


def test_answers_past_the_deadline_are_refused_while_workers_run(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path, tenure_dsn: str
) -> None:
    """Each answer is sent as soon as the database's clock passes its waitpoint's deadline,
    usually before the rescuer's next sweep (every second): each is a Conflict, and every
    job, ``on_timeout="fail"``, ends failed. An answer in time is taken."""
    notes = tmp_path / "notes.txt"
    for name in ("a", "b"):
        workers.spawn(name, concurrency=4).wait_started()
    late = [
        ops.sync.enqueue("wait_briefly", {"notes": str(notes), "on_timeout": "fail"})
        for _ in range(8)
    ]
    timely = ops.sync.enqueue("wait_briefly", {"notes": str(notes), "timeout": 600})
    wait_until(lambda: len(asked(notes)) == 9, timeout=30, message="not all asked")
    tokens = {int(job): token for _, job, _, token in asked(notes)}
    refused = 0
    for job in late:
        wait_until(
            functools.partial(deadline_passed, tenure_dsn, job.id), timeout=30, interval=0.005
        )
        with pytest.raises(tenure.Conflict):
            ops.sync.answer_waitpoint(tokens[job.id], {"approved": True})
        refused += 1
    assert refused == len(late)
    assert ops.sync.answer_waitpoint(tokens[timely.id], "yes").state == "queued"
    for job in late:
        with pytest.raises(tenure.JobFailed) as failed:
            ops.sync.wait(job.id, timeout=30)
        assert failed.value.code == "waitpoint_timeout"
        assert "waitpoint_answered" not in journal.kinds(job.id)
    assert ops.sync.wait(timely.id, timeout=30) == "answered yes"


@pytest.mark.slow
def test_an_answer_past_a_deadline_the_database_was_down_for_is_refused(
    private_server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """The database stops before the deadline and comes back after it: the first answer
    after the restart, whether or not a rescuer has swept since, is a Conflict, and the job
    fails; a waitpoint whose deadline is still ahead is answered as usual."""
    dsn = private_server.dsn
    notes = tmp_path / "notes.txt"
    ops = build_app(dsn)
    try:
        with WorkerGroup(dsn, tmp_path, app=APP) as workers:
            workers.spawn("a").wait_started()
            short = ops.sync.enqueue(
                "wait_briefly", {"notes": str(notes), "on_timeout": "fail", "timeout": 3}
            )
            long = ops.sync.enqueue("wait_briefly", {"notes": str(notes), "timeout": 600})
            wait_until(lambda: len(asked(notes)) == 2, timeout=30, message="not both asked")
            tokens = {int(job): token for _, job, _, token in asked(notes)}
            with psycopg.connect(dsn) as conn:
                row = conn.execute(
                    "SELECT extract(epoch FROM deadline)::float8 FROM tenure_waitpoints"
                    " WHERE job_id = %s",
                    (short.id,),
                ).fetchone()
            assert row is not None
            private_server.stop()
            # The server's clock is this machine's: wait out the deadline while it is down.
            wait_until(lambda: time.time() > row[0] + 0.2, timeout=30, interval=0.05)
            private_server.start()
            with pytest.raises(tenure.Conflict):
                ops.sync.answer_waitpoint(tokens[short.id], {"approved": True})
            assert ops.sync.answer_waitpoint(tokens[long.id], "yes").state == "queued"
            with pytest.raises(tenure.JobFailed) as failed:
                ops.sync.wait(short.id, timeout=60)
            assert failed.value.code == "waitpoint_timeout"
            assert ops.sync.wait(long.id, timeout=60) == "answered yes"
    finally:
        ops.close()


def test_a_retried_call_asks_its_closed_waitpoint_again(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    """A job that timed out at its waitpoint (``on_timeout="fail"``), or was cancelled while
    it waited, is retried the public way (`App.admin.retry`: the CLI, the dashboard and bulk
    actions use it): the call asks for the same waitpoint again, which opens again under the
    same token, with a fresh deadline, promptly and without holding the worker's one slot.
    No commit is retried, refused or uncertain on the way."""
    notes = tmp_path / "notes.txt"
    worker = workers.spawn("a", concurrency=1)
    worker.wait_started()
    timed_out = ops.sync.enqueue("wait_briefly", {"notes": str(notes), "on_timeout": "fail"})
    with pytest.raises(tenure.JobFailed, match="waitpoint_timeout"):
        ops.sync.wait(timed_out.id, timeout=30)
    cancelled = ops.sync.enqueue("wait_briefly", {"notes": str(notes), "timeout": 600})
    wait_job(journal, cancelled.id, lambda j: j["state"] == "waiting", "never waited", workers)
    ops.sync.cancel(cancelled.id)

    ops.sync.admin.retry(timed_out.id)
    ops.sync.admin.retry(cancelled.id)
    for job in (timed_out, cancelled):
        wait_job(
            journal,
            job.id,
            lambda j: len(journal.events(j["id"], "suspended")) == 2,
            "did not wait again",
            workers,
        )
        again = journal.events(job.id, "suspended")
        assert again[1]["detail"]["reopened"] is True and again[1]["attempt"] == 2
    # Timed out again, it fails again, the same clear way.
    with pytest.raises(tenure.JobFailed, match="waitpoint_timeout"):
        ops.sync.wait(timed_out.id, timeout=30)
    # The token handed out before the cancel answers the wait that opened again.
    tokens = [token for _, job, _, token in asked(notes) if int(job) == cancelled.id]
    assert len(tokens) == 2 and tokens[0] == tokens[1]
    assert ops.sync.answer_waitpoint(tokens[0], "late but welcome").state == "queued"
    assert ops.sync.wait(cancelled.id, timeout=30) == "answered late but welcome"
    # Neither waiting call held the one slot: another call ran meanwhile, to its end.
    other = ops.sync.enqueue("wait_briefly", {"notes": str(notes)})
    assert ops.sync.wait(other.id, timeout=30) == "timed out"
    for kind in ("commit_uncertain", "commit_retried", "commit_refused", "result_rejected"):
        assert not worker.has_event(kind), worker.log()
    assert "level=error" not in worker.log() and "Traceback" not in worker.log()
