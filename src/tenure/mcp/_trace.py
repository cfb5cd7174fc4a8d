"""A client's trace context is not trusted by default.

An MCP client may send W3C trace context in a request's ``_meta`` (``traceparent``,
``tracestate``). Continued as is, it would make the client's trace the parent of the
job's: the ids it chose travel with the job, into its worker's spans and, on every fenced
request, to the receivers inside the operator's network. So `UntrustedTraceContext`, the
first of the server's middleware, takes them out of the request and runs it in a trace
of its own whose root span (``mcp.request``) *links* the client's span, when it named a
valid one: the two traces stay connected for whoever reads them, and the client decides
nothing about tenure's. ``server(app, trust_trace_context=True)`` (``tenure mcp
--trust-trace-context``) leaves the middleware out, for a client inside the same trust
boundary: the SDK's own middleware then continues the client's trace.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mcp.server.context import CallNext, HandlerResult
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract

from ._wire import Ctx

CARRIED = ("traceparent", "tracestate", "baggage")  # the W3C carrier's keys, in _meta
SPAN = "mcp.request"

_tracer = trace.get_tracer("tenure.mcp")


class UntrustedTraceContext:
    """Server middleware: the request without its client's trace context, in a new trace
    linked to it (see the module docstring)."""

    async def __call__(self, ctx: Ctx, call_next: CallNext) -> HandlerResult:
        meta = ctx.meta
        if not meta or not any(key in meta for key in CARRIED):
            return await call_next(ctx)
        carrier = {k: v for k, v in meta.items() if k in CARRIED and isinstance(v, str)}
        kept: dict[str, Any] = {k: v for k, v in meta.items() if k not in CARRIED}
        params = dict(ctx.params or {})
        if isinstance(params.get("_meta"), dict):
            params["_meta"] = kept
        stripped = replace(ctx, meta=kept or None, params=params)  # type: ignore[arg-type]
        try:
            client = trace.get_current_span(extract(carrier)).get_span_context()
        except (ValueError, TypeError):  # a carrier no propagator can read
            client = None
        links = [trace.Link(client)] if client is not None and client.is_valid else []
        with _tracer.start_as_current_span(
            SPAN,
            context=otel_context.Context(),  # a root: a trace of its own
            links=links,
            attributes={"tenure.trace_context.linked": bool(links)},
        ):
            return await call_next(stripped)
