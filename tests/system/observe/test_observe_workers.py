"""The workers registry with real worker processes on a real PostgreSQL.

A worker registers at start and its heartbeat thread keeps its row alive (idle: a
keep-alive of its own; holding leases: folded into the extension). A SIGTERM marks it
stopped; a SIGKILL leaves it silent with what it held, until the pruner deletes it; a
SIGSTOP makes it silent and a SIGCONT alive again. Status is judged on the database's
clock, from each worker's own keep-alive period.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from tests.support.cli import run_tenure
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import WorkerGroup

from tenure import App, PolicyError
from tenure._maintenance._worker_pruner import WorkerPruner
from tenure._observe._metrics import DatabaseGauges, ToolLabels
from tenure._store import Store
from tenure.maintenance import WorkerPrunerConfig
from tenure.telemetry import WorkerInfo

pytestmark = pytest.mark.storage

FAST = {"TENURE_WORKER_KEEPALIVE": "0.2"}  # silent after 0.6 s unseen
SLOW = {"TENURE_WORKER_KEEPALIVE": "60"}  # idle keep-alives too rare to matter in a test
OBSERVE_TOOLS = ["echo", "flaky", "refuse", "watched"]


def row_of(app: App, name: str) -> WorkerInfo | None:
    return next((w for w in app.sync.admin.workers() if w["name"] == name), None)


def wait_row(
    app: App, name: str, holds: Callable[[WorkerInfo], bool], what: str, timeout: float = 15.0
) -> WorkerInfo:
    seen: list[WorkerInfo | None] = [None]

    def check() -> bool:
        seen[0] = row_of(app, name)
        return seen[0] is not None and holds(seen[0])

    wait_until(check, timeout=timeout, interval=0.05, message=f"{name}: {what}; last {seen[0]}")
    row = seen[0]
    assert row is not None
    return row


def test_a_worker_registers_keeps_alive_while_idle_and_stops_cleanly(
    workers: WorkerGroup, ops: App
) -> None:
    worker = workers.spawn("idle", env=FAST)
    worker.wait_started()
    first = wait_row(ops, "idle", lambda w: w["status"] == "alive", "never registered")
    assert first["pid"] == worker.pid
    assert first["tools"] == sorted(first["tools"])
    assert set(OBSERVE_TOOLS) <= set(first["tools"])
    assert first["concurrency"] == 1
    assert first["keepalive_ms"] == 200
    assert first["version"]
    assert first["leases_held"] == 0
    assert first["stopped_at"] is None
    # Idle, it holds no lease: only the keep-alive moves last_seen_at, many times over.
    wait_row(
        ops,
        "idle",
        lambda w: (
            (w["last_seen_at"] - first["last_seen_at"]).total_seconds() >= 1.0
            and w["status"] == "alive"
        ),
        "last_seen_at never moved while idle",
    )
    worker.terminate()
    assert worker.wait() == 0
    stopped = wait_row(ops, "idle", lambda w: w["status"] == "stopped", "not marked stopped")
    assert stopped["stopped_at"] is not None
    assert stopped["started_at"] == first["started_at"]


def test_the_lease_extension_keeps_a_busy_worker_alive_and_counts_its_leases(
    workers: WorkerGroup, ops: App
) -> None:
    """With idle keep-alives a minute apart, only the extensions (one a second for
    `watched`) can move last_seen_at: the keep-alive rides on the beat."""
    worker = workers.spawn("busy", env=SLOW)
    worker.wait_started()
    first = wait_row(ops, "busy", lambda w: w["status"] == "alive", "never registered")
    job = ops.sync.enqueue("watched", {"seconds": 30.0})
    held = wait_row(ops, "busy", lambda w: w["leases_held"] == 1, "never held the lease")
    assert held["leases_expired"] == 0
    wait_row(
        ops,
        "busy",
        lambda w: (w["last_seen_at"] - first["last_seen_at"]).total_seconds() >= 2.5,
        "the extensions did not keep the row alive",
    )
    ops.sync.cancel(job.id)
    wait_row(ops, "busy", lambda w: w["leases_held"] == 0, "the cancelled lease still counts")


async def test_a_killed_worker_goes_silent_with_what_it_held_and_is_pruned(
    workers: WorkerGroup, ops: App, store: Store
) -> None:
    victim = workers.spawn("victim", env=FAST)
    victim.wait_started()
    job = ops.sync.enqueue("watched", {"seconds": 60.0})
    await wait_until_async(
        lambda: _owned_by(store, job.id, "victim"), timeout=15, message="the job never ran"
    )
    victim.kill()
    # Silent on its own keep-alive period (3 x 0.2 s), still showing the lease it held;
    # then that lease expires (3 s) with nobody to reclaim it.
    await wait_until_async(
        lambda: _status(ops, "victim", "silent"), timeout=15, message="never went silent"
    )
    assert (await _row(ops, "victim"))["leases_held"] == 1
    assert await _gauges(store) == {"alive": 0, "silent": 1, "stopped": 0}
    await wait_until_async(
        lambda: _expired(ops, "victim"), timeout=15, message="its lease never showed expired"
    )
    survivor = workers.spawn("survivor", env=FAST)
    survivor.wait_started()
    await wait_until_async(
        lambda: _owned_by(store, job.id, "survivor"), timeout=15, message="never reclaimed"
    )
    assert (await _row(ops, "victim"))["leases_held"] == 0
    assert (await _row(ops, "survivor"))["leases_held"] == 1

    pruner = WorkerPruner(store, WorkerPrunerConfig(horizon=2.0))

    async def pruned() -> bool:
        await pruner.run_once()
        return "victim" not in [w["name"] for w in await ops.admin.workers()]

    await wait_until_async(pruned, timeout=20, interval=0.2, message="victim never pruned")
    assert (await _row(ops, "survivor"))["status"] == "alive"  # seen every 0.2 s: kept


async def _gauges(store: Store) -> dict[str, float]:
    """tenure_workers{status} as a scrape reads it."""
    gauges = DatabaseGauges(ToolLabels())
    await gauges.refresh(store)
    [family] = [f for f in gauges.collect() if f.name == "tenure_workers"]
    return {sample.labels["status"]: sample.value for sample in family.samples}


async def _expired(app: App, name: str) -> bool:
    row = await _row(app, name)
    return row["leases_held"] == 1 and row["leases_expired"] == 1


async def _row(app: App, name: str) -> WorkerInfo:
    return next(w for w in await app.admin.workers() if w["name"] == name)


async def _status(app: App, name: str, status: str) -> bool:
    return (await _row(app, name))["status"] == status


async def _owned_by(store: Store, job_id: int, owner: str) -> bool:
    return (await store.job_detail(job_id))["owner"] == owner


def test_a_paused_worker_is_silent_then_alive_again(workers: WorkerGroup, ops: App) -> None:
    worker = workers.spawn("paused", env=FAST)
    worker.wait_started()
    wait_row(ops, "paused", lambda w: w["status"] == "alive", "never registered")
    worker.pause()
    try:
        silent = wait_row(ops, "paused", lambda w: w["status"] == "silent", "never silent")
        assert silent["seen_ago"] > 0.6
    finally:
        worker.resume()
    alive = wait_row(ops, "paused", lambda w: w["status"] == "alive", "not alive after SIGCONT")
    assert alive["pid"] == worker.pid
    assert alive["started_at"] == silent["started_at"]  # the same process, not a restart


def test_tenure_workers_prints_a_table_and_json_lines(
    workers: WorkerGroup, ops: App, tenure_dsn: str
) -> None:
    worker = workers.spawn("listed", env=FAST)
    worker.wait_started()
    wait_row(ops, "listed", lambda w: w["status"] == "alive", "never registered")

    def run(*args: str) -> str:
        done = run_tenure(["workers", *args], dsn=tenure_dsn)
        assert done.returncode == 0, done.stderr
        return done.stdout.decode()

    table = run()
    assert "1 workers, 1 alive" in table
    assert "listed" in table and "alive" in table and str(worker.pid) in table
    [line] = run("--json").splitlines()
    record = json.loads(line)
    assert record["name"] == "listed"
    assert record["status"] == "alive"
    assert record["pid"] == worker.pid
    assert record["leases_held"] == 0
    assert set(OBSERVE_TOOLS) <= set(record["tools"])
    refused = run_tenure(["workers", "--limit", "0"], dsn=tenure_dsn)
    assert refused.returncode == 2  # a bad argument, refused before anything runs


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"horizon": 0.0}, "horizon=0.0"),
        ({"horizon": 10 * 365 * 86400.0}, "horizon="),
        ({"batch": 10.0}, "batch must be an integer"),
        ({"interval": float("nan")}, "interval=nan"),
    ],
)
def test_the_worker_pruner_refuses_settings_out_of_range(
    options: dict[str, float], message: str
) -> None:
    with pytest.raises(PolicyError, match=message):
        WorkerPrunerConfig(**options)  # type: ignore[arg-type]


def test_a_worker_refuses_a_keepalive_out_of_range(ops: App) -> None:
    for bad in (0.0, 0.01, 7200.0, True, float("nan"), "5"):
        with pytest.raises(PolicyError, match="keepalive"):
            ops.worker(keepalive=bad)


def test_a_worker_refuses_a_name_the_registry_cannot_hold(ops: App) -> None:
    for bad in ("", "x" * 201, "tab\there"):
        with pytest.raises(PolicyError, match="worker's name"):
            ops.worker(name=bad)
