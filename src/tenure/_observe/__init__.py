"""Observability: the event journal, Prometheus metrics and `tenure doctor`.

Modules are imported where they are used, so that importing tenure does not
import prometheus-client or Starlette. Events enter through ``tenure._log.log_event``;
users see them through ``tenure.telemetry`` (``attach``, the catalogue `_events.EVENTS`).

    _events     the catalogue of event kinds (docs/reference/events.md's table)
    _journal    keyed payload hashes; the batched writer for observed events
    _metrics    event-fed counters and histograms; gauges read from the database
    _http       /metrics, the loopback rule, uvicorn on a thread
    _runtime    what a worker starts for observability: the writer, the journal pruner
                (tenure._maintenance._journal_pruner) and /metrics
    _doctor     `tenure doctor`'s checks
    _otel       the tracing interceptor (tenure._intercept): spans on OpenTelemetry,
                loaded only by tenure.otel
"""
