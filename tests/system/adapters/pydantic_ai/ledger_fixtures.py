"""The fixtures both adapters' tests use: the ledger's tools on a fresh schema, workers.

Each adapter's conftest imports them, and first checks its framework: without the
extra the tests skip with that reason; CI installs it (the ``test`` extra includes
it), so there a missing framework is an error, not a skip.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from tests.support.waiting import wait_until
from tests.support.workers import WorkerGroup
from tests.system.adapters.pydantic_ai.ledger_app import build_app, prepare

from tenure import App


def kill_when(proc: subprocess.Popen[bytes], ready: Callable[[], object], what: str) -> None:
    """SIGKILL ``proc`` once ``ready()`` holds (polled), and reap it; it is gone afterwards."""
    try:
        wait_until(ready, timeout=30, interval=0.02, message=what)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def require_in_ci(module: str, extra: str) -> None:
    if importlib.util.find_spec(module) is None and os.environ.get("CI"):
        raise RuntimeError(f"CI installs the {extra} extra ('.[test]' includes it); it is missing")


@pytest.fixture
def ledger(tenure_dsn: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """tenure's schema with the ledger's tables; ``LEDGER_DSN`` names it (for the tools)."""
    monkeypatch.setenv("LEDGER_DSN", tenure_dsn)
    prepare(tenure_dsn)
    return tenure_dsn


@pytest.fixture
async def app(ledger: str) -> AsyncIterator[App]:
    app = build_app(ledger)
    yield app
    await app.aclose()


@pytest.fixture
async def worker(app: App) -> AsyncIterator[None]:
    """An in-process worker for the ledger's tools."""
    worker = app.worker(poll_interval=0.05, grace=1.0)
    running = asyncio.create_task(worker.run(handle_signals=False))
    yield
    worker.stop()
    await running


@pytest.fixture
def workers(ledger: str, tmp_path: Path) -> Iterator[WorkerGroup]:
    """Worker processes of the ledger's tools; all gone after the test."""
    app = "tests.system.adapters.pydantic_ai.ledger_app:app"
    with WorkerGroup(ledger, tmp_path, app=app) as group:
        yield group
