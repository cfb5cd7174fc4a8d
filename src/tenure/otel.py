"""OpenTelemetry traces for tenure: ``pip install 'tenure[otel]'``, then `instrument()`.

One trace per job, across processes: the producer's span is stored in the job's row at
enqueue, every attempt's claim, tool call and fenced commit continue it on whichever
worker runs it, and `FencedAuth` sends ``traceparent`` with the fence headers, so the
receiver's `FenceMiddleware` serves the request in a span of the same trace::

    tenure.enqueue                     producer  (a child of the producer's current span)
    └── tenure.claim                   worker    one per attempt: token, attempt, worker
        ├── tenure.call                worker    the tool call; the tool's own spans nest here
        │   ├── tenure.fence           receiver  the fence's verdict (accepted, stale, ...)
        │   └── tenure.heartbeat_lost  worker    the lease was lost: reason
        └── tenure.commit              worker    the fenced commit: accepted or rejected

Spans carry ids, tokens, attempts, tools, workers, outcomes and codes — what tenure's
journal carries — and never a payload, a result or an error message.

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())   # and your exporter
    tenure.otel.instrument()

`instrument` covers the whole process — every App's enqueues, every worker, every
FencedAuth and FenceMiddleware in it — on the global tracer provider unless given one:
the tracer is an interceptor (`tenure.telemetry.Interceptor`) that `instrument` adds to
the process's own, at the end of every chain. Without it tenure never imports
OpenTelemetry and pays nothing for it.
"""

try:
    from ._observe._otel import instrument, is_instrumented, uninstrument
except ModuleNotFoundError as missing:  # the extra is not installed
    if not (missing.name or "").startswith("opentelemetry"):
        raise
    raise ImportError("tenure.otel needs OpenTelemetry's API: pip install 'tenure[otel]'") from None

__all__ = ["instrument", "is_instrumented", "uninstrument"]
