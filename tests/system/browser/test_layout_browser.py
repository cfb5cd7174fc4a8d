"""The dashboard's layout in a real Chromium at 1400 px: every ownership marker's number
legible when markers fall on one moment, and pipeline runs as a table (no graph per run,
nothing wider than the window) with each run's graph on its own page, its stage boxes
linking to their jobs."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.integration.store.helpers import new_job

from tenure import App
from tenure._store import Store
from tenure.examples.review import review

pytestmark = pytest.mark.storage

VIEWPORT = {"width": 1400, "height": 1000}
# What a stale owner leaves when it wakes: stopped, its result refused, thrown away, all in
# the same few milliseconds (job 5 of the demo drew two numbers on top of each other).
AT_ONCE = ("heartbeat_lost", "result_rejected", "result_discarded")


async def _contested_job(dsn: str) -> int:
    store = Store(dsn, max_size=1)
    await store.open()
    try:
        job = await store.enqueue(new_job("contested", tool="slow"))
        [claimed] = await store.claim("stale", {"slow": 60_000}, 1)
        for kind in AT_ONCE:
            await store.record_event(
                kind, job_id=job.id, token=claimed.token, attempt=1, worker="stale", tool="slow"
            )
    finally:
        await store.close()
    # As the demo saw them: the lease held for seconds, then all three in one instant.
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            "UPDATE tenure_events SET at = CASE WHEN kind = 'job_claimed'"
            " THEN now() - interval '6 seconds' ELSE now() END"
            " WHERE job_id = %s",
            (job.id,),
        )
    return job.id


MEASURE = """() => {
  const box = (e) => { const r = e.getBoundingClientRect();
                       return {x: r.x, y: r.y, width: r.width, height: r.height}; };
  return {
    svg: box(document.querySelector("#picture svg.ownership")),
    markers: [...document.querySelectorAll("#picture g.marker")].map((g) => ({
      number: g.querySelector("text.note-number").textContent,
      path: box(g.querySelector("path")),
      text: box(g.querySelector("text.note-number")),
    })),
  };
}"""


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def _inside(inner: dict[str, float], outer: dict[str, float]) -> bool:
    return (
        inner["x"] >= outer["x"]
        and inner["y"] >= outer["y"]
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"]
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"]
    )


def test_markers_at_one_moment_each_keep_a_legible_number(
    browser: Any, board: dict[str, str], tenure_dsn: str, artifacts: Path
) -> None:
    from playwright.sync_api import expect

    with ThreadPoolExecutor(1) as aside:  # Playwright's own loop runs on this thread
        job_id = aside.submit(asyncio.run, _contested_job(tenure_dsn)).result()
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{board['open']}/jobs/{job_id}")
    markers = page.locator("#picture g.marker")
    expect(markers).to_have_count(len(AT_ONCE))
    # Measured in one go: the page re-renders the picture at every poll.
    drawn = page.evaluate(MEASURE)
    assert sorted(m["number"] for m in drawn["markers"]) == ["1", "2", "3"]
    boxes = [m["text"] for m in drawn["markers"]]
    assert all(box["width"] > 0 for box in boxes)
    for i, box in enumerate(boxes):
        assert _inside(box, drawn["svg"]), (box, drawn["svg"])
        for other in boxes[i + 1 :]:
            assert not _overlap(box, other), (box, other)
    # Each number still sits by its own marker (within a few pixels of it, across).
    for marker in drawn["markers"]:
        diamond, number = marker["path"], marker["text"]
        assert abs(number["x"] - (diamond["x"] + diamond["width"])) < 12, marker
    expect(page.locator("ol.picture-notes li")).to_have_count(len(AT_ONCE))
    page.locator("#picture").screenshot(path=str(artifacts / "ownership-markers-at-once.png"))
    page.close()


def _runs(dsn: str) -> list[int]:
    """Three runs of the demo's review pipeline (six stages), no workers: each waits at its
    first stage, whose job exists. The first one looped through QA and correction five
    times, as a run whose patch keeps failing review does (its stage rows only)."""
    app = App(dsn)
    try:
        ids = [
            app.sync.start_run(
                review,
                {"task": f"PR-{n}", "seconds": 1.0, "tracker": "http://127.0.0.1:9"},
                idempotency_key=f"layout:{n}",
            ).id
            for n in range(3)
        ]
    finally:
        app.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for round_ in range(1, 6):
            for name, decision in (("qa", "reject"), ("correct", None)):
                conn.execute(
                    "INSERT INTO tenure_run_stages (run_id, name, round, kind, state, decision)"
                    " VALUES (%s, %s, %s, 'stage', 'succeeded', %s)",
                    (ids[0], name, round_, decision),
                )
    return ids


def _no_sideways_scroll(page: Any) -> None:
    wide = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert wide[0] <= wide[1], f"the page is {wide[0]} px wide in a {wide[1]} px window"


def test_pipeline_runs_are_a_table_and_each_run_has_its_graph_on_its_own_page(
    browser: Any, board: dict[str, str], tenure_dsn: str, artifacts: Path
) -> None:
    from playwright.sync_api import expect

    ids = _runs(tenure_dsn)
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{board['open']}/")
    expect(page.locator("#pipelines table.pipelines tbody tr")).to_have_count(3)
    expect(page.locator("svg.run-graph")).to_have_count(0)  # no graph per run
    _no_sideways_scroll(page)

    page.click("header nav >> text=pipelines")
    expect(page).to_have_url(f"{board['open']}/pipelines")
    rows = page.locator("table.pipelines tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator("svg.run-graph")).to_have_count(0)
    expect(page.locator(f'tr[data-run="{ids[0]}"] .stage')).to_have_count(11)
    _no_sideways_scroll(page)
    page.screenshot(path=str(artifacts / "pipelines.png"), full_page=True)

    page.click(f'a[href="/pipelines/{ids[0]}"]')
    expect(page).to_have_url(f"{board['open']}/pipelines/{ids[0]}")
    graph = page.locator(f'svg.run-graph[data-run="{ids[0]}"]')
    expect(graph).to_be_visible()
    expect(graph.locator("g.stage-node")).to_have_count(5)
    _no_sideways_scroll(page)
    develop = graph.locator("a.stage-link", has=page.locator('g[data-stage="develop"]'))
    expect(develop).to_have_count(1)
    href = develop.get_attribute("href")
    assert href is not None and href.startswith("/jobs/")
    page.screenshot(path=str(artifacts / "pipeline-run.png"), full_page=True)
    develop.click()
    expect(page).to_have_url(f"{board['open']}{href}")
    expect(page.locator("#summary")).to_contain_text("develop")
    page.close()

    missing = browser.new_page(viewport=VIEWPORT)
    response = missing.goto(f"{board['open']}/pipelines/{ids[-1] + 100}")
    assert response is not None and response.status == 404
    missing.close()
