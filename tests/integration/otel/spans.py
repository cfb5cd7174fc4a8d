"""Spans as the tracing tests read them, from any process: the SDK's JSON of each span.

The test process's own spans come from its in-memory exporter, a worker's from the
file its exporter appends to (``tests.apps.otel_app``); both are read through
``ReadableSpan.to_json``, so an assertion cannot tell them apart except by the
resource (``service.name``) that says which process made the span.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tenure.otel


@dataclass(frozen=True)
class Seen:
    """One finished span; ``text`` is all of it, to search for what must not be there."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    trace_state: str
    kind: str
    attributes: dict[str, Any]
    status: str
    description: str | None
    events: list[dict[str, Any]]
    service: str
    text: str

    @classmethod
    def parse(cls, text: str) -> Seen:
        raw = json.loads(text)
        status = raw.get("status") or {}
        return cls(
            name=raw["name"],
            trace_id=raw["context"]["trace_id"],
            span_id=raw["context"]["span_id"],
            parent_id=raw.get("parent_id"),
            trace_state=raw["context"].get("trace_state", "[]"),
            kind=raw["kind"].removeprefix("SpanKind."),
            attributes=dict(raw.get("attributes") or {}),
            status=status.get("status_code", "UNSET"),
            description=status.get("description"),
            events=list(raw.get("events") or []),
            service=(raw.get("resource") or {}).get("attributes", {}).get("service.name", ""),
            text=text,
        )

    @property
    def job(self) -> int | None:
        job = self.attributes.get("tenure.job.id")
        return None if job is None else int(job)


def read_file(path: Path) -> list[Seen]:
    if not path.exists():
        return []
    return [Seen.parse(line) for line in path.read_text().splitlines() if line.strip()]


class Traced:
    """This process's tracer provider, instrumented, with its in-memory exporter."""

    def __init__(self, service: str) -> None:
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self.exporter = InMemorySpanExporter()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")

    def spans(self) -> list[Seen]:
        return [Seen.parse(s.to_json(indent=None)) for s in self.exporter.get_finished_spans()]


@contextmanager
def traced(service: str = "test-process") -> Iterator[Traced]:
    """`tenure.otel.instrument` on a fresh provider for the block; uninstrumented after."""
    tracing = Traced(service)
    tenure.otel.instrument(tracer_provider=tracing.provider)
    try:
        yield tracing
    finally:
        tenure.otel.uninstrument()
        tracing.provider.shutdown()


def named(spans: Iterable[Seen], name: str, **attributes: object) -> list[Seen]:
    """The spans called ``name`` whose attributes include ``attributes``."""
    return [
        s
        for s in spans
        if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
    ]


def one(spans: Iterable[Seen], name: str, **attributes: object) -> Seen:
    found = named(spans, name, **attributes)
    assert len(found) == 1, f"{len(found)} spans {name} {attributes}: {[s.text for s in found]}"
    return found[0]


def leaks(spans: Iterable[Seen], *marks: str) -> list[str]:
    """Every span whose JSON holds one of ``marks`` (payload, result or error text)."""
    return [s.text for s in spans for mark in marks if mark in s.text]
