"""After a scripted scenario, /metrics says exactly what happened (worker and dashboard)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.observe.helpers import scrape, spawn_with_metrics, value, wait_done
from tests.integration.observe.observe_app import build_app
from tests.integration.store.helpers import new_job
from tests.support.workers import Journal, WorkerGroup, wait_job

from tenure import App
from tenure._dashboard._dashboard import create_dashboard
from tenure._observe._events import EVENTS
from tenure._observe._http import ServerThread
from tenure._observe._metrics import LOSS_REASONS, NOT_EMITTED, OTHER, TOOL_CAP, ToolLabels
from tenure._store import Store

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
    held = ops.sync.enqueue("slow", {"seconds": 60.0, "only_on": "victim"})
    wait_job(journal, held.id, lambda r: r["owner"] == "victim", "never ran on victim", workers)
    worker, url = spawn_with_metrics(
        workers, "counted", concurrency=4, env={"TENURE_JOURNAL_HEARTBEATS": "1"}
    )
    jobs = [ops.sync.enqueue("echo", {"text": f"hello {i}"}) for i in range(3)]
    jobs += [
        ops.sync.enqueue("refuse", {"text": "no"}),
        ops.sync.enqueue("flaky", {"text": "again"}),
        ops.sync.enqueue("slow", {"seconds": 1.0}),  # long enough for a few heartbeats
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


Sample = tuple[str, tuple[tuple[str, str], ...], float]


def samples_of(url: str) -> list[Sample]:
    """Every sample of a /metrics page, duplicates kept (prometheus_client's text parser)."""
    response = httpx.get(url, timeout=10)
    response.raise_for_status()
    return [
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    ]


def test_a_fresh_worker_shows_every_counter_at_zero(workers: WorkerGroup) -> None:
    """Before any claim, loss or rejection, the series alerts watch already exist at 0:
    ``rate()`` has a baseline and ``absent()`` means the worker is gone, not healthy."""
    _, url = spawn_with_metrics(workers, "fresh")
    found = samples_of(url)
    s = {(name, labels): v for name, labels, v in found}
    assert len(s) == len(found), "duplicate series"
    tools = build_app().tools
    assert tools
    counters = [
        "tenure_jobs_claimed_total",
        "tenure_jobs_reclaimed_total",
        "tenure_leases_expired_total",
        "tenure_results_rejected_total",
        "tenure_tool_requests_total",
    ]
    for name, spec in tools.items():
        labels = {"tool": name, "model": "", "provider": "", **dict(spec.labels)}
        for counter in [*counters, "tenure_queue_depth", "tenure_running_jobs"]:
            assert s[(counter, tuple(sorted(labels.items())))] == 0, (counter, name)
        for reason in LOSS_REASONS:
            key = tuple(sorted({**labels, "reason": reason}.items()))
            assert s[("tenure_heartbeat_failures_total", key)] == 0, (name, reason)
    for kind in ["lease_expired", "heartbeat_lost", "result_rejected", "ownership_unknown"]:
        assert ("tenure_events_total", (("kind", kind),)) in s, kind
    assert value(s, "tenure_events_total", kind="succeeded") == 0
    assert ("tenure_events_total", (("kind", "succeeded"),)) not in s  # never an event here
    assert NOT_EMITTED <= set(EVENTS)


async def test_tools_past_the_cap_share_one_other_series(tenure_dsn: str, store: Store) -> None:
    """Past TOOL_CAP tool names, the rest are one ``other`` series holding their sum (min,
    max), never one duplicate ``other`` series per tool."""
    server = ServerThread(create_dashboard(tenure_dsn), "127.0.0.1", 0)
    url = server.start() + "/metrics"
    try:
        extra = 5
        names = [f"tool-{i:03}" for i in range(TOOL_CAP + extra)]
        samples_of(url)  # the journal is counted from here on
        for round_ in (1, 2):
            for name in names:
                await store.enqueue(new_job(f"{name}-{round_}", tool=name))
        claimed = await store.claim("w-cap", dict.fromkeys(names, 60_000), len(names))
        assert sorted(job.tool for job in claimed) == names  # one of each tool is running
        found = samples_of(url)
    finally:
        server.stop()
    per_series = Counter((name, labels) for name, labels, _ in found)
    assert [key for key, n in per_series.items() if n > 1] == []
    for family, only in [
        ("tenure_queue_depth", {}),
        ("tenure_running_jobs", {}),
        ("tenure_journal_events_total", {"kind": "job_claimed"}),
    ]:
        rows = [
            (dict(labels), v)
            for name, labels, v in found
            if name == family and only.items() <= dict(labels).items()
        ]
        named = [v for labels, v in rows if labels["tool"] != OTHER]
        other = [v for labels, v in rows if labels["tool"] == OTHER]
        assert len(named) == TOOL_CAP and set(named) == {1}, family
        assert other == [extra], family  # one job of each of the 5 tools past the cap
    for family in [
        "tenure_running_lease_remaining_min_seconds",
        "tenure_running_heartbeat_age_max_seconds",
    ]:
        assert [dict(labels)["tool"] for name, labels, _ in found if name == family].count(
            OTHER
        ) == 1
