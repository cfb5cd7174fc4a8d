# ruff: noqa: E402
"""A client's trace context is not trusted by default: an MCP call that names a trace
(``_meta.traceparent``) gets a trace of its own, linking the client's, so the job (and
every fenced request it sends) never carries ids the client chose; ``trust_trace_context``
continues it instead."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from tests.system.adapters.mcp.sdk import needs_sdk

needs_sdk()  # before the SDK's imports below, hence E402

import psycopg
from mcp_types import RequestParamsMeta
from tests.apps.mcp_app import build_app
from tests.integration.otel.spans import Traced
from tests.support.workers import aclosing_app
from tests.system.adapters.mcp.helpers import memory_client, task_call

import tenure.mcp._trace
from tenure import App
from tenure.mcp import server

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
CLIENT = {"traceparent": f"00-{TRACE_ID}-{SPAN_ID}-01", "tracestate": "client=chosen"}


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[App]:
    async for built in aclosing_app(build_app(tenure_dsn)):
        yield built


def carried(dsn: str) -> dict[str, Any]:
    """The trace context the job's row keeps (what its worker and receivers continue)."""
    with psycopg.connect(dsn) as conn:
        [(context,)] = conn.execute("SELECT trace_context FROM tenure_jobs").fetchall()
    assert isinstance(context, dict)
    return context


@pytest.mark.parametrize("trusted", [False, True], ids=["default", "trusted"])
async def test_a_clients_trace_context_is_linked_not_continued_unless_trusted(
    app: App, tenure_dsn: str, tracing: Traced, monkeypatch: pytest.MonkeyPatch, trusted: bool
) -> None:
    monkeypatch.setattr(tenure.mcp._trace, "_tracer", tracing.provider.get_tracer("tenure.mcp"))
    meta = cast(RequestParamsMeta, dict(CLIENT))
    async with memory_client(server(app, trust_trace_context=trusted), "legacy") as client:
        await task_call(client, "echo", {"text": "traced"}, meta)
    context = carried(tenure_dsn)
    [enqueue] = [s for s in tracing.exporter.get_finished_spans() if s.name == "tenure.enqueue"]
    assert enqueue.context is not None
    if trusted:  # the client's trace, continued
        assert context["traceparent"].split("-")[1] == TRACE_ID
        return
    assert TRACE_ID not in str(context) and "client=chosen" not in str(context), context
    assert f"{enqueue.context.trace_id:032x}" != TRACE_ID
    [root] = [s for s in tracing.exporter.get_finished_spans() if s.name == "mcp.request"]
    assert root.parent is None and root.context is not None
    assert root.context.trace_id == enqueue.context.trace_id  # the job's trace is ours
    [link] = root.links
    assert (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") == (TRACE_ID, SPAN_ID)
