"""Traced worker processes, and the tracing fixtures (tests/integration/otel/conftest.py):
this process traced in memory, a fenced receiver whose spans land in this process."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.apps.otel_app import build_app
from tests.integration.otel.conftest import receiver, tracing  # noqa: F401 - fixtures
from tests.integration.otel.spans import Seen, read_file
from tests.support.workers import Journal, WorkerGroup, WorkerProcess, wait_job

from tenure import App

APP = "tests.apps.otel_app:app"


class TracedWorkers(WorkerGroup):
    """``tenure worker tests.apps.otel_app:app`` processes, each tracing to its own file."""

    def spawn_traced(self, name: str) -> WorkerProcess:
        spans = self.log_dir / f"spans-{name}.jsonl"
        env = {"OTEL_TEST_SPANS": str(spans), "OTEL_TEST_SERVICE": f"worker-{name}"}
        worker = self.spawn(name, env=env)
        worker.wait_started()
        return worker

    def spans(self) -> list[Seen]:
        """Every span every worker exported so far."""
        return [s for path in sorted(self.log_dir.glob("spans-*.jsonl")) for s in read_file(path)]


@dataclass
class Stage:
    """Worker processes, a producer and the journal, on the test's schema."""

    workers: TracedWorkers
    producer: App
    journal: Journal

    def wait_state(self, job_id: int, state: str) -> dict[str, Any]:
        """The job's row once it is in ``state`` (the workers' logs if it never is)."""
        return wait_job(self.journal, job_id, lambda r: r["state"] == state, state, self.workers)


@pytest.fixture
def stage(tenure_dsn: str, tmp_path: Path) -> Iterator[Stage]:
    app = build_app(tenure_dsn)
    with TracedWorkers(tenure_dsn, tmp_path, app=APP) as workers:
        try:
            yield Stage(workers, app, Journal(tenure_dsn))
        finally:
            app.close()
