"""An acknowledged cancel reaches the tool whatever the worker's connections did.

Issue 22 A: with the workers' LISTEN connections dropped, 34 of 34 cancels were missed
until the next heartbeat (5,372 side effects after the cancels returned), and after a
database crash-restart some were missed on their own. The notification of a cancel made
while a LISTEN connection is away reaches nobody; the worker must read its calls again
once it is back, not wait for its heartbeat's zero rows.

Real worker processes (``tests.apps.cancel_app``: leases renewed every 40 s, tools that
count their side effects) reach PostgreSQL through the suite's TCP proxy, which cuts
every connection they have; the cancels are made on a connection of their own meanwhile.
``until="stopped"`` cancels must return only once no effect can follow.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.apps import fault_app
from tests.apps.cancel_app import HEARTBEAT, build_app, effects_after
from tests.support.schemas import db_now
from tests.support.servers import private_server
from tests.support.waiting import wait_until
from tests.support.workers import Journal, WorkerGroup, WorkerProcess, closing_app

from tenure import App, Job, WaitTimeout
from tenure._embedded import EmbeddedPostgres

CANCEL_APP = "tests.apps.cancel_app:app"
# Well inside the first heartbeat period after the claims: a call stopped by then was not
# stopped by its heartbeat (and the test does not wait for one to fail).
REACH = HEARTBEAT / 2
TOOLS = ("effects", "effects_async")


@pytest.fixture
def cancel_ops(tenure_dsn: str) -> Iterator[App]:
    yield from closing_app(build_app(tenure_dsn))


def start_calls(ops: App, path: Path, count: int) -> list[Job]:
    """``count`` calls alternating the threaded and the async tool, each seen making an
    effect (so each is running under its worker)."""
    jobs = [ops.sync.enqueue(TOOLS[n % 2], {"path": str(path)}) for n in range(count)]
    wait_until(
        lambda: all(effects_after(str(path), job.id, 0) for job in jobs),
        timeout=30,
        message="not every call made its first effect",
    )
    return jobs


def cancel_in_background(
    pool: concurrent.futures.Executor, ops: App, job: Job
) -> concurrent.futures.Future[float]:
    """``cancel(until="stopped")`` on another thread: when it returned (monotonic)."""

    def cancel() -> float:
        ops.sync.cancel(job.id, until="stopped", timeout=REACH)
        return time.monotonic()

    return pool.submit(cancel)


def cancel_while_cut_off(
    worker: WorkerProcess,
    ops: App,
    journal: Journal,
    path: Path,
    cut: Callable[[], None],
) -> None:
    """The scenario, with ``cut`` whatever more happens while the worker's connections are
    down: two plain cancels and two ``until="stopped"`` cancels are made, then the worker
    may connect again. Every call stops through the re-read (never its heartbeat), and no
    effect lands after a stopped-cancel returned."""
    assert worker.proxy is not None
    plain = start_calls(ops, path, 2)
    waited = start_calls(ops, path, 2)
    worker.proxy.set_mode("reset")  # every connection: the pool, the heartbeat's, LISTEN
    cut()
    for job in plain:
        assert ops.sync.cancel(job.id).state == "cancelled"
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        returns = {job.id: cancel_in_background(pool, ops, job) for job in waited}
        wait_until(
            lambda: all(journal.job(job.id)["state"] == "cancelled" for job in waited),
            timeout=30,
            message="the stopped-cancels never cancelled",
        )
        # Cut off, the owner cannot have said it stopped: the cancels still wait.
        assert not any(future.done() for future in returns.values())
        worker.proxy.set_mode("pass")
        returned = {job_id: future.result(timeout=REACH + 5) for job_id, future in returns.items()}

    for job in plain + waited:
        observed = worker.wait_event("cancel_observed", job=job.id, timeout=REACH)
        assert observed["via"] == "recheck", observed
        worker.wait_event("call_abandoned", job=job.id, reason="cancelled", timeout=REACH)
        assert journal.protocol_kinds(job.id) == ["job_claimed", "cancelled"]
        stopped = journal.events(job.id, "call_stopped")
        token = journal.job(job.id)["token"]
        assert [(e["token"], e["worker"]) for e in stopped] == [(token, worker.name)]
    for job_id, at in returned.items():
        assert effects_after(str(path), job_id, at) == [], job_id
    # And the plain cancels' calls make no effect once their owner said they stopped.
    wait_until(lambda: all(journal.events(job.id, "call_stopped") for job in plain))
    quiet_from = time.monotonic()
    for job in waited:  # whatever the test does next takes a while: they stay quiet
        assert ops.sync.get(job.id).state == "cancelled"
    assert all(effects_after(str(path), job.id, quiet_from) == [] for job in plain)


def cut_off_scenario(dsn: str, ops: App, tmp_path: Path, cut: Callable[[], None]) -> None:
    """`cancel_while_cut_off` with one worker behind its own proxy."""
    with WorkerGroup(dsn, tmp_path, app=CANCEL_APP) as workers:
        worker = workers.spawn("a", concurrency=4, proxy=True)
        worker.wait_started()
        cancel_while_cut_off(worker, ops, Journal(dsn), tmp_path / "effects.txt", cut)


def test_a_cancel_made_while_the_workers_connections_are_cut_reaches_its_calls_on_return(
    tenure_dsn: str, cancel_ops: App, tmp_path: Path
) -> None:
    cut_off_scenario(tenure_dsn, cancel_ops, tmp_path, lambda: None)


@pytest.fixture
def server() -> Iterator[EmbeddedPostgres]:
    with private_server("tenure-cancel-") as server:
        yield server


@pytest.mark.slow
def test_a_cancel_made_right_after_a_database_crash_restart_reaches_its_calls(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    """The restart breaks every connection (the worker's and the producer's pool); the
    proxy keeps the worker from reconnecting until the cancels are in, as a worker whose
    reconnect pause had grown to a second would be."""
    with contextlib.closing(build_app(server.dsn)) as ops:
        cut_off_scenario(server.dsn, ops, tmp_path, lambda: server.restart("immediate"))


def test_a_stopped_cancel_returns_once_the_tool_returned_and_no_effect_follows(
    tenure_dsn: str, cancel_ops: App, tmp_path: Path
) -> None:
    journal = Journal(tenure_dsn)
    path = tmp_path / "effects.txt"
    with WorkerGroup(tenure_dsn, tmp_path, app=CANCEL_APP) as workers:
        worker = workers.spawn("a", concurrency=4)
        worker.wait_started()
        calls = start_calls(cancel_ops, path, 2)
        # A thread that ignores the cancel for 2 s, then writes once more, unchecked.
        stubborn = cancel_ops.sync.enqueue("stubborn_effects", {"path": str(path), "seconds": 2.0})
        wait_until(lambda: effects_after(str(path), stubborn.id, 0), timeout=30)
        for job in [*calls, stubborn]:
            asked = time.monotonic()
            assert cancel_ops.sync.cancel(job.id, until="stopped").state == "cancelled"
            returned = time.monotonic()
            assert effects_after(str(path), job.id, returned) == [], job.id
            (stopped,) = journal.events(job.id, "call_stopped")
            assert stopped["token"] == journal.job(job.id)["token"]
            if job is stubborn:  # its last, unchecked effect landed before the return
                (last,) = effects_after(str(path), job.id, asked)
                assert last < returned
        assert worker.alive
        # Nothing more lands once the calls are over (the next call shows time has passed).
        after = cancel_ops.sync.enqueue("effects", {"path": str(path)})
        wait_until(lambda: effects_after(str(path), after.id, 0), timeout=30)
        cancel_ops.sync.cancel(after.id, until="stopped")
        assert all(effects_after(str(path), job.id, returned) == [] for job in calls)


def test_a_stopped_cancel_of_a_silent_owner_waits_for_its_lease_or_its_timeout(
    tenure_dsn: str, cancel_ops: App, tmp_path: Path
) -> None:
    """A paused (SIGSTOP) owner can say nothing: the cancel waits for the lease it held to
    run out on the database's clock, and gives up at its timeout with WaitTimeout (the job
    stays cancelled)."""
    journal = Journal(tenure_dsn)
    path = tmp_path / "effects.txt"
    with WorkerGroup(tenure_dsn, tmp_path, app=CANCEL_APP) as workers:
        worker = workers.spawn("a", concurrency=2)
        worker.wait_started()
        job = start_calls(cancel_ops, path, 1)[0]
        worker.pause()
        with pytest.raises(WaitTimeout, match="has not been seen to stop"):
            cancel_ops.sync.cancel(job.id, until="stopped", timeout=0.5)
        assert journal.job(job.id)["state"] == "cancelled"
        worker.resume()


def test_a_stopped_cancel_of_a_silent_owner_returns_once_its_lease_ran_out(
    tenure_dsn: str, tmp_path: Path
) -> None:
    """With a short lease (fault_app: 1.5 s), the lease's end comes first: the cancel
    returns then, with no word from the owner, and the database's clock past that lease."""
    journal = Journal(tenure_dsn)
    with (
        contextlib.closing(fault_app.build_app(tenure_dsn)) as ops,
        WorkerGroup(tenure_dsn, tmp_path) as workers,
    ):
        worker = workers.spawn("a")
        worker.wait_started()
        job = ops.sync.enqueue("sleepy", {"seconds": 60})
        wait_until(lambda: journal.job(job.id)["state"] == "running", timeout=30)
        worker.pause()
        held = journal.job(job.id)["lease_until"]  # an extension still in flight: later
        assert ops.sync.cancel(job.id, until="stopped", timeout=60).state == "cancelled"
        assert db_now(tenure_dsn) >= held
        assert journal.events(job.id, "call_stopped") == []
        worker.resume()
