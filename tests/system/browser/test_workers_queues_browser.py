"""The workers and queues pages in a real headless Chromium, with real worker processes.

An operator sees a worker alive with the lease it holds, sees it go silent (still
showing that lease) once it is SIGKILLed, and a SIGSTOPped one go silent and come back
after SIGCONT, all without reloading the page. On the queues page the charts appear and
move as jobs are queued and run, and the window switches between the last hour and day.
Screenshots land in artifacts/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.charts import step_heights
from tests.support.workers import Journal, WorkerGroup, wait_job

from tenure import App
from tenure._dashboard._dashboard import create_dashboard
from tenure._observe._http import ServerThread

pytestmark = pytest.mark.storage

POLL = 0.3
FAST = {"TENURE_WORKER_KEEPALIVE": "0.2"}  # silent after 0.6 s unseen


@pytest.fixture
def board(tenure_dsn: str) -> Iterator[str]:
    server = ServerThread(create_dashboard(tenure_dsn, poll_interval=POLL), "127.0.0.1", 0)
    try:
        yield server.start()
    finally:
        server.stop()


def test_workers_go_silent_under_sigkill_and_sigstop_and_come_back_after_sigcont(
    browser: Any, workers: WorkerGroup, ops: App, journal: Journal, board: str, artifacts: Path
) -> None:
    from playwright.sync_api import expect

    doomed = workers.spawn("doomed", env=FAST)
    sleeper = workers.spawn("sleeper", env=FAST)
    workers.wait_started()
    job = ops.sync.enqueue("watched", {"seconds": 60.0})
    holder = wait_job(journal, job.id, lambda r: r["owner"] is not None, "never ran", workers)
    held_by = str(holder["owner"])
    # The one holding the job is killed; the other is paused.
    killed, paused = (doomed, sleeper) if held_by == "doomed" else (sleeper, doomed)

    page = browser.new_page(viewport={"width": 1400, "height": 700})
    page.goto(board + "/workers")
    dead_row = page.locator(f'tr[data-worker="{killed.name}"]')
    paused_row = page.locator(f'tr[data-worker="{paused.name}"]')
    expect(dead_row.locator("td.status")).to_have_text("alive")
    expect(dead_row.locator("td.held")).to_have_text("1")
    expect(paused_row.locator("td.status")).to_have_text("alive")
    expect(page.locator("p.counts")).to_contain_text("2 alive")
    page.screenshot(path=str(artifacts / "workers-alive.png"), full_page=True)

    killed.kill()
    expect(dead_row.locator("td.status")).to_have_text("silent", timeout=15_000)
    expect(dead_row.locator("td.held")).to_contain_text("1")  # what it held, still running

    paused.pause()
    try:
        expect(paused_row.locator("td.status")).to_have_text("silent", timeout=15_000)
        expect(page.locator("p.counts")).to_contain_text("2 silent")
        page.screenshot(path=str(artifacts / "workers-silent.png"), full_page=True)
    finally:
        paused.resume()
    expect(paused_row.locator("td.status")).to_have_text("alive", timeout=15_000)
    # The resumed worker reclaims the dead one's job once its lease expires.
    expect(paused_row.locator("td.held")).to_have_text("1", timeout=20_000)
    expect(dead_row.locator("td.held")).to_have_text("0")
    page.screenshot(path=str(artifacts / "workers-reclaimed.png"), full_page=True)
    page.close()


def test_queue_charts_appear_and_move_live_and_the_window_switches(
    browser: Any, workers: WorkerGroup, ops: App, board: str, artifacts: Path
) -> None:
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1400, "height": 800})
    page.goto(board + "/queues")
    expect(page.locator("#queues")).to_contain_text("no jobs in the last 1h")

    for i in range(4):
        ops.sync.enqueue("echo", {"text": f"q{i}"})
    card = page.locator('figure.queue[data-tool="echo"]')
    # No worker yet: the poll brings the queue in (figures are reused for up to 5 s).
    expect(card.locator(".queued-now")).to_have_text("4", timeout=15_000)
    expect(card.locator('[data-series="queued"]')).to_have_text("4 queued")
    expect(card.locator("svg.queue-chart path.line-queued")).to_have_count(1)

    workers.spawn("runner", env=FAST).wait_started()
    expect(card.locator('[data-series="succeeded"]')).to_have_text("4 succeeded", timeout=20_000)
    expect(card.locator('[data-series="running"]')).to_have_text("4 running")
    expect(card.locator(".queued-now")).to_have_text("0")
    heights = step_heights(card.locator("path.line-succeeded").get_attribute("d") or "")
    assert len(heights) == 60 and min(heights) < max(heights)  # a peak, not a flat line
    drawn = card.locator("path.line-succeeded").bounding_box()
    assert drawn is not None and drawn["height"] > 10 and drawn["width"] > 300  # on screen
    page.screenshot(path=str(artifacts / "queues-hour.png"), full_page=True)

    page.click("text=last 1d")
    expect(page).to_have_url(board + "/queues?window=1d")
    expect(card.locator(".totals")).to_contain_text("per minute, last 1d")
    expect(card.locator('[data-series="succeeded"]')).to_have_text("4 succeeded")
    day = step_heights(card.locator("path.line-succeeded").get_attribute("d") or "")
    assert len(day) == 1440 and min(day) < max(day)
    drawn = card.locator("path.line-succeeded").bounding_box()
    assert drawn is not None and drawn["height"] > 10
    page.screenshot(path=str(artifacts / "queues-day.png"), full_page=True)
    page.close()
