"""Observability: the event journal, Prometheus metrics, `tenure doctor` and the dashboard.

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
    _pages      the dashboard's HTML
    _explorer   the dashboard's job explorer (/jobs): filters, pages, bulk results
    _picture    a job's ownership picture: each claim a bar on one time axis (SVG)
    _pipeline_graph  a pipeline run drawn as its graph, with each stage's rounds (SVG)
    _run_page   a durable run's page (/runs): its steps and its tools' jobs on one time
                axis (SVG), model usage, totals
    _dashboard  the dashboard's routes, sessions and CSRF
    _workers_page  the dashboard's workers page: alive, silent, stopped, leases held
    _queues_page   the dashboard's queues page: per tool and minute, in and out (SVG)
    _otel       the tracing interceptor (tenure._intercept): spans on OpenTelemetry,
                loaded only by tenure.otel
"""
