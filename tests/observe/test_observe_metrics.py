"""After a scripted scenario, /metrics says exactly what happened (worker and dashboard)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.observe.helpers import scrape, spawn_with_metrics, value, wait_done
from tests.support.workers import Journal, WorkerGroup, wait_job

from tenure import App
from tenure._observe._dashboard import create_dashboard
from tenure._observe._http import ServerThread
from tenure._observe._metrics import ToolLabels

pytestmark = pytest.mark.storage

ECHO = {"tool": "echo", "model": "gpt-test", "provider": "acme"}
SLOW = {"tool": "slow", "model": "slow-model", "provider": "acme"}


@pytest.fixture
def dashboard(tenure_dsn: str) -> Iterator[str]:
    labels = ToolLabels()
    labels.register("slow", {"model": "slow-model", "provider": "acme"})
    server = ServerThread(create_dashboard(tenure_dsn, labels=labels), "127.0.0.1", 0)
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


def test_scripted_scenario_gives_the_expected_counters(
    workers: WorkerGroup, ops: App, journal: Journal, dashboard: str
) -> None:
    scrape(dashboard + "/metrics")  # the dashboard counts the journal from here on
    victim = workers.spawn("victim")
    victim.wait_started()
    held = ops.enqueue_sync("slow", {"seconds": 60.0, "only_on": "victim"})
    wait_job(journal, held.id, lambda r: r["owner"] == "victim", "never ran on victim", workers)
    worker, url = spawn_with_metrics(
        workers, "counted", concurrency=4, env={"TENURE_JOURNAL_HEARTBEATS": "1"}
    )
    jobs = [ops.enqueue_sync("echo", {"text": f"hello {i}"}) for i in range(3)]
    jobs += [
        ops.enqueue_sync("refuse", {"text": "no"}),
        ops.enqueue_sync("flaky", {"text": "again"}),
        ops.enqueue_sync("slow", {"seconds": 1.0}),  # long enough for a few heartbeats
    ]
    rows = [wait_done(journal, job.id, workers) for job in jobs]
    assert [r["state"] for r in rows] == ["succeeded"] * 3 + ["failed", "succeeded", "succeeded"]
    # --journal-heartbeats: each confirmed extension of the 1 s call is a row of its own.
    beats = journal.events(rows[-1]["id"], "heartbeat_ok")
    assert len(beats) >= 2, journal.kinds(rows[-1]["id"])
    for beat in beats:
        assert (beat["token"], beat["attempt"], beat["worker"]) == (rows[-1]["token"], 1, "counted")
        assert 0 < beat["duration_ms"] < 1500 and 0 < beat["detail"]["lease_left"] <= 1.5
    victim.kill()
    assert wait_done(journal, held.id, workers)["owner"] == "counted"

    s = scrape(url)
    assert value(s, "tenure_jobs_claimed_total", **ECHO) == 3
    assert value(s, "tenure_jobs_claimed_total", tool="flaky") == 2
    assert value(s, "tenure_jobs_claimed_total", **SLOW) == 2
    assert value(s, "tenure_jobs_reclaimed_total", **SLOW) == 1
    assert value(s, "tenure_jobs_reclaimed_total") == 1
    assert value(s, "tenure_leases_expired_total", **SLOW) == 1
    assert value(s, "tenure_results_rejected_total") == 0
    assert value(s, "tenure_heartbeat_failures_total") == 0
    duration = "tenure_tool_duration_seconds_count"
    assert value(s, duration, outcome="succeeded", **ECHO) == 3
    assert value(s, duration, tool="refuse", outcome="failed") == 1
    assert value(s, duration, tool="flaky", outcome="queued") == 1
    assert value(s, duration, tool="flaky", outcome="succeeded") == 1
    assert value(s, "tenure_heartbeat_age_seconds_count", **SLOW) >= 2
    assert 0 < value(s, "tenure_lease_remaining_seconds_sum", **SLOW)
    assert value(s, "tenure_events_total", kind="lease_expired") == 1
    assert value(s, "tenure_database_up") == 1
    assert value(s, "tenure_queue_depth") == 0
    assert value(s, "tenure_running_jobs") == 0

    d = scrape(dashboard + "/metrics")
    journal_total = "tenure_journal_events_total"
    assert value(d, journal_total, kind="lease_expired", **SLOW) == 1
    assert value(d, journal_total, kind="succeeded", tool="echo") == 3
    assert value(d, journal_total, kind="failed", tool="refuse") == 1
    assert value(d, journal_total, kind="retried", tool="flaky") == 1
    assert value(d, journal_total, kind="job_claimed") == 9  # 3 + 1 + 2 + 1 + 1 + reclaim 1
    assert value(d, "tenure_database_up") == 1
    assert worker.alive
