"""Faults injected into real worker processes on a real PostgreSQL.

Every test runs ``python -m tenure worker tests.apps.fault_app:app`` processes
and breaks them the way production does: SIGKILL mid-call, SIGSTOP past the
lease, an event loop blocked by a bad tool, a stuck call, an operator's cancel,
a SIGTERM during a deploy, a network partition between one worker and the
database. The assertions read tenure's own tables (state, token, attempt, the
journal) and marker files the tools write, never the workers' own claims alone.

Leases are 1.5 s renewed every 0.3 s (see tests/apps/fault_app.py), so a dead
owner is replaced within about two seconds.
"""

from __future__ import annotations

import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.apps.fault_app import BACKOFF, HEARTBEAT, LEASE, LONG_LIMIT
from tests.support.waiting import wait_until
from tests.support.workers import Journal, WorkerGroup, WorkerProcess, wait_job

from tenure import App
from tenure._chaos._proxy import FaultProxy, rewrite_dsn
from tenure._store import QUERIES

# A reclaim needs the lease to run out (≤ LEASE after the last beat) plus a poll.
RECLAIM_TIMEOUT = 15.0
DONE_TIMEOUT = 20.0


# -- helpers -------------------------------------------------------------------------


def wait_running(journal: Journal, job_id: int, workers: WorkerGroup) -> dict[str, Any]:
    return wait_job(
        journal,
        job_id,
        lambda j: j["state"] == "running",
        timeout=DONE_TIMEOUT,
        what="never ran",
        workers=workers,
    )


def wait_done(journal: Journal, job_id: int, workers: WorkerGroup, **kw: Any) -> dict[str, Any]:
    return wait_job(
        journal,
        job_id,
        lambda j: j["state"] in ("succeeded", "failed", "cancelled"),
        what="never finished",
        workers=workers,
        **kw,
    )


def lines(path: Path) -> list[list[str]]:
    """A marker file as split lines (``[what, job, token, worker]``); [] if absent."""
    if not path.exists():
        return []
    return [line.split() for line in path.read_text(encoding="utf-8").splitlines()]


def marks(path: Path, what: str) -> list[list[str]]:
    return [line for line in lines(path) if line[0] == what]


def wait_mark(path: Path, what: str, timeout: float = DONE_TIMEOUT) -> list[str]:
    wait_until(
        lambda: marks(path, what),
        timeout=timeout,
        interval=0.01,
        message=f"no {what!r} line in {path.name}: {lines(path)}",
    )
    return marks(path, what)[0]


def start_all(*workers: WorkerProcess) -> None:
    for worker in workers:
        worker.wait_started()


def other(workers: WorkerGroup, name: str) -> WorkerProcess:
    (found,) = [w for w in workers if w.name != name]
    return found


def succeeded_exactly_once(journal: Journal, job_id: int) -> dict[str, Any]:
    done = journal.events(job_id, "succeeded")
    assert len(done) == 1, f"job {job_id} committed {len(done)} times: {journal.kinds(job_id)}"
    return done[0]


# -- crash and pause -----------------------------------------------------------------


def newer_token(row: dict[str, Any], *, than: int) -> bool:
    return bool(row["token"] > than)


def noticed_the_loss(stale: WorkerProcess, job_id: int) -> bool:
    """The stale worker saw it lost the job: a lost beat, a refused commit, or a call
    stopped at its local deadline or on zero rows."""
    return (
        stale.has_event("heartbeat_lost", job=job_id)
        or stale.has_event("result_rejected", job=job_id)
        or stale.has_event("call_abandoned", job=job_id, reason="deadline_passed")
        or stale.has_event("call_abandoned", job=job_id, reason="zero_rows")
    )


def refused_if_it_finished(stale: WorkerProcess, job_id: int) -> bool:
    """The stale worker's call did not succeed, or its commit was rejected."""
    return not stale.has_event("call_finished", job=job_id, outcome="succeeded") or stale.has_event(
        "result_rejected", job=job_id
    )


def test_sigkilled_owner_is_replaced_after_its_lease_and_the_call_completes_once(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    out = tmp_path / "record.txt"
    start_all(workers.spawn("a"), workers.spawn("b"))
    job = ops.sync.enqueue("record", {"seconds": 0.5, "path": str(out)})

    first = wait_running(journal, job.id, workers)
    victim = workers[first["owner"]]
    survivor = other(workers, victim.name)
    assert victim.kill() == -9
    killed_at = time.monotonic()

    row = wait_done(journal, job.id, workers)
    taken_over_after = time.monotonic() - killed_at
    assert row["state"] == "succeeded", row
    assert row["owner"] == survivor.name
    assert row["token"] > first["token"]
    assert row["attempt"] == 2
    assert row["result"] == {"worker": survivor.name, "token": row["token"], "attempt": 2}

    done = succeeded_exactly_once(journal, job.id)
    assert done["token"] == row["token"] and done["worker"] == survivor.name
    claims = journal.events(job.id, "job_claimed")
    assert [c["worker"] for c in claims] == [victim.name, survivor.name]
    assert claims[1]["detail"]["previous_token"] == first["token"]
    assert claims[1]["detail"]["reclaimed_from"] == victim.name
    # The side effect happened once, by the new owner, under its token.
    assert lines(out) == [[str(job.id), str(row["token"]), survivor.name]]
    # A dead owner is detected within one lease, not by a "stale after N" guess.
    assert taken_over_after < LEASE + 1.0 + 3.0, taken_over_after


def test_an_idle_worker_reclaims_a_dead_owners_job_when_its_lease_ends_not_at_its_poll(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    """No NOTIFY announces a crash. The survivor polls only every 60 s, so a reclaim well
    within that can only come from waking at the dead owner's lease end."""
    out = tmp_path / "record.txt"
    start_all(workers.spawn("a"))
    # Long on a (it must still hold the call when it is killed, however slowly b starts).
    job = ops.sync.enqueue("record", {"seconds": 30.0, "path": str(out), "only_on": "a"})
    first = wait_running(journal, job.id, workers)
    assert first["owner"] == "a"
    start_all(workers.spawn("b", poll_interval=60.0))
    assert workers["a"].kill() == -9
    row = wait_done(journal, job.id, workers, timeout=RECLAIM_TIMEOUT)
    assert row["state"] == "succeeded" and row["owner"] == "b", row
    assert [c["worker"] for c in journal.events(job.id, "job_claimed")] == ["a", "b"]
    assert lines(out) == [[str(job.id), str(row["token"]), "b"]]


def test_sigstopped_owner_past_its_lease_cannot_commit_or_act_after_sigcont(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    out = tmp_path / "record.txt"
    marker = tmp_path / "sleepy.txt"
    stale = workers.spawn("stale", concurrency=2)
    stale.wait_started()
    # record guards its side effect with ensure_owned(); sleepy has no guard at all,
    # so only the fenced commit stands between the stale owner and the job's result.
    guarded = ops.sync.enqueue("record", {"seconds": 1.0, "path": str(out)})
    unguarded = ops.sync.enqueue("sleepy", {"seconds": 1.0, "marker": str(marker)})
    firsts = {j.id: wait_running(journal, j.id, workers) for j in (guarded, unguarded)}
    wait_mark(marker, "started")
    assert {r["owner"] for r in firsts.values()} == {"stale"}
    stale.pause()

    fresh = workers.spawn("fresh", concurrency=2)
    for job_id, first in firsts.items():
        wait_job(
            journal,
            job_id,
            partial(newer_token, than=first["token"]),
            timeout=RECLAIM_TIMEOUT,
            what="was never reclaimed from the stopped worker",
            workers=workers,
        )
    # Both calls now run on the fresh worker (for another second); the stale one wakes
    # up believing it still owns them, with results ready to commit.
    stale.resume()

    for job_id, first in firsts.items():
        row = wait_done(journal, job_id, workers)
        assert row["state"] == "succeeded", row
        assert row["owner"] == "fresh"
        assert row["token"] > first["token"]
        assert row["result"]["worker"] == "fresh"
        assert row["result"]["token"] == row["token"]
        done = succeeded_exactly_once(journal, job_id)
        assert done["worker"] == "fresh"
        # The stale worker must notice: a zero-row/expired heartbeat, a rejected
        # commit, or ensure_owned() refusing after the local deadline passed.
        wait_until(
            partial(noticed_the_loss, stale, job_id),
            timeout=10,
            message=f"the stale worker never noticed it lost job {job_id}:\n{stale.log()}",
        )
        # If the stale call did run to the end, its commit must have been refused.
        wait_until(
            partial(refused_if_it_finished, stale, job_id),
            timeout=10,
            message=f"the stale worker's result for job {job_id} was not rejected",
        )
        assert fresh.alive and stale.alive
    # Nothing in the journal credits the stale owner with an outcome.
    for job_id in firsts:
        by_stale = [e for e in journal.protocol_events(job_id) if e["worker"] == "stale"]
        # Claimed once; no outcome but a rejected one, if it tried to commit at all.
        assert [e["kind"] for e in by_stale if e["kind"] != "result_rejected"] == ["job_claimed"], (
            by_stale
        )
    # The guarded side effect ran once, by the new owner; the stale one stopped at
    # ensure_owned() (or was cancelled) instead of writing after its lease ended.
    row = journal.job(guarded.id)
    assert lines(out) == [[str(guarded.id), str(row["token"]), "fresh"]]


def test_tool_blocking_the_event_loop_loses_its_lease_and_its_late_commit_is_rejected(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    marker = tmp_path / "block.txt"
    start_all(workers.spawn("a"), workers.spawn("b"))
    # Attempt 1 blocks its worker's event loop for twice the lease. Attempt 2 (on the
    # other worker, from one lease on at the earliest) is still running when attempt 1
    # unblocks and commits, so only the token/owner fence can refuse that commit.
    job = ops.sync.enqueue(
        "block_loop",
        {"seconds": 2 * LEASE, "marker": str(marker), "other_seconds": LEASE + 1.0},
    )
    first = wait_running(journal, job.id, workers)
    blocked = workers[first["owner"]]
    healthy = other(workers, blocked.name)

    row = wait_done(journal, job.id, workers)
    assert row["state"] == "succeeded", row
    assert row["owner"] == healthy.name
    assert row["token"] > first["token"]
    assert row["attempt"] == 2
    assert row["result"] == {"worker": healthy.name, "token": row["token"], "attempt": 2}

    # The heartbeat thread (still alive) refused to extend an unobservable executor.
    withheld = journal.events(job.id, "heartbeat_lost")
    assert any(
        e["token"] == first["token"]
        and e["worker"] == blocked.name
        and e["detail"].get("reason") == "executor_unobservable"
        for e in withheld
    ), withheld
    assert blocked.has_event("heartbeat_withheld", job=job.id, token=first["token"])
    claims = journal.events(job.id, "job_claimed")
    assert claims[1]["detail"]["previous_token"] == first["token"]

    # When the loop unblocks, the tool returns a result; the fenced commit refuses it.
    wait_until(
        lambda: journal.events(job.id, "result_rejected"),
        timeout=DONE_TIMEOUT,
        message=f"the blocked worker's late commit was never rejected:\n{blocked.log()}",
    )
    (rejected,) = journal.events(job.id, "result_rejected")
    assert rejected["token"] == first["token"]
    assert rejected["worker"] == blocked.name
    assert rejected["detail"]["outcome"] == "succeeded"
    assert blocked.has_event("result_rejected", job=job.id, token=first["token"])
    done = succeeded_exactly_once(journal, job.id)
    assert done["worker"] == healthy.name
    assert rejected["at"] < done["at"]  # refused while the new owner's call was running
    # Both attempts really ran to the end; only one result was published.
    assert sorted(m[2] for m in marks(marker, "finished")) == sorted(
        [str(first["token"]), str(row["token"])]
    )
    assert journal.job(job.id)["result"]["worker"] == healthy.name


def test_owner_whose_lease_expired_cannot_commit_even_if_nobody_took_over(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    """The commit's lease predicate: no one else wants the job, the lease simply ran out.

    When the blocked loop wakes up, the worker both commits attempt 1 and (its task
    having been interrupted) claims the expired job again, and either may reach the
    database first: the commit is refused by the expired lease or by the new token.
    Both are correct, so the test accepts both; without the lease predicate the
    commit would be accepted whenever it lands first (most runs), and this fails.
    """
    alone = workers.spawn("alone")
    job = ops.sync.enqueue("block_loop", {"seconds": 2 * LEASE})
    first = wait_running(journal, job.id, workers)
    assert first["owner"] == "alone"

    row = wait_done(journal, job.id, workers)
    assert row["state"] == "succeeded", row
    assert row["owner"] == "alone" and row["attempt"] == 2
    assert row["token"] > first["token"]
    # The refusal is journaled by its own statement after the commit's verdict; the second
    # attempt's commit may land before it (a loaded machine): poll for it.
    wait_until(
        lambda: journal.events(job.id, "result_rejected"),
        timeout=DONE_TIMEOUT,
        message=f"the stale commit's refusal was never journaled:\n{alone.log()}",
    )
    (rejected,) = journal.events(job.id, "result_rejected")
    assert rejected["token"] == first["token"] and rejected["worker"] == "alone"
    claims = journal.events(job.id, "job_claimed")
    assert [c["token"] for c in claims] == [first["token"], row["token"]]
    assert claims[1]["detail"]["previous_token"] == first["token"]
    assert succeeded_exactly_once(journal, job.id)["token"] == row["token"]
    assert alone.has_event("heartbeat_withheld", job=job.id, token=first["token"])


# -- quality controls: time limit, retries, cancel -----------------------------------


def test_call_past_its_time_limit_is_stopped_although_its_heartbeats_succeed(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    async_marker = tmp_path / "async.txt"
    thread_marker = tmp_path / "thread.txt"
    worker = workers.spawn("a", concurrency=2)
    jobs = {
        "async": ops.sync.enqueue("long_limit", {"marker": str(async_marker)}),
        "thread": ops.sync.enqueue("long_limit_thread", {"marker": str(thread_marker)}),
    }
    for kind, job in jobs.items():
        row = wait_done(journal, job.id, workers)
        assert row["state"] == "failed", (kind, row)
        assert row["error"]["code"] == "time_limit", (kind, row["error"])
        assert row["error"]["exhausted"] is True  # max_attempts=1: the only attempt
        assert row["attempt"] == 1
        claims = journal.events(job.id, "job_claimed")
        assert len(claims) == 1, (kind, journal.kinds(job.id))  # never reclaimed
        (failed,) = journal.events(job.id, "failed")
        assert failed["worker"] == "a" and failed["detail"]["code"] == "time_limit"
        ran = (failed["at"] - claims[0]["at"]).total_seconds()
        # Stopped by the time limit, not earlier and not much later ...
        assert LONG_LIMIT - 0.1 <= ran < LONG_LIMIT + LEASE, (kind, ran)
        # ... and the call outlived its first lease: the fenced commit was accepted at
        # LONG_LIMIT > LEASE only because heartbeats kept extending the lease.
        assert LONG_LIMIT > LEASE
        beat = (row["heartbeat_at"] - claims[0]["at"]).total_seconds()
        assert beat > LONG_LIMIT - LEASE, (kind, beat)
        assert not journal.events(job.id, "succeeded")
    # The async call was cancelled: the code after its long sleep never ran.
    assert [m[0] for m in lines(async_marker)] == ["started", "cancelled"]
    # The threaded call cannot be killed; it was told through ctx.cancelled and stopped.
    wait_mark(thread_marker, "observed_cancel", timeout=5)
    assert [m[0] for m in lines(thread_marker)] == ["started", "observed_cancel"]
    assert worker.has_event("call_finished", job=jobs["async"].id, code="time_limit")


def test_retries_back_off_until_max_attempts_and_a_permanent_error_fails_at_once(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    exhaust = tmp_path / "exhaust.txt"
    recover = tmp_path / "recover.txt"
    refuse = tmp_path / "refuse.txt"
    workers.spawn("a", concurrency=3)
    jobs = {
        "exhaust": ops.sync.enqueue("fail_n", {"n": 10, "marker": str(exhaust)}),
        "recover": ops.sync.enqueue("fail_n", {"n": 2, "marker": str(recover)}),
        "refuse": ops.sync.enqueue("permanent", {"marker": str(refuse)}),
    }
    rows = {k: wait_done(journal, j.id, workers) for k, j in jobs.items()}
    max_attempts = jobs["exhaust"].max_attempts
    assert max_attempts == 3

    # Retryable failures on every attempt: failed with the reason, attempts used up.
    row = rows["exhaust"]
    assert row["state"] == "failed", row
    assert row["attempt"] == max_attempts
    assert row["error"]["code"] == "retryable"
    assert row["error"]["exhausted"] is True
    assert row["error"]["type"] == "RetryableError"
    assert len(lines(exhaust)) == max_attempts
    events = journal.protocol_events(jobs["exhaust"].id)
    assert [e["kind"] for e in events] == [
        "job_claimed",
        "retried",
        "job_claimed",
        "retried",
        "job_claimed",
        "failed",
    ]
    assert [e["attempt"] for e in events if e["kind"] == "retried"] == [1, 2]
    assert events[-1]["detail"]["code"] == "retryable"
    # Backoff: the next claim waited at least the (jittered, doubling) delay, although
    # the requeue itself wakes the worker at once through NOTIFY.
    for n, (retried, claimed) in enumerate(zip(events[1:4:2], events[2:5:2], strict=True)):
        gap = (claimed["at"] - retried["at"]).total_seconds()
        assert gap >= BACKOFF * 2**n * 0.8 - 0.005, (n, gap)

    # Two transient failures, then success on the last allowed attempt.
    row = rows["recover"]
    assert row["state"] == "succeeded", row
    assert row["attempt"] == 3
    assert row["result"]["calls"] == 3
    assert journal.kinds(jobs["recover"].id).count("retried") == 2

    # A permanent error is not retried.
    row = rows["refuse"]
    assert row["state"] == "failed", row
    assert row["attempt"] == 1
    assert row["error"]["code"] == "permanent"
    assert "exhausted" not in row["error"]
    assert len(lines(refuse)) == 1
    assert journal.protocol_kinds(jobs["refuse"].id) == ["job_claimed", "failed"]


def test_cancel_stops_a_running_call_within_a_heartbeat_and_the_job_stays_cancelled(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    async_marker = tmp_path / "async.txt"
    thread_marker = tmp_path / "thread.txt"
    worker = workers.spawn("a", concurrency=2)
    jobs = {
        "async": ops.sync.enqueue("sleepy", {"seconds": 60, "marker": str(async_marker)}),
        "thread": ops.sync.enqueue("sleepy_thread", {"seconds": 60, "marker": str(thread_marker)}),
    }
    wait_mark(async_marker, "started")
    wait_mark(thread_marker, "started")

    # Cancel through a producer App that shares nothing with the worker process.
    canceller = App(journal.dsn)
    try:
        for job in jobs.values():
            assert canceller.sync.cancel(job.id).state == "cancelled"
    finally:
        canceller.close()
    cancelled_at = time.monotonic()

    # The worker finds out from its next heartbeat (zero rows, state cancelled).
    stop_within = HEARTBEAT + 1.2  # one beat, plus a loaded machine's slack
    wait_mark(async_marker, "cancelled", timeout=stop_within)
    wait_mark(thread_marker, "observed_cancel", timeout=stop_within)
    stopped_after = time.monotonic() - cancelled_at
    assert stopped_after < stop_within, stopped_after

    for kind, job in jobs.items():
        worker.wait_event("call_abandoned", job=job.id, reason="cancelled")
        assert worker.has_event("cancel_observed", job=job.id)
        row = journal.job(job.id)
        assert row["state"] == "cancelled", (kind, row)
        assert row["error"]["code"] == "cancelled"
        assert row["attempt"] == 1
        # No commit was attempted after the cancel, let alone accepted.
        assert journal.protocol_kinds(job.id) == ["job_claimed", "cancelled"], kind
    assert "finished" not in [m[0] for m in lines(async_marker) + lines(thread_marker)]
    # The worker stays healthy and takes the next call.
    after = ops.sync.enqueue("sleepy", {"seconds": 0})
    assert wait_done(journal, after.id, workers)["state"] == "succeeded"
    for job in jobs.values():
        assert journal.job(job.id)["state"] == "cancelled"


def test_stopped_threaded_tool_leaves_no_error_message_in_the_worker_log(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    """A thread the worker stopped waiting for still ends with the tool's exception;
    nobody may print it: log lines carry ids and codes, never error messages."""
    marker = tmp_path / "thread.txt"
    private = "patient-4711@example.org"
    worker = workers.spawn("a", grace=0.3)
    job = ops.sync.enqueue(
        "sleepy_thread",
        {"seconds": 60, "marker": str(marker), "stop_message": f"stopped while serving {private}"},
    )
    wait_mark(marker, "started")
    ops.sync.cancel(job.id)
    wait_mark(marker, "observed_cancel")
    worker.wait_event("call_abandoned", job=job.id, reason="cancelled")
    worker.terminate()
    assert worker.wait(10) == 0
    assert journal.job(job.id)["state"] == "cancelled"
    assert private not in worker.log(), worker.log()


# -- shutdown and network --------------------------------------------------------------


def test_sigterm_releases_a_running_call_without_burning_an_attempt(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    marker = tmp_path / "sleepy.txt"
    leaving = workers.spawn("leaving", grace=0.3)
    job = ops.sync.enqueue("sleepy", {"seconds": 60, "marker": str(marker), "only_on": "leaving"})
    first = wait_running(journal, job.id, workers)
    assert first["owner"] == "leaving"
    wait_mark(marker, "started")
    staying = workers.spawn("staying")
    staying.wait_started()

    leaving.terminate()
    assert leaving.wait(10) == 0, leaving.log()
    assert leaving.has_event("worker_draining")
    assert leaving.has_event("call_finished", job=job.id, outcome="queued", code="shutdown")

    row = wait_done(journal, job.id, workers)
    assert row["state"] == "succeeded", row
    assert row["owner"] == "staying"
    assert row["token"] > first["token"]
    # The shutdown refunded its attempt: the job succeeded on "attempt 1" again.
    assert row["attempt"] == 1
    events = journal.protocol_events(job.id)
    assert [e["kind"] for e in events] == ["job_claimed", "released", "job_claimed", "succeeded"]
    released = events[1]
    assert released["worker"] == "leaving"
    assert released["token"] == first["token"]
    assert released["attempt"] == 0
    assert released["detail"]["code"] == "shutdown"
    # Released, not expired: the new owner claimed it from the queue, not as a reclaim.
    assert events[2]["worker"] == "staying"
    assert "previous_token" not in events[2]["detail"]
    assert [m[0] for m in lines(marker)] == ["started", "cancelled", "started", "finished"]


def _proxy_for(dsn: str) -> FaultProxy:
    """A FaultProxy in front of the server ``dsn`` names (TCP or Unix socket)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        host, port = conn.info.host, conn.info.port
    if not host or host.startswith("/"):
        return FaultProxy.unix(f"{host}/.s.PGSQL.{port}")
    return FaultProxy(host, port)


def _partitioned_owner(
    workers: WorkerGroup,
    ops: App,
    journal: Journal,
    proxy: FaultProxy,
    marker: Path,
) -> tuple[WorkerProcess, int, dict[str, Any]]:
    """A worker reaching PostgreSQL only through ``proxy`` holds a long call, then the
    proxy blackholes: a partition that swallows every byte, with no RST and no FIN."""
    cut_off = workers.spawn("cut-off", dsn=rewrite_dsn(journal.dsn, proxy.host, proxy.port))
    job = ops.sync.enqueue("sleepy", {"seconds": 60, "marker": str(marker), "only_on": "cut-off"})
    first = wait_running(journal, job.id, workers)
    assert first["owner"] == "cut-off"
    wait_mark(marker, "started")
    # Let one heartbeat through, so the partition hits an established lease connection
    # (whose hung statement only the heartbeat's own watchdog can end).
    wait_job(
        journal,
        job.id,
        lambda j: j["heartbeat_at"] > first["heartbeat_at"],
        timeout=5,
        what="no heartbeat got through the proxy",
        workers=workers,
    )
    proxy.set_mode("blackhole")
    return cut_off, job.id, first


def test_partitioned_owner_stops_on_its_own_deadline_and_a_connected_worker_takes_over(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    marker = tmp_path / "sleepy.txt"
    with _proxy_for(journal.dsn) as proxy:
        cut_off, job_id, first = _partitioned_owner(workers, ops, journal, proxy, marker)
        workers.spawn("connected")

        # Without any answer from the database, the cut-off worker first knows only that
        # ownership is unknown; once its conservative local deadline passes it treats the
        # lease as lost and stops the call itself — all while the partition lasts.
        wait_mark(marker, "cancelled", timeout=10)
        assert cut_off.has_event("ownership_unknown", job=job_id, reason="db_error")
        assert cut_off.has_event("heartbeat_lost", job=job_id, reason="deadline_passed")
        abandoned = cut_off.wait_event("call_abandoned", job=job_id)
        assert abandoned["reason"] == "deadline_passed", abandoned
        reclaimed = wait_job(
            journal,
            job_id,
            lambda j: j["token"] > first["token"],
            timeout=RECLAIM_TIMEOUT,
            what="was never reclaimed from the partitioned worker",
            workers=workers,
        )
        assert reclaimed["owner"] == "connected"
        assert proxy.mode == "blackhole" and proxy.bytes_dropped > 0
        proxy.set_mode("pass")

        row = wait_done(journal, job_id, workers)
        assert row["state"] == "succeeded", row
        assert row["owner"] == "connected"
        assert row["result"] == {"worker": "connected", "token": row["token"], "attempt": 2}
        assert succeeded_exactly_once(journal, job_id)["worker"] == "connected"
        claims = journal.events(job_id, "job_claimed")
        assert claims[1]["detail"]["previous_token"] == first["token"]
        assert [m[3] for m in marks(marker, "finished")] == ["connected"]
        assert [m[3] for m in marks(marker, "cancelled")] == ["cut-off"]
        by_cut_off = [e for e in journal.protocol_events(job_id) if e["worker"] == "cut-off"]
        assert [e["kind"] for e in by_cut_off] == ["job_claimed"], by_cut_off
        assert cut_off.alive, cut_off.log()


def test_owner_killed_on_its_last_attempt_is_failed_by_the_rescuer_not_left_running(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    marker = tmp_path / "long.txt"
    start_all(workers.spawn("a"), workers.spawn("b"))
    job = ops.sync.enqueue("long_limit", {"marker": str(marker)})  # max_attempts=1
    first = wait_running(journal, job.id, workers)
    wait_mark(marker, "started")
    victim = workers[first["owner"]]
    victim.kill()

    row = wait_done(journal, job.id, workers)
    assert row["state"] == "failed", row
    assert row["error"]["code"] == "lease_expired"
    assert row["attempt"] == 1 and row["token"] == first["token"]
    assert journal.protocol_kinds(job.id) == ["job_claimed", "failed"]
    (failed,) = journal.events(job.id, "failed")
    assert failed["detail"]["code"] == "lease_expired"
    assert failed["worker"] == victim.name  # the owner whose lease it was
    assert [m[0] for m in lines(marker)] == ["started"]  # never run a second time


# -- regressions: bugs these tests found in src, now fixed --------------------------------


def test_partitioned_owner_stops_its_call_as_soon_as_it_declares_the_lease_lost(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    marker = tmp_path / "sleepy.txt"
    with _proxy_for(journal.dsn) as proxy:
        cut_off, job_id, _ = _partitioned_owner(workers, ops, journal, proxy, marker)
        seen: dict[str, float] = {}

        def lost_and_stopped() -> bool:
            now = time.monotonic()
            if "lost" not in seen and cut_off.has_event("heartbeat_lost", job=job_id):
                seen["lost"] = now
            if "stopped" not in seen and marks(marker, "cancelled"):
                seen["stopped"] = now
            return len(seen) == 2

        wait_until(lost_and_stopped, timeout=15, interval=0.01, message=cut_off.log())
        # Declared lost means: stop now. The journal entry is best effort and may wait.
        assert seen["stopped"] - seen["lost"] < 0.5, seen


def test_worker_starts_a_claimed_call_at_once_even_after_letting_go_of_a_stuck_thread(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    stuck_marker = tmp_path / "stuck.txt"
    next_marker = tmp_path / "next.txt"
    worker = workers.spawn("a")  # concurrency 1
    stuck = ops.sync.enqueue("stubborn", {"seconds": 6, "marker": str(stuck_marker)})
    wait_mark(stuck_marker, "started")
    ops.sync.cancel(stuck.id)  # the call is let go; its thread cannot be stopped
    worker.wait_event("call_abandoned", job=stuck.id, reason="cancelled")

    following = ops.sync.enqueue("sleepy_thread", {"seconds": 0.1, "marker": str(next_marker)})
    # Fine either way: not claimed while no thread is free, or claimed and started at once.
    wait_running(journal, following.id, workers)
    wait_mark(next_marker, "started", timeout=1.5)


def test_sigterm_exits_after_the_grace_even_if_a_threaded_tool_ignores_cancellation(
    workers: WorkerGroup, ops: App, journal: Journal, tmp_path: Path
) -> None:
    marker = tmp_path / "stuck.txt"
    worker = workers.spawn("a", grace=0.3)
    job = ops.sync.enqueue("stubborn", {"seconds": 8, "marker": str(marker)})
    wait_mark(marker, "started")
    worker.terminate()
    # The hard stop did its part: the call was handed back without burning an attempt.
    wait_until(lambda: journal.events(job.id, "released"), timeout=5, message=worker.log())
    assert journal.job(job.id)["attempt"] == 0
    try:
        worker.wait(4)
    except subprocess.TimeoutExpired:
        pytest.fail(f"worker still running 4 s after SIGTERM with --grace 0.3:\n{worker.log()}")


def _statement_prefix(name: str) -> str:
    """A named tenure statement as pg_stat_activity shows it: its text up to the first
    parameter (psycopg sends $1 where the source has %(name)s)."""
    prefix = QUERIES[name].split("%(")[0]
    assert len(prefix) >= 10, (name, prefix)
    return prefix


def _active_claims(conn: psycopg.Connection[Any]) -> int:
    """Backends running tenure's claim statement right now."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND left(query, length(%(p)s)) = %(p)s AND state = 'active'",
        {"p": _statement_prefix("claim")},
    ).fetchone()
    return int(row[0]) if row else 0


def _activity(conn: psycopg.Connection[Any]) -> str:
    """This database's sessions, for assertion messages."""
    rows = conn.execute(
        "SELECT pid, application_name, state, query_start, state_change, left(query, 40)"
        " FROM pg_stat_activity WHERE datname = current_database() ORDER BY pid"
    ).fetchall()
    return "\n".join(" | ".join(str(c) for c in row) for row in rows)


def test_worker_whose_claim_answer_was_lost_recovers_once_the_network_heals(
    workers: WorkerGroup, ops: App, journal: Journal
) -> None:
    with (
        _proxy_for(journal.dsn) as proxy,
        psycopg.connect(journal.dsn, autocommit=True) as observer,
        psycopg.connect(journal.dsn) as locker,
    ):
        lossy = workers.spawn("lossy", dsn=rewrite_dsn(journal.dsn, proxy.host, proxy.port))
        lossy.wait_started()
        # Hold the jobs table, so that the worker's next claim (every 0.2 s) waits inside
        # the server ...
        locker.execute("LOCK TABLE tenure_jobs IN ACCESS EXCLUSIVE MODE")
        wait_until(
            lambda: _active_claims(observer),
            timeout=5,
            message=f"no claim waited for the table:\n{_activity(observer)}\n{lossy.log()}",
        )
        # ... then drop every answer and let the claim finish: its answer is lost.
        proxy.set_mode("drop_responses")
        locker.rollback()
        wait_until(
            lambda: not _active_claims(observer),
            timeout=5,
            message=f"the claim never finished:\n{_activity(observer)}",
        )
        proxy.set_mode("pass")
        # Healed. The worker polls every 0.2 s; a claim that got no answer must not keep
        # it from ever claiming again.
        job = ops.sync.enqueue("sleepy", {"seconds": 0})
        row = wait_done(journal, job.id, workers, timeout=8)
        assert row["state"] == "succeeded" and row["owner"] == "lossy", row
