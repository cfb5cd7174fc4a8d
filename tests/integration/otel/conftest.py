"""Fixtures of the tracing tests: this process traced in memory, and a fenced receiver whose
spans land in this process (traced worker processes: tests/system/otel/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from opentelemetry.trace import Tracer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from tests.integration.fence.helpers import serve
from tests.integration.otel.spans import Traced, traced
from tests.support.schemas import fresh_schema_dsn

from tenure.fence import FenceGuard, FenceMiddleware, migrate_fence


@pytest.fixture
def tracing() -> Iterator[Traced]:
    """tenure instrumented in this process, on an in-memory exporter."""
    with traced() as tracing:
        yield tracing


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
