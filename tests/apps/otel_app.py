"""The tools of the tracing tests, and a worker process's OpenTelemetry set-up.

A worker process (``tenure worker tests.apps.otel_app:app``) given ``OTEL_TEST_SPANS``
traces through the SDK's in-memory exporter, which here also appends every finished
span to that file as one JSON line (one ``write`` on an O_APPEND descriptor), so the
test process reads the worker's spans while the worker runs — and after a SIGKILL.
Its resource names it (``service.name`` = ``OTEL_TEST_SERVICE``), so a test can tell
which process made each span. A producer imports `build_app` only: nothing is set up.

Payloads, results and error messages carry marker strings that must never appear in
a span: `PAYLOAD_MARK` (callers put it in payloads), `RESULT_MARK`, `ERROR_MARK`.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Sequence
from typing import Any

import httpx
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tenure.otel
from tenure import App, Context, PermanentError

PAYLOAD_MARK = "payload-text-7c1e"
RESULT_MARK = "result-text-52ab"
ERROR_MARK = "error-text-e90d"
OPERATION = "file_case"


class SpanFile(InMemorySpanExporter):
    """The in-memory exporter, which also writes each span to a file as it finishes."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        lines = "".join(span.to_json(indent=None) + "\n" for span in spans).encode()
        with self._lock:
            os.write(self._fd, lines)
        return result


def trace_to_file(path: str, service: str) -> TracerProvider:
    """A provider exporting to `SpanFile`, with tenure instrumented on it."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(SpanFile(path)))
    tenure.otel.instrument(tracer_provider=provider)
    return provider


def build_app(dsn: str | None = None) -> App:
    """An App with the tracing tests' tools (``dsn`` None: ``TENURE_DSN``)."""
    app = App(dsn)
    tool = functools.partial(
        app.tool, lease=1.5, heartbeat=0.3, jitter=0.5, missed_beats=2, backoff=0.05
    )

    @tool()
    async def file_case(ctx: Context, receiver: str, title: str) -> dict[str, Any]:
        """POST the title to the receiver, fenced; the receiver's spans join the trace."""
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.post(
                receiver + "/cases", json={"title": title}, auth=ctx.http_auth(OPERATION)
            )
        return {"status": response.status_code, "memo": RESULT_MARK}

    @tool()
    async def hold(ctx: Context, note: str, seconds: float = 60.0) -> dict[str, Any]:
        """The first attempt says it is holding (its call is running), then waits (to be
        killed or stopped); the next ones return."""
        if ctx.attempt == 1:
            ctx.report_progress(0, message="holding")
            await asyncio.sleep(seconds)
        return {"attempt": ctx.attempt, "memo": RESULT_MARK}

    @tool()
    def refuse(ctx: Context, note: str) -> None:
        """Fail for good, with a message that must stay out of the trace."""
        raise PermanentError(f"{ERROR_MARK}: cannot take {note}")

    return app


if os.environ.get("OTEL_TEST_SPANS"):
    trace_to_file(os.environ["OTEL_TEST_SPANS"], os.environ.get("OTEL_TEST_SERVICE", "worker"))

app = build_app()
