"""Queues over time, from real jobs run by real worker processes on a real PostgreSQL.

Jobs are queued with no worker (the queue and its oldest job show), then run: some
succeed, one fails, one is held by a worker that is SIGKILLed and reclaimed by another.
Every series is checked minute by minute, over the hour and over the day, against a
recount from the raw rows, and the JSON API answers both windows and refuses any other.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row
from tests.support.waiting import wait_until_async
from tests.support.workers import WorkerGroup

from tenure import App
from tenure._dashboard._dashboard import create_dashboard
from tenure._dashboard._queues_page import WINDOWS, queue_data
from tenure._observe._http import ServerThread
from tenure._store import Store

pytestmark = pytest.mark.storage

FAST = {"TENURE_WORKER_KEEPALIVE": "0.2"}
TOOLS = ("echo", "refuse", "watched")


def floor(moment: datetime, bucket: int) -> datetime:
    origin = datetime(2000, 1, 1, tzinfo=UTC)
    offset = (moment - origin).total_seconds()
    return origin + timedelta(seconds=offset - offset % bucket)


def recount(dsn: str, buckets: list[str], bucket: int) -> dict[str, dict[str, list[int]]]:
    """Each series per tool and bucket, counted here from the raw rows."""
    index = {datetime.fromisoformat(b): i for i, b in enumerate(buckets)}
    counts: dict[str, dict[str, list[int]]] = {
        t: {
            s: [0] * len(buckets) for s in ("queued", "running", "succeeded", "failed", "reclaimed")
        }
        for t in TOOLS
    }
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        for row in conn.execute("SELECT tool, created_at FROM tenure_jobs"):
            counts[row["tool"]]["queued"][index[floor(row["created_at"], bucket)]] += 1
        for row in conn.execute(
            "SELECT tool, kind, at, detail FROM tenure_events "
            "WHERE kind IN ('job_claimed', 'succeeded', 'failed')"
        ):
            slot = index[floor(row["at"], bucket)]
            series = counts[row["tool"]]
            if row["kind"] == "job_claimed":
                series["running"][slot] += 1
                if "previous_token" in row["detail"]:
                    series["reclaimed"][slot] += 1
            else:
                series[row["kind"]][slot] += 1
    return counts


def by_tool(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["tool"]: entry for entry in data["tools"]}


@pytest.fixture
def board(tenure_dsn: str) -> Iterator[str]:
    server = ServerThread(create_dashboard(tenure_dsn), "127.0.0.1", 0)
    try:
        yield server.start()
    finally:
        server.stop()


async def test_queued_running_outcomes_and_a_reclaim_per_minute(
    workers: WorkerGroup, ops: App, store: Store, tenure_dsn: str, board: str
) -> None:
    echoes = [await ops.enqueue("echo", {"text": f"e{i}"}) for i in range(3)]
    refused = await ops.enqueue("refuse", {"text": "no"})
    # No worker yet: everything waits, and the oldest queued job ages.
    await wait_until_async(
        lambda: _oldest(store, "echo", 0.3), timeout=10, message="the oldest job never aged"
    )
    before = by_tool(await queue_data(ops.admin, WINDOWS["1h"]))
    assert before["echo"]["queued_now"] == 3
    assert before["refuse"]["queued_now"] == 1
    assert sum(before["echo"]["series"]["queued"]) == 3
    assert sum(before["echo"]["series"]["running"]) == 0

    victim = workers.spawn("victim", env=FAST)
    victim.wait_started()
    for job in [*echoes, refused]:
        await ops.wait_many([job.id], timeout=30)
    watched = await ops.enqueue("watched", {"seconds": 60.0})
    await wait_until_async(
        lambda: _owner(store, watched.id, "victim"), timeout=15, message="never ran on victim"
    )
    victim.kill()
    survivor = workers.spawn("survivor", env=FAST)
    survivor.wait_started()
    await wait_until_async(
        lambda: _owner(store, watched.id, "survivor"), timeout=20, message="never reclaimed"
    )

    data = await queue_data(ops.admin, WINDOWS["1h"])
    tools = by_tool(data)
    assert len(data["buckets"]) == 60 and data["bucket_seconds"] == 60
    assert not data["tools_cut"]
    totals = {t: {s: sum(v) for s, v in tools[t]["series"].items()} for t in TOOLS}
    assert totals["echo"] == {
        "queued": 3,
        "running": 3,
        "succeeded": 3,
        "failed": 0,
        "reclaimed": 0,
    }
    assert totals["refuse"] == {
        "queued": 1,
        "running": 1,
        "succeeded": 0,
        "failed": 1,
        "reclaimed": 0,
    }
    assert totals["watched"] == {
        "queued": 1,
        "running": 2,
        "succeeded": 0,
        "failed": 0,
        "reclaimed": 1,
    }
    assert tools["watched"]["running_now"] == 1
    assert tools["echo"]["queued_now"] == 0
    # Minute by minute, over the hour and over the day, the same as a count of the raw rows
    # made here.
    expected = recount(tenure_dsn, data["buckets"], 60)
    for tool in TOOLS:
        assert tools[tool]["series"] == expected[tool], tool
    day_data = await queue_data(ops.admin, WINDOWS["1d"])
    assert len(day_data["buckets"]) == 1440 and day_data["bucket_seconds"] == 60
    day_expected = recount(tenure_dsn, day_data["buckets"], 60)
    for tool in TOOLS:
        assert by_tool(day_data)[tool]["series"] == day_expected[tool], tool

    # The JSON API: both windows, the records and the fragment; any other window refused.
    with httpx.Client(base_url=board, timeout=10) as client:
        day = client.get("/api/queues", params={"window": "1d"}).json()
        assert day["bucket_seconds"] == 60 and len(day["buckets"]) == 1440
        day_watched = by_tool(day)["watched"]["series"]
        assert sum(day_watched["reclaimed"]) == 1 and sum(day_watched["running"]) == 2
        hour = client.get("/api/queues").json()
        assert hour["window"] == "1h"
        assert 'data-tool="watched"' in hour["fragments"]["queues"]
        bad = client.get("/api/queues", params={"window": "7d"})
        assert bad.status_code == 400 and "window" in bad.json()["error"]
        listed = client.get("/api/workers").json()
        assert {w["name"]: w["status"] for w in listed["workers"]}["survivor"] == "alive"
    await ops.cancel(watched.id)


async def _oldest(store: Store, tool: str, age: float) -> bool:
    rows = {r["tool"]: r for r in await store.queue_depth(1000)}
    return tool in rows and (rows[tool]["oldest_age"] or 0) >= age


async def _owner(store: Store, job_id: int, owner: str) -> bool:
    return (await store.job_detail(job_id))["owner"] == owner


def test_nothing_queued_says_so(tenure_dsn: str, board: str) -> None:
    with httpx.Client(base_url=board, timeout=10) as client:
        page = client.get("/queues")
        assert page.status_code == 200
        assert "no jobs in the last 1h" in page.text
        # The figures change at most every 5 s: the page polls no faster (the dashboard's
        # own poll interval is 1 s).
        assert 'data-interval="5"' in page.text
        empty = client.get("/api/queues").json()
        assert empty["tools"] == [] and len(empty["buckets"]) == 60


def test_the_new_pages_and_their_api_need_the_token_when_there_is_one(tenure_dsn: str) -> None:
    token = "queues-test-token-0123456789"
    server = ServerThread(create_dashboard(tenure_dsn, access_token=token), "127.0.0.1", 0)
    url = server.start()
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            for path in ("/api/workers", "/api/queues"):
                assert client.get(path).status_code == 401
                bearer = {"Authorization": f"Bearer {token}"}
                assert client.get(path, headers=bearer).status_code == 200
            for path in ("/workers", "/queues?window=1d"):
                page = client.get(path)
                assert page.status_code == 303
                assert page.headers["location"].startswith("/login?next=")
    finally:
        server.stop()
