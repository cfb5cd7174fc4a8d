"""The explorer, the ownership picture and the pipeline graph in a real Chromium.

An operator filters and pages through jobs, finds one by its idempotency key, cancels a
selection (signed in, with the form's CSRF token), watches a call's progress move, and
reads the ownership picture of a job that changed hands: once after its worker was
SIGKILLed, once after its worker was SIGSTOPped, resumed and refused. Screenshots of both
pictures land in artifacts/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.integration.observe.helpers import wait_done
from tests.integration.pipeline.stage_app import build_app
from tests.support.waiting import wait_until
from tests.support.workers import Journal, WorkerGroup, WorkerProcess, wait_job
from tests.system.browser.conftest import TOKEN, Scene

from tenure import App

pytestmark = pytest.mark.storage


def ids_on(page: Any) -> list[int]:
    return [
        int(v)
        for v in page.locator("table.jobs tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.job)"
        )
    ]


def test_filter_page_find_by_key_and_bulk_cancel_with_csrf(
    browser: Any, ops: App, board: dict[str, str], journal: Journal, artifacts: Path
) -> None:
    from playwright.sync_api import expect

    echoes = [ops.sync.enqueue("echo", {"text": f"e{i}"}).id for i in range(5)]
    refusals = [ops.sync.enqueue("refuse", {"text": f"r{i}"}).id for i in range(2)]
    keyed = ops.sync.enqueue(
        "echo", {"text": "keyed"}, idempotency_key="order-1048", tenant="acme"
    ).id
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    locked = board["locked"]
    page.goto(f"{locked}/jobs")
    page.fill("#token", TOKEN)
    page.click("#login")
    expect(page).to_have_url(f"{locked}/jobs")
    expect(page.locator("table.jobs tbody tr")).to_have_count(8)

    # Filter by tool with the form.
    page.fill("#f-tool", "refuse")
    page.click("#search")
    expect(page.locator("table.jobs tbody tr")).to_have_count(2)
    assert ids_on(page) == sorted(refusals, reverse=True)

    # Page through the echoes two at a time by cursor: every job once, newest first.
    page.goto(f"{locked}/jobs?tool=echo&limit=2")
    seen = ids_on(page)
    while page.locator("#next-page").count():
        page.click("#next-page")
        expect(page.locator("#first-page")).to_be_visible()
        seen += ids_on(page)
    assert seen == sorted([*echoes, keyed], reverse=True)

    # Find by idempotency key within its tenant; the same key without the tenant finds none.
    page.goto(f"{locked}/jobs")
    page.fill("#f-key", "order-1048")
    page.fill("#f-tenant", "acme")
    page.click("#search")
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    assert ids_on(page) == [keyed]
    page.fill("#f-tenant", "")
    page.click("#search")
    expect(page.locator("#no-jobs")).to_be_visible()

    # Bulk cancel two echoes: a forged form (no CSRF token) is refused first.
    page.goto(f"{locked}/jobs?tool=echo")
    chosen = echoes[:2]
    forged = context.request.post(
        f"{locked}/jobs/bulk",
        form={"action": "cancel", "job": str(chosen[0]), "csrf": "0" * 64},
    )
    assert forged.status == 403 and journal.job(chosen[0])["state"] == "queued"
    for job_id in chosen:
        page.check(f'input[name="job"][value="{job_id}"]')
    page.click("#bulk-cancel")
    expect(page.locator("#bulk-summary")).to_contain_text("2 of 2 jobs")
    for job_id in chosen:
        expect(page.locator(f'tr[data-job="{job_id}"]')).to_contain_text("Cancelled")
        assert journal.job(job_id)["state"] == "cancelled"
    assert journal.job(echoes[2])["state"] == "queued"
    page.screenshot(path=str(artifacts / "explorer-bulk-cancel.png"), full_page=True)
    page.goto(f"{locked}/jobs?state=cancelled")
    assert sorted(ids_on(page)) == sorted(chosen)
    page.screenshot(path=str(artifacts / "explorer-cancelled.png"), full_page=True)
    context.close()


def slow_call_on(
    name: str, seconds: float, workers: WorkerGroup, ops: App, journal: Journal
) -> tuple[WorkerProcess, int, dict[str, Any]]:
    """A worker ``name`` running a slow call (``seconds`` long, on it alone): the worker,
    the job's id and its row once that worker holds it."""
    worker = workers.spawn(name)
    worker.wait_started()
    job = ops.sync.enqueue("slow", {"seconds": seconds, "only_on": name})
    row = wait_job(journal, job.id, lambda r: r["owner"] == name, f"never ran on {name}", workers)
    return worker, job.id, row


def lane(page: Any, token: int) -> Any:
    return page.locator(f'#picture g.lane[data-token="{token}"]')


def x_of(marker: Any) -> float:
    """A marker's place on the time axis: its path starts ``M{x} {y}``."""
    start = str(marker.locator("path").get_attribute("d")).split()[0]
    return float(start[1:])


def test_the_picture_after_a_sigkill_shows_the_expired_lease_and_the_heir(scene: Scene) -> None:
    from playwright.sync_api import expect

    browser, workers, ops, journal, board, artifacts = scene

    doomed, job_id, first = slow_call_on("doomed", 30.0, workers, ops, journal)

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{board['open']}/jobs/{job_id}")
    live = lane(page, first["token"])
    expect(live).to_have_attribute("data-worker", "doomed")
    expect(live).to_have_attribute("data-outcome", "running")
    expect(live.locator("rect.lease-rest")).to_have_count(1)  # the lease still ahead of it

    doomed.kill()
    workers.spawn("heir")
    row = wait_done(journal, job_id, workers)
    assert (row["state"], row["owner"]) == ("succeeded", "heir")
    expect(page.locator("#picture g.lane")).to_have_count(2)  # the page polls: no reload
    expect(live).to_have_attribute("data-outcome", "expired")
    expired = live.locator('g.marker[data-kind="lease_expired"]')
    expect(expired).to_have_count(1)
    expect(expired.locator("title")).to_contain_text("reclaimed by heir")
    heir = lane(page, row["token"])
    expect(heir).to_have_attribute("data-worker", "heir")
    expect(heir).to_have_attribute("data-outcome", "succeeded")
    expect(page.locator("#picture .lane-token")).to_have_text(
        [f"token {first['token']}", f"token {row['token']}"]
    )
    page.locator("#picture").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "ownership-sigkill.png"), full_page=True)
    page.close()


def test_the_picture_after_a_sigstop_shows_the_stale_owner_stopped_and_refused(
    scene: Scene,
) -> None:
    from playwright.sync_api import expect

    browser, workers, ops, journal, board, artifacts = scene

    stale, job_id, first = slow_call_on("stale", 0.5, workers, ops, journal)
    stale.pause()
    workers.spawn("fresh")
    row = wait_done(journal, job_id, workers)
    assert (row["state"], row["owner"]) == ("succeeded", "fresh"), row
    stale.resume()
    # On SIGCONT the stale owner is stopped (heartbeat_lost) or its late result is refused
    # by the fenced commit (result_rejected) or thrown away (result_discarded): journaled
    # under its old token, whichever of its threads woke first.
    refused = ("heartbeat_lost", "result_rejected", "result_discarded")

    def stale_events() -> list[dict[str, Any]]:
        return [e for e in journal.events(job_id) if e["kind"] in refused]

    wait_until(
        lambda: stale_events(),
        timeout=30,
        interval=0.05,
        message=f"the stale owner left no trace: {journal.kinds(job_id)}\n{workers.logs()}",
    )
    seen = stale_events()
    assert {e["token"] for e in seen} == {first["token"]}

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{board['open']}/jobs/{job_id}")
    old = lane(page, first["token"])
    expect(old).to_have_attribute("data-worker", "stale")
    expect(old).to_have_attribute("data-outcome", "expired")
    ran_out = old.locator('g.marker[data-kind="lease_expired"]')
    expect(ran_out).to_have_count(1)
    texts = {
        "heartbeat_lost": "stale owner stopped",
        "result_rejected": "result refused by the fenced commit",
        "result_discarded": "late result discarded",
    }
    for kind in {e["kind"] for e in seen}:
        marker = old.locator(f'g.marker[data-kind="{kind}"]').first
        expect(marker.locator("title")).to_contain_text(texts[kind])
        # The stale owner's end comes after its lease ran out, on the same time axis.
        assert x_of(marker) > x_of(ran_out)
    fresh = lane(page, row["token"])
    expect(fresh).to_have_attribute("data-worker", "fresh")
    expect(fresh).to_have_attribute("data-outcome", "succeeded")
    page.screenshot(path=str(artifacts / "ownership-sigstop.png"), full_page=True)
    page.close()


def test_progress_follows_the_call_live(
    browser: Any, workers: WorkerGroup, ops: App, journal: Journal, board: dict[str, str]
) -> None:
    from playwright.sync_api import expect

    workers.spawn("stepper")
    job = ops.sync.enqueue("stepped", {"total": 40, "pause": 0.25})
    wait_job(journal, job.id, lambda r: r["progress"] is not None, "no progress", workers)
    page = browser.new_page()
    page.goto(f"{board['open']}/jobs/{job.id}")
    bar = page.locator("#summary progress")
    expect(bar).to_have_count(1)
    before = float(bar.get_attribute("value") or 0)
    page.wait_for_function(
        "([v]) => parseFloat(document.querySelector('#summary progress').value) > v + 2",
        arg=[before],
        polling=100,
        timeout=10_000,
    )
    expect(page.locator("#summary")).to_contain_text("/40")
    page.close()


def test_a_pipeline_run_is_drawn_as_its_graph(
    browser: Any, board: dict[str, str], tenure_dsn: str, artifacts: Path
) -> None:
    from playwright.sync_api import expect

    app = build_app(tenure_dsn)  # the pipeline tests' app: develop → QA → SecOps, with loops
    try:
        run = app.sync.start_run("review", {})
    finally:
        app.close()
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{board['open']}/pipelines/{run.id}")  # a run's graph is on its own page
    graph = page.locator(f'svg.run-graph[data-run="{run.id}"]')
    expect(graph).to_be_visible()
    nodes = graph.locator("g.stage-node")
    expect(nodes).to_have_count(4)
    expect(graph.locator('g.stage-node[data-stage="develop"]')).to_have_attribute(
        "data-state", "open"
    )
    expect(graph.locator('g.stage-node[data-stage="develop"] text.round')).to_have_text("#1 open")
    for stage in ("qa", "correct", "secops"):
        node = graph.locator(f'g.stage-node[data-stage="{stage}"]')
        expect(node).to_have_attribute("data-state", "not-reached")
    verdicts = graph.locator("g.edge").evaluate_all("es => es.map(e => e.dataset.verdict)")
    assert sorted(verdicts) == ["", "", "approve", "reject", "reject"]
    page.screenshot(path=str(artifacts / "pipeline-graph.png"), full_page=True)
    page.close()
