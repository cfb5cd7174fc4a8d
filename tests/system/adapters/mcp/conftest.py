"""Fixtures of the MCP adapter's tests: real workers, a real receiver (no SDK needed here:
each test module skips itself, with the reason, where the ``mcp`` extra is missing)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tests.apps.mcp_app import build_app
from tests.support.workers import WorkerGroup, WorkerProcess, aclosing_app
from tests.system.e2e.conftest import receiver_dsn, receivers  # noqa: F401 - fixtures

from tenure import App

MCP_APP = "tests.apps.mcp_app:app"


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[App]:
    """The producer the in-process MCP server runs on: the test app on this test's schema."""
    async for built in aclosing_app(build_app(tenure_dsn)):
        yield built


@pytest.fixture
def workers(tenure_dsn: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    """``tenure worker tests.apps.mcp_app:app`` processes; all gone after the test."""
    with WorkerGroup(tenure_dsn, tmp_path, app=MCP_APP) as group:
        yield group


@pytest.fixture
def worker(workers: WorkerGroup) -> WorkerProcess:
    """One worker process, started (not waited for: the first call waits for it anyway)."""
    return workers.spawn("w1")
