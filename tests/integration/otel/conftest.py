"""Fixtures of the tracing tests: this process traced in memory, traced worker processes, a
fenced receiver whose spans land in this process, and producers on the test's schema."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import Tracer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from tests.apps.otel_app import build_app
from tests.integration.fence.helpers import serve
from tests.integration.otel.spans import Seen, Traced, read_file, traced
from tests.support.schemas import fresh_schema_dsn
from tests.support.workers import Journal, WorkerGroup, WorkerProcess, wait_job

from tenure import App
from tenure.fence import FenceGuard, FenceMiddleware, migrate_fence

APP = "tests.apps.otel_app:app"


@pytest.fixture
def tracing() -> Iterator[Traced]:
    """tenure instrumented in this process, on an in-memory exporter."""
    with traced() as tracing:
        yield tracing


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


def receiver_app(dsn: str, tracer: Tracer) -> Starlette:
    """A receiver of fenced requests: POST /cases answers 201 inside a span of its own."""
    migrate_fence(dsn)
    guard = FenceGuard(dsn, insecure=True)  # on loopback, for the test only

    async def cases(request: Request) -> JSONResponse:
        with tracer.start_as_current_span("receiver.create_case"):
            await request.body()
            return JSONResponse({"case_id": 1}, status_code=201)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with guard:
            yield

    app = Starlette(routes=[Route("/cases", cases, methods=["POST"])], lifespan=lifespan)
    app.add_middleware(FenceMiddleware, guard=guard)
    return app


@pytest.fixture
def receiver(database_dsn: str, tracing: Traced) -> Iterator[str]:
    """The receiver on a loopback port of this process, on a schema of its own; its URL."""
    app = receiver_app(fresh_schema_dsn(database_dsn, "r"), tracing.tracer)
    with serve(app) as url:
        yield url
