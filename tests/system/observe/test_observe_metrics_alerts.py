"""What the shipped alert rules (deploy/prometheus) need from /metrics, on a real server.

- While the database is gone, /metrics still answers, and says so (tenure_database_up 0).
  A scrape that waited for the database would outlast Prometheus's scrape timeout; the
  target would then look dead and every tenure series vanish, so the alert on
  ``tenure_database_up == 0`` could never fire. The database is cut off for real,
  through a TCP proxy in front of the test's PostgreSQL.
- Waiting jobs show how long the oldest has waited and how soon the next deadline comes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.apps.wait_app import build_app
from tests.integration.observe.helpers import scrape, spawn_with_metrics, value
from tests.support.waiting import wait_until
from tests.support.workers import WorkerGroup, closing_app

from tenure._chaos._proxy import FaultProxy
from tenure._observe._http import MetricsState, ServerThread, metrics_app
from tenure._observe._metrics import DatabaseGauges, ToolLabels

# Well below the pool's 30 s wait for a connection, which is what a scrape without a
# deadline takes once the database is gone (and a partitioned one takes for ever).
PATIENCE = 20.0


@pytest.fixture
def proxy(tenure_dsn: str) -> Iterator[FaultProxy]:
    with FaultProxy.for_dsn(tenure_dsn) as proxy:
        yield proxy


@pytest.mark.parametrize("mode", ["reset", "blackhole"])
def test_metrics_answer_database_down_while_the_database_is_unreachable(
    tenure_dsn: str, proxy: FaultProxy, mode: str
) -> None:
    """``reset``: the server went away (connections refused); ``blackhole``: a partition
    that swallows every byte. Either way each scrape answers, with tenure_database_up 0,
    and the gauges come back once the database does."""
    labels = ToolLabels()
    labels.register("echo", {})
    state = MetricsState([], DatabaseGauges(labels, deadline=0.5))
    server = ServerThread(metrics_app(proxy.dsn(tenure_dsn), state), "127.0.0.1", 0)
    url = server.start() + "/metrics"
    try:
        assert value(scrape(url), "tenure_database_up") == 1
        proxy.set_mode(mode)
        # The second scrape is the one that used to hang: the pool has no connection left.
        for _ in range(3):
            assert value(scrape(url, timeout=PATIENCE), "tenure_database_up") == 0
        proxy.set_mode("pass")
        wait_until(
            lambda: value(scrape(url), "tenure_database_up") == 1,
            timeout=60,
            interval=0.2,
            message="tenure_database_up never came back after the database did",
        )
    finally:
        proxy.set_mode("pass")
        server.stop()


def test_waiting_jobs_show_their_oldest_wait_and_their_soonest_deadline(
    tenure_dsn: str, tmp_path: Path
) -> None:
    """Two calls wait at waitpoints (deadlines in an hour and in ten minutes): the gauges
    count both, and the soonest deadline is the ten-minute one, still ahead."""
    notes = str(tmp_path / "notes.txt")
    with (
        contextlib.contextmanager(closing_app)(build_app(tenure_dsn)) as ops,
        WorkerGroup(tenure_dsn, tmp_path, app="tests.apps.wait_app:app") as workers,
    ):
        _, url = spawn_with_metrics(workers, "waiter", concurrency=2)
        jobs = [
            ops.sync.enqueue("wait_briefly", {"notes": notes, "timeout": timeout})
            for timeout in (3600.0, 600.0)
        ]
        wait_until(
            lambda: all(ops.sync.get(job.id).state == "waiting" for job in jobs),
            timeout=30,
            interval=0.05,
            message="the calls never reached their waitpoints",
        )
        s = scrape(url)
    tool = {"tool": "wait_briefly"}
    assert value(s, "tenure_waiting_jobs", **tool) == 2
    assert 0 <= value(s, "tenure_waitpoint_oldest_age_seconds", **tool) < 600
    assert 0 < value(s, "tenure_waitpoint_deadline_min_seconds", **tool) <= 600
    assert value(s, "tenure_running_jobs", **tool) == 0  # waiting holds no lease
