"""The dashboard in a real headless Chromium, with real worker processes behind it.

An operator watches a running call's lease bar shrink and refill, sees the
takeover after its worker is SIGKILLed, and cancels a call — which works with
the access token and is refused without it. Screenshots land in artifacts/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from tests.support.workers import Journal, WorkerGroup, wait_job
from tests.system.browser.conftest import REBIND_HOST, TOKEN, Scene

from tenure import App

pytestmark = pytest.mark.storage

# A monotone run of samples of a lease bar's width (percent), 100 ms apart: shrinking.
SHRINKING = """([id]) => {
    const bar = document.querySelector(`tr[data-job="${id}"] rect.bar-fill`);
    if (!bar) return false;
    const seen = (window.__widths ||= []);
    seen.push(parseFloat(bar.getAttribute("width")));
    const n = seen.length;
    return n >= 4 && seen[n - 1] < seen[n - 2] && seen[n - 2] < seen[n - 3]
        && seen[n - 3] < seen[n - 4];
}"""


def running_on(journal: Journal, job_id: int, owner: str, workers: WorkerGroup) -> dict[str, Any]:
    return wait_job(
        journal, job_id, lambda r: r["owner"] == owner, f"never ran on {owner}", workers
    )


def test_a_running_lease_shrinks_live_and_the_reclaim_shows_after_a_kill(scene: Scene) -> None:
    from playwright.sync_api import expect

    browser, workers, ops, journal, board, artifacts = scene

    holder = workers.spawn("holder")
    holder.wait_started()
    job = ops.sync.enqueue("watched", {"seconds": 60.0})
    first = running_on(journal, job.id, "holder", workers)

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(board["open"] + "/")
    row = page.locator(f'tr[data-job="{job.id}"]')
    expect(row.locator("td.owner")).to_have_text("holder")
    expect(row.locator("td.token")).to_have_text(str(first["token"]))
    expect(row.locator(".age").first).to_contain_text(" s")
    page.wait_for_function(SHRINKING, arg=[job.id], polling=100, timeout=10_000)
    page.screenshot(path=str(artifacts / "dashboard-running.png"), full_page=True)

    holder.kill()
    workers.spawn("heir")
    expect(row.locator("td.owner")).to_have_text("heir", timeout=20_000)
    reclaimed = journal.job(job.id)
    expect(row.locator("td.token")).to_have_text(str(reclaimed["token"]))
    expired = page.locator('#events tr[data-kind="lease_expired"]')
    expect(expired).to_have_count(1, timeout=10_000)
    expect(expired).to_contain_text(str(first["token"]))
    expect(expired).to_contain_text("holder")
    expect(expired).to_contain_text("reclaimed by heir")
    page.screenshot(path=str(artifacts / "dashboard-reclaim.png"), full_page=True)

    page.goto(f"{board['open']}/jobs/{job.id}")
    timeline = page.locator("#timeline tr[data-kind]")
    expect(timeline).to_have_count(3)  # claimed by holder, its lease expired, reclaimed by heir
    expect(page.locator('#timeline tr[data-kind="job_claimed"]').last).to_contain_text(
        f"previous token {first['token']}"
    )
    page.close()


def test_cancel_works_with_the_access_token_and_is_refused_without_it(
    browser: Any,
    workers: WorkerGroup,
    ops: App,
    journal: Journal,
    board: dict[str, str],
    artifacts: Path,
) -> None:
    from playwright.sync_api import expect

    worker = workers.spawn("busy")
    job = ops.sync.enqueue("watched", {"seconds": 60.0})
    running_on(journal, job.id, "busy", workers)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    locked, read_only = board["locked"], board["open"]

    # Without the token: the read-only dashboard offers no cancel and refuses the POST ...
    page.goto(f"{read_only}/jobs/{job.id}")
    expect(page.locator(".actions-off")).to_contain_text("need an access token")
    expect(page.locator("#cancel")).to_have_count(0)
    assert (
        context.request.post(f"{read_only}/jobs/{job.id}/cancel", form={"csrf": "x"}).status == 403
    )
    # ... and the locked one turns away a request that has no session.
    assert context.request.post(f"{locked}/jobs/{job.id}/cancel", form={"csrf": "x"}).status == 401
    assert journal.job(job.id)["state"] == "running"

    # With the token: sign in once, then the job page offers Cancel.
    page.goto(f"{locked}/jobs/{job.id}")
    expect(page).to_have_url(f"{locked}/login?next=%2Fjobs%2F{job.id}")
    page.fill("#token", TOKEN)
    page.click("#login")
    expect(page).to_have_url(f"{locked}/jobs/{job.id}")
    expect(page.locator("#cancel")).to_be_visible()
    # A session is not enough: a POST without the form's CSRF token is refused.
    forged = context.request.post(f"{locked}/jobs/{job.id}/cancel", form={"csrf": "0" * 64})
    assert forged.status == 403
    assert journal.job(job.id)["state"] == "running"

    page.click("#cancel")
    expect(page.locator("p.notice")).to_contain_text("Cancelled")
    expect(page.locator("#summary .state")).to_have_text("cancelled")
    assert journal.job(job.id)["state"] == "cancelled"
    worker.wait_event("cancel_observed", job=job.id)
    expect(page.locator('#timeline tr[data-kind="cancelled"]')).to_have_count(1)
    page.screenshot(path=str(artifacts / "dashboard-cancelled.png"), full_page=True)
    context.close()


def test_a_rebound_name_reads_nothing_and_logout_ends_the_session(
    browser: Any, ops: App, journal: Journal, workers: WorkerGroup, board: dict[str, str]
) -> None:
    """A page on an attacker's name that now resolves to 127.0.0.1 gets 421 and no job;
    after "log out" a saved copy of the session cookie opens nothing."""
    from playwright.sync_api import expect

    worker = workers.spawn("held")
    job = ops.sync.enqueue("watched", {"seconds": 60.0})
    running_on(journal, job.id, "held", workers)
    context = browser.new_context()
    page = context.new_page()
    for name, url in board.items():
        port = urlsplit(url).port
        for path in ["/", f"/jobs/{job.id}", "/api/overview", "/metrics"]:
            response = page.goto(f"http://{REBIND_HOST}:{port}{path}")
            assert response is not None and response.status == 421, (name, path)
            assert "held" not in page.content() and str(job.id) not in page.content()
        same = page.goto(f"{url}/")  # the dashboard's own name still works
        assert same is not None and same.status == 200

    locked = board["locked"]
    page.goto(f"{locked}/jobs/{job.id}")
    page.fill("#token", TOKEN)
    page.click("#login")
    expect(page.locator("#cancel")).to_be_visible()
    saved = context.cookies()
    assert [c["name"] for c in saved] == ["tenure_session"]
    assert context.request.get(f"{locked}/api/overview").status == 200
    page.click("form.logout button")
    expect(page).to_have_url(f"{locked}/login")
    context.add_cookies(saved)  # the cookie, replayed after logout
    assert context.request.get(f"{locked}/api/overview").status == 401
    page.goto(f"{locked}/jobs/{job.id}")
    expect(page).to_have_url(f"{locked}/login?next=%2Fjobs%2F{job.id}")
    assert journal.job(job.id)["state"] == "running" and worker.alive
    context.close()
