"""A real headless Chromium (Debian's package) driven by Playwright, plus the observe fixtures.

Nothing is downloaded: Playwright drives /usr/bin/chromium through
``executable_path``. The tests are skipped, with the reason, only when that
browser is missing or cannot start.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

# The observability tests' fixtures: workers of the observe app, a producer, the journal.
from tests.integration.observe.conftest import journal, ops  # noqa: F401
from tests.support.workers import Journal, WorkerGroup
from tests.system.observe.conftest import workers  # noqa: F401

from tenure import App
from tenure._dashboard._dashboard import create_dashboard
from tenure._observe._http import ServerThread

CHROMIUM = "/usr/bin/chromium"
REBIND_HOST = "rebind.test"  # an attacker's name that resolves to 127.0.0.1
ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    f"--host-resolver-rules=MAP {REBIND_HOST} 127.0.0.1",  # DNS rebinding, without a DNS server
]
ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts"
TOKEN = "browser-test-token-0123456789"
POLL = 0.3


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)")
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        except Error as exc:
            pytest.skip(f"chromium cannot start here: {str(exc).splitlines()[0]}")
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def artifacts() -> Path:
    """Where screenshots go (gitignored): kept after the run for a human to look at."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def board(tenure_dsn: str) -> Iterator[dict[str, str]]:
    """Two dashboards on one database: read-only ("open"), and with an access token
    ("locked"); their base URLs."""
    servers = {
        "open": ServerThread(create_dashboard(tenure_dsn, poll_interval=POLL), "127.0.0.1", 0),
        "locked": ServerThread(
            create_dashboard(tenure_dsn, access_token=TOKEN, poll_interval=POLL), "127.0.0.1", 0
        ),
    }
    try:
        yield {name: server.start() for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()


class Scene(NamedTuple):
    """Everything an ownership-picture test drives: the browser, real workers, a producer,
    the journal, the dashboards and where screenshots go."""

    browser: Any
    workers: WorkerGroup
    ops: App
    journal: Journal
    board: dict[str, str]
    artifacts: Path


@pytest.fixture
def scene(
    request: pytest.FixtureRequest, browser: Any, board: dict[str, str], artifacts: Path
) -> Scene:
    """The fixtures a test with workers and a browser needs, in one (named as in conftest
    of tests/observe, whose fixtures this module imports under those names)."""
    return Scene(
        browser,
        request.getfixturevalue("workers"),
        request.getfixturevalue("ops"),
        request.getfixturevalue("journal"),
        board,
        artifacts,
    )
