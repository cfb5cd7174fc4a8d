"""A fenced step under real process faults: a worker paused (SIGSTOP) in the middle of a
step loses its lease to another worker, which runs the step again; the paused owner,
continued while the new owner still holds the job, finishes the step and is refused by the
database (zero rows: its token is not the job's), so its result is never recorded, and the
job's outcome is the new owner's."""

from __future__ import annotations

from pathlib import Path

from tests.apps.durable_app import notes_of
from tests.support.waiting import wait_until
from tests.support.workers import Journal, WorkerGroup, wait_job

from tenure import App


def test_a_paused_owners_step_is_refused_after_a_takeover(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    notes, release = tmp_path / "notes.txt", tmp_path / "release"
    first = workers.spawn("a")
    first.wait_started()
    job = ops.sync.enqueue("held_step", {"notes": str(notes), "release": str(release)})
    wait_until(lambda: notes_of(str(notes), "entered"), timeout=20, message="no step began")
    first.pause()  # SIGSTOP inside the step's function: heartbeats stop too
    workers.spawn("b").wait_started()
    wait_until(lambda: len(notes_of(str(notes), "entered")) == 2, timeout=20, message="no takeover")
    taken = journal.job(job.id)
    assert taken["state"] == "running" and taken["owner"] == "b" and taken["attempt"] == 2
    (tmp_path / "release1").touch()
    first.resume()  # its step returns now, and its checkpoint goes to the database
    rejected = first.wait_event("step_rejected", timeout=20, job=job.id)
    assert rejected["step"] == "work"
    assert journal.job(job.id)["owner"] == "b"  # nothing of a's reached the job
    (tmp_path / "release2").touch()
    done = wait_job(journal, job.id, lambda j: j["state"] == "succeeded", "never done", workers)
    assert done["owner"] == "b" and done["result"]["by"] == "b"
    wait_until(lambda: journal.events(job.id, "step_rejected"), timeout=20, message="not journaled")
    (refused,) = journal.events(job.id, "step_rejected")
    (recorded,) = journal.events(job.id, "step_recorded")
    assert refused["worker"] == "a" and refused["token"] < recorded["token"] == done["token"]
    entered = notes_of(str(notes), "entered")
    assert [worker for _, worker, _ in entered] == ["a", "b"]
    # Only the new owner's step was recorded, and it is the job's outcome; the old owner
    # never got past its step.
    assert notes_of(str(notes), "recorded") == [["recorded", "b", str(done["token"])]]
    assert journal.kinds(job.id).count("succeeded") == 1
