"""The run page in a real Chromium: a durable agent run (worker processes, an offline model)
shows its model steps with their usage and its tool call's job on one time axis, links that
job to its own page and ownership picture, adds up the totals, and never shows the prompt.
A screenshot lands in artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.apps.durable_app import build_app
from tests.support.workers import Journal, WorkerGroup, closing_app, wait_job

from tenure import App

pytestmark = pytest.mark.storage

SECRET = "my-account-number-is-4711"


@pytest.fixture
def durable_workers(tenure_dsn: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    with WorkerGroup(tenure_dsn, tmp_path, app="tests.apps.durable_app:app") as group:
        yield group


@pytest.fixture
def producer(tenure_dsn: str) -> Iterator[App]:
    yield from closing_app(build_app(tenure_dsn))


def test_the_run_page_shows_steps_usage_and_the_tools_job(
    browser: Any,
    board: dict[str, str],
    durable_workers: WorkerGroup,
    producer: App,
    tenure_dsn: str,
    artifacts: Path,
) -> None:
    from playwright.sync_api import expect

    durable_workers.spawn("a", concurrency=4).wait_started()
    run = producer.sync.enqueue(
        "agent:weather", {"prompt": f"Weather? {SECRET}"}, idempotency_key="r1"
    )
    journal = Journal(tenure_dsn)
    done = wait_job(journal, run.id, lambda j: j["state"] == "succeeded", "run", durable_workers)
    assert done["result"] == "It is sunny in Paris."
    (child,) = [j for j in producer.sync.admin.jobs(tool="lookup")]

    page = browser.new_page()
    try:
        page.goto(f"{board['open']}/jobs/{run.id}")
        page.get_by_role("link", name="its steps").click()
        expect(page).to_have_url(f"{board['open']}/runs/{run.id}")
        lanes = page.locator("svg.run-steps g.run-lane")
        expect(lanes).to_have_count(5)  # model.1, its tool call started, its job, waited, model.2
        names = lanes.evaluate_all("gs => gs.map(g => g.dataset.name)")
        kinds = lanes.evaluate_all("gs => gs.map(g => g.dataset.kind)")
        assert names[0] == "model.1" and names[-1] == "model.2", names
        assert kinds.count("model") == 2 and f"lookup (job {child.id})" in names
        usage = page.locator("table.run-table tr[data-kind=model] td:nth-child(3)").first
        expect(usage).to_contain_text("input_tokens")
        figures = page.locator(".run-totals .figure")
        expect(figures.filter(has_text="model steps")).to_contain_text("2")
        expect(figures.filter(has_text="tool calls")).to_contain_text("1")
        assert SECRET not in page.content()
        page.screenshot(path=str(artifacts / "run-page.png"), full_page=True)
        page.locator(f'svg.run-steps a[href="/jobs/{child.id}"]').first.click()
        expect(page).to_have_url(f"{board['open']}/jobs/{child.id}")
        expect(page.locator("svg.ownership g.lane")).to_have_count(1)
    finally:
        page.close()
