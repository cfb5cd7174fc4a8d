"""Durable waits with real worker processes and a real server restart: a sleeping job and a
parent waiting for its child hold no lease and no worker slot (counted in the database),
outlive their worker's death and a crash restart of PostgreSQL, and each resumes exactly
once, on another worker, with the steps before the wait replayed, not run again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.apps.durable_app import build_app, notes_of
from tests.support.servers import traversable_temp_dir
from tests.support.waiting import wait_until
from tests.support.workers import Journal, WorkerGroup, wait_job

from tenure._embedded import EmbeddedPostgres
from tenure._store import migrate

APP = "tests.apps.durable_app:app"


@pytest.fixture
def private_server() -> Iterator[EmbeddedPostgres]:
    with traversable_temp_dir("tenure-durable-") as root:
        server = EmbeddedPostgres(root / "data", port=5441)
        try:
            migrate(server.start())
            yield server
        finally:
            server.stop()


def holding(journal: Journal) -> dict[str, int]:
    (row,) = journal._rows(
        "SELECT count(*) FILTER (WHERE state = 'running') AS running,"
        " count(*) FILTER (WHERE lease_until IS NOT NULL) AS leases,"
        " count(*) FILTER (WHERE state = 'waiting') AS waiting FROM tenure_jobs",
        {},
    )
    return dict(row)


@pytest.mark.slow
def test_waits_outlive_a_killed_worker_and_a_restarted_database_and_resume_once(
    private_server: EmbeddedPostgres, tmp_path: Path
) -> None:
    dsn = private_server.dsn
    journal = Journal(dsn)
    notes, release = str(tmp_path / "notes.txt"), str(tmp_path / "release")
    ops = build_app(dsn)
    try:
        with WorkerGroup(dsn, tmp_path, app=APP) as workers:
            first = workers.spawn("a", concurrency=1)  # one slot: the waits must not hold it
            first.wait_started()
            nap = ops.sync.enqueue("napper", {"notes": notes, "seconds": 6})
            parent = ops.sync.enqueue("parent", {"notes": notes, "release": release})
            wait_until(lambda: notes_of(notes, "child"), timeout=30, message="no child ran")
            for job in (nap, parent):
                wait_job(journal, job.id, lambda j: j["state"] == "waiting", "no wait", workers)
            # The child runs in the worker's only slot: neither wait holds one, nor a lease.
            assert holding(journal) == {"running": 1, "leases": 1, "waiting": 2}

            assert first.kill() == -9
            private_server.restart("immediate")
            assert [journal.job(j.id)["state"] for j in (nap, parent)] == ["waiting", "waiting"]

            Path(release).touch()
            workers.spawn("b").wait_started()
            for job in (nap, parent):
                wait_job(journal, job.id, lambda j: j["state"] == "succeeded", "stuck", workers)
        assert journal.job(nap.id)["result"] == "slept on b"
        assert journal.job(parent.id)["result"] == ["succeeded", "child done on b", "b"]
        # Each step before a wait ran once, on the first worker; the ones after, once.
        assert [n[1:] for n in notes_of(notes, "before")] == [["a"]]
        assert [n[1:] for n in notes_of(notes, "after")] == [["b"]]
        assert [n[1:] for n in notes_of(notes, "plan")] == [["a"]]
        # Resumed once each: one timeout, one answer.
        assert journal.kinds(nap.id).count("waitpoint_timed_out") == 1
        assert journal.kinds(parent.id).count("waitpoint_answered") == 1
        assert [k for k in journal.kinds(parent.id) if k == "succeeded"] == ["succeeded"]
        children = journal._rows("SELECT id FROM tenure_jobs WHERE parent_id IS NOT NULL", {})
        assert len(children) == 1  # the replayed start found its child; none was started twice
    finally:
        ops.close()
