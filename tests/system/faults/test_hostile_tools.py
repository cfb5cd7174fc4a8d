"""Tools that exit, raise what cannot be printed, return what cannot be stored, or finish
right as their heartbeat goes out: each ends in a clear outcome for that one call, in a
real worker process that lives on (and still stops on SIGTERM)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.apps.hostile_app import build_app
from tests.support.waiting import wait_until
from tests.support.workers import Journal, WorkerGroup, closing_app, wait_job

from tenure import App

APP = "tests.apps.hostile_app:app"
ENDED = ("succeeded", "failed", "cancelled")


@pytest.fixture
def workers(tenure_dsn: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    with WorkerGroup(tenure_dsn, tmp_path, app=APP) as group:
        yield group


@pytest.fixture
def ops(tenure_dsn: str) -> Iterator[App]:
    yield from closing_app(build_app(tenure_dsn))


def ended(journal: Journal, job_id: int, workers: WorkerGroup) -> dict[str, object]:
    return wait_job(journal, job_id, lambda j: j["state"] in ENDED, "never ended", workers)


def test_an_exit_inside_a_tool_fails_that_call_and_the_worker_lives_on(
    workers: WorkerGroup, ops: App, journal: Journal
) -> None:
    worker = workers.spawn("a", concurrency=2)
    worker.wait_started()
    for tool, raised in [
        ("exits", "SystemExit"),
        ("interrupts", "KeyboardInterrupt"),
        ("exits_in_thread", "SystemExit"),
    ]:
        job = ops.sync.enqueue(tool)
        row = ended(journal, job.id, workers)
        assert row["state"] == "failed", row
        assert row["error"]["code"] == "error", row["error"]  # type: ignore[index]
        assert raised in row["error"]["message"], row["error"]  # type: ignore[index]
        assert worker.alive, worker.log()
    # The same process still takes and finishes work, then stops when told.
    after = ops.sync.enqueue("quick", {"seconds": 0.01})
    row = ended(journal, after.id, workers)
    assert (row["state"], row["owner"]) == ("succeeded", "a")
    worker.terminate()
    assert worker.wait(10) == 0, worker.log()


@pytest.mark.parametrize(
    ("tool", "payload", "code", "message"),
    [
        ("raises", {"kind": "unprintable"}, "error", "<Unprintable: str() raised>"),
        ("raises", {"kind": "untranslatable"}, "error", "broken \ufffd text ? here"),
        ("returns", {"kind": "huge_int"}, "bad_result", "cannot be written as JSON"),
        ("returns", {"kind": "nul"}, "bad_result", "NUL character"),
        ("returns", {"kind": "surrogate"}, "bad_result", "not valid Unicode"),
    ],
)
def test_an_outcome_postgres_cannot_store_ends_the_job_with_a_clean_error(
    workers: WorkerGroup,
    ops: App,
    journal: Journal,
    tool: str,
    payload: dict[str, str],
    code: str,
    message: str,
) -> None:
    worker = workers.spawn("a")
    job = ops.sync.enqueue(tool, payload)
    row = ended(journal, job.id, workers)
    assert row["state"] == "failed", row
    assert row["error"]["code"] == code, row["error"]  # type: ignore[index]
    assert message in row["error"]["message"], row["error"]  # type: ignore[index]
    # A result that cannot be stored is final at once; a tool's error is retried as usual.
    assert row["attempt"] == (1 if code == "bad_result" else 2)
    # Every commit landed at the first try: none was left to wait out its lease.
    assert not worker.has_event("commit_uncertain"), worker.log()
    assert not worker.has_event("commit_refused"), worker.log()
    assert journal.kinds(job.id).count("heartbeat_lost") == 0


def test_a_commit_that_crosses_its_own_heartbeat_is_not_a_lost_lease(
    workers: WorkerGroup, ops: App, journal: Journal, tenure_dsn: str
) -> None:
    """Many calls that end right around a heartbeat (every 0.1 s): an extension sent just
    before the commit lands matches zero rows. That lease was used, not lost."""
    durations = [0.095, 0.1, 0.105, 0.195, 0.2, 0.205]
    workers.spawn("a", concurrency=60).wait_started()
    ops._connection.run(
        ops.enqueue_many("quick", [{"seconds": durations[n % 6]} for n in range(360)])
    )
    wait_until(
        lambda: (
            journal._rows("SELECT count(*) AS n FROM tenure_jobs WHERE state <> 'succeeded'", {})[
                0
            ]["n"]
            == 0
        ),
        timeout=60,
        interval=0.1,
        message="not every quick call succeeded",
    )
    rows = journal._rows(
        "SELECT e.job_id, e.code FROM tenure_events e JOIN tenure_jobs j ON j.id = e.job_id"
        " WHERE e.kind = 'heartbeat_lost' AND e.token = j.token",
        {},
    )
    assert rows == [], rows
    assert not workers["a"].has_event("heartbeat_lost"), workers["a"].log()[-3000:]


def test_a_stopped_threads_late_result_is_journaled_without_its_content(
    workers: WorkerGroup, ops: App, journal: Journal
) -> None:
    workers.spawn("a").wait_started()
    job = ops.sync.enqueue("stubborn", {"seconds": 1.0})
    running = wait_job(journal, job.id, lambda j: j["state"] == "running", "never ran", workers)
    ops.sync.cancel(job.id)
    wait_until(
        lambda: journal.events(job.id, "result_discarded"),
        timeout=20,
        message=f"no result_discarded row: {journal.kinds(job.id)}",
    )
    (row,) = journal.events(job.id, "result_discarded")
    assert (row["token"], row["attempt"], row["worker"]) == (
        running["token"],
        running["attempt"],
        "a",
    )
    assert row["detail"]["outcome"] == "succeeded"
    assert row["detail"]["reason"] == "cancelled"
    assert "late" not in str(row["detail"])
    assert journal.job(job.id)["state"] == "cancelled"
