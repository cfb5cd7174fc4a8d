"""Writes tenure.json, the Grafana dashboard over tenure's metrics, next to this file.

The dashboard is generated rather than edited in Grafana's JSON by hand: thirty panels
share their data source, tool filter and layout, and a test compares tenure.json with
what this script builds (and every query in it with what a real worker exposes), so edit
here and run ``python3 deploy/grafana/build.py``.

Conventions of the queries: the database gauges (queue, running, waiting) are read by
every tenure process on scrape, so they are combined across instances with max/min by
tool, never summed; counters are per process and are summed. Receivers' fence metrics
have no tool label and ignore the tool filter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("tenure.json")
SCHEMA_VERSION = 41  # Grafana 12.0 and later (a newer Grafana upgrades it on import)
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
TOOL = 'tool=~"$tool"'
RATE = "[$__rate_interval]"

Panel = dict[str, Any]


def target(expr: str, legend: str, ref: str = "A", **extra: Any) -> dict[str, Any]:
    return {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend,
        "range": True,
        "refId": ref,
        **extra,
    }


def targets(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    """(expr, legend) pairs as targets A, B, C..."""
    return [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(pairs)]


def timeseries(
    title: str,
    description: str,
    queries: list[dict[str, Any]],
    *,
    unit: str = "short",
    minimum: float | None = 0,
    thresholds: list[tuple[float, str]] | None = None,
    stack: bool = False,
) -> Panel:
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    steps += [{"color": color, "value": value} for value, color in thresholds or []]
    custom: dict[str, Any] = {
        "drawStyle": "line",
        "lineWidth": 1,
        "fillOpacity": 10,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"group": "A", "mode": "normal" if stack else "none"},
        "thresholdsStyle": {"mode": "line" if thresholds else "off"},
    }
    defaults: dict[str, Any] = {
        "unit": unit,
        "custom": custom,
        "thresholds": {"mode": "absolute", "steps": steps},
    }
    if minimum is not None:
        defaults["min"] = minimum
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": queries,
    }


def stat(
    title: str,
    description: str,
    expr: str,
    *,
    unit: str = "short",
    thresholds: list[tuple[float, str]] | None = None,
    mappings: list[dict[str, Any]] | None = None,
    base: str = "green",
) -> Panel:
    steps: list[dict[str, Any]] = [{"color": base, "value": None}]
    steps += [{"color": color, "value": value} for value, color in thresholds or []]
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "mappings": mappings or [],
                "thresholds": {"mode": "absolute", "steps": steps},
            },
            "overrides": [],
        },
        "options": {
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "auto",
        },
        "targets": [target(expr, "", instant=False)],
    }


def heatmap(title: str, description: str, expr: str) -> Panel:
    return {
        "type": "heatmap",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {
            "calculate": False,
            "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
            "yAxis": {"unit": "s"},
            "tooltip": {"mode": "single", "yHistogram": True},
            "legend": {"show": True},
        },
        "targets": [target(expr, "{{le}}", format="heatmap")],
    }


def matching(metric: str, selector: str) -> str:
    return f"{metric}{{{selector}}}" if selector else metric


def per_second(counter: str, by: str, selector: str = TOOL) -> str:
    """Events per second from a per-process counter, summed over processes."""
    return f"sum by ({by}) (rate({matching(counter, selector)}{RATE}))"


def per_minute(counter: str, by: str, selector: str = TOOL) -> str:
    """Rare events (reclaims, losses) read better per minute."""
    return f"60 * {per_second(counter, by, selector)}"


def quantile(q: float, histogram: str, by: str, selector: str = TOOL) -> str:
    inner = f"rate({matching(histogram + '_bucket', selector)}{RATE})"
    return f"histogram_quantile({q}, sum by ({by}) ({inner}))"


def gauge(name: str, combine: str = "max") -> str:
    """A database gauge by tool: the same number from every instance, so max (or min)."""
    return f"{combine} by (tool) ({name}{{{TOOL}}})"


def by_tool(title: str, description: str, name: str, combine: str = "max", **options: Any) -> Panel:
    """A database gauge over time, one line per tool."""
    return timeseries(title, description, targets((gauge(name, combine), "{{tool}}")), **options)


def time_left(title: str, description: str, name: str) -> Panel:
    """Seconds until something runs out, per tool (the least of them): red below zero."""
    return by_tool(
        title, description, name, "min", unit="s", minimum=None, thresholds=[(0.0, "red")]
    )


def rows() -> list[tuple[str, list[tuple[Panel, int, int]]]]:
    """(row title, [(panel, width, height)]) in order; panels flow left to right."""
    backlog = [(300.0, "orange"), (1800.0, "red")]  # the TenureQueueBacklog thresholds
    succeeded = f'{TOOL}, outcome="succeeded"'
    now = [
        stat(
            "Database",
            "Whether every tenure process could read the database at its last scrape "
            "(tenure_database_up). DOWN: see the TenureDatabaseDown alert.",
            "min(tenure_database_up)",
            mappings=[
                {
                    "type": "value",
                    "options": {
                        "0": {"text": "DOWN", "color": "red", "index": 0},
                        "1": {"text": "up", "color": "green", "index": 1},
                    },
                }
            ],
            thresholds=[(1, "green")],
            base="red",
        ),
        stat(
            "Live workers",
            "Worker processes Prometheus scrapes that run at least one selected tool.",
            f"count(group by (instance) (tenure_jobs_claimed_total{{{TOOL}}}))",
            thresholds=[(1, "green")],
            base="red",
        ),
        stat(
            "Queued",
            "Jobs queued, due or not, for the selected tools.",
            f"sum({gauge('tenure_queue_depth')})",
        ),
        stat(
            "Oldest queued",
            "How long the oldest due job has waited to be claimed.",
            f"max(tenure_queue_oldest_age_seconds{{{TOOL}}})",
            unit="s",
            thresholds=backlog,
        ),
        stat(
            "Held leases",
            "Running jobs: each holds a lease that its worker's heartbeats extend.",
            f"sum({gauge('tenure_running_jobs')})",
        ),
        stat(
            "Waiting",
            "Jobs waiting at a waitpoint for an answer: no lease, no slot.",
            f"sum({gauge('tenure_waiting_jobs')})",
        ),
    ]
    throughput = [
        timeseries(
            "Claims per second",
            "Jobs claimed by all workers, per tool (reclaims included).",
            targets((per_second("tenure_jobs_claimed_total", "tool"), "{{tool}}")),
            unit="ops",
        ),
        timeseries(
            "Call outcomes per second",
            "What tool calls ended as: succeeded, failed, queued (a retry), waiting (suspended "
            "at a waitpoint), abandoned (stopped without a commit: lease lost, cancelled).",
            targets(
                (
                    per_second("tenure_tool_duration_seconds_count", "tool, outcome"),
                    "{{tool}} {{outcome}}",
                )
            ),
            unit="ops",
            stack=True,
        ),
        timeseries(
            "Call duration (succeeded)",
            "How long successful tool calls ran: median and 95th percentile per tool.",
            targets(
                *(
                    (quantile(q, "tenure_tool_duration_seconds", "tool, le", succeeded), legend)
                    for q, legend in ((0.5, "{{tool}} p50"), (0.95, "{{tool}} p95"))
                )
            ),
            unit="s",
        ),
    ]
    queue = [
        by_tool(
            "Queue depth",
            "Queued jobs per tool (read from the database on scrape; at most 100,000 rows "
            "are read, see tenure_queue_depth_capped).",
            "tenure_queue_depth",
        ),
        by_tool(
            "Oldest queued job",
            "Age of the oldest due job per tool. Lines: the TenureQueueBacklog warning "
            "(5 min) and critical (30 min) thresholds.",
            "tenure_queue_oldest_age_seconds",
            unit="s",
            thresholds=backlog,
        ),
        timeseries(
            "Live workers per tool",
            "Worker processes running each tool. Zero while jobs are queued: "
            "TenureNoWorkerForTool.",
            targets((f"count by (tool) (tenure_jobs_claimed_total{{{TOOL}}})", "{{tool}}")),
        ),
    ]
    leases = [
        by_tool(
            "Held leases",
            "Running jobs per tool.",
            "tenure_running_jobs",
        ),
        time_left(
            "Least lease left",
            "The running job closest to losing its lease, per tool (database clock). Below "
            "zero: expired and not yet reclaimed (TenureLeasesExpiredUnclaimed past a minute).",
            "tenure_running_lease_remaining_min_seconds",
        ),
        by_tool(
            "Oldest heartbeat",
            "The longest time since a running job's lease was last confirmed, per tool.",
            "tenure_running_heartbeat_age_max_seconds",
            unit="s",
        ),
        timeseries(
            "Heartbeat gaps and lease margin",
            "From every confirmed extension: the 99th percentile of the time since the "
            "previous one, and the 1st percentile of the lease left when a heartbeat was sent "
            "(how close leases came to running out).",
            targets(
                (quantile(0.99, "tenure_heartbeat_age_seconds", "tool, le"), "{{tool}} gap p99"),
                (
                    quantile(0.01, "tenure_lease_remaining_seconds", "tool, le"),
                    "{{tool}} lease left p1",
                ),
            ),
            unit="s",
        ),
    ]
    trouble = [
        timeseries(
            "Reclaims and expired leases per minute",
            "Claims that took a job over from an expired lease (its owner died or stalled), "
            "and the expired leases found doing so. TenureReclaims.",
            targets(
                (per_minute("tenure_jobs_reclaimed_total", "tool"), "{{tool}} reclaimed"),
                (per_minute("tenure_leases_expired_total", "tool"), "{{tool}} expired"),
            ),
        ),
        timeseries(
            "Lost heartbeats per minute",
            "Leases that could not be extended, by reason: zero_rows, deadline_passed, "
            "executor_unobservable, db_error. TenureHeartbeatFailures.",
            targets(
                (
                    per_minute("tenure_heartbeat_failures_total", "tool, reason"),
                    "{{tool}} {{reason}}",
                )
            ),
        ),
        timeseries(
            "Rejected results per minute",
            "Fenced commits that matched zero rows: a stale owner's result, never "
            "published. TenureResultsRejected.",
            targets((per_minute("tenure_results_rejected_total", "tool"), "{{tool}}")),
        ),
        timeseries(
            "Fenced requests and stale fences",
            "Side-effect requests tools sent with a fencing token (per tool), and what "
            "receivers with FenceObserver decided: stale = refused because a newer token "
            "was already accepted (receivers have no tool label).",
            targets(
                (per_minute("tenure_tool_requests_total", "tool"), "{{tool}} sent"),
                (
                    per_minute("tenure_fence_decisions_total", "outcome", ""),
                    "receivers {{outcome}}",
                ),
                (
                    per_minute("tenure_stale_fences_rejected_total", "job", ""),
                    "receivers ({{job}}) stale rejected",
                ),
            ),
        ),
    ]
    commits = [
        timeseries(
            "Commit latency",
            "How long fenced commit statements took to answer (a batch of outcomes, any "
            "tools). A commit slower than the lease left is refused. TenureCommitsSlow.",
            targets(
                *(
                    (quantile(q, "tenure_commit_duration_seconds", "le", ""), f"p{label}")
                    for q, label in ((0.5, "50"), (0.95, "95"), (0.99, "99"))
                )
            ),
            unit="s",
        ),
        heatmap(
            "Commit latency distribution",
            "Fenced commit statements per latency bucket.",
            f"sum by (le) (increase(tenure_commit_duration_seconds_bucket{RATE}))",
        ),
        timeseries(
            "Database reads on scrape",
            "Per tenure process: whether its scrape could read the database (1) and how "
            "long that took (a scrape gives up after 5 s).",
            targets(
                ("min by (instance) (tenure_database_up)", "{{instance}} up"),
                ("max by (instance) (tenure_database_scrape_seconds)", "{{instance}} seconds"),
            ),
        ),
    ]
    waits = [
        by_tool(
            "Waiting jobs",
            "Jobs waiting at an open waitpoint, per tool.",
            "tenure_waiting_jobs",
        ),
        by_tool(
            "Oldest wait",
            "How long the oldest open waitpoint has waited, per tool. TenureWaitingTooLong "
            "past a week.",
            "tenure_waitpoint_oldest_age_seconds",
            unit="s",
        ),
        time_left(
            "Soonest waitpoint deadline",
            "Time left before the soonest open waitpoint deadline, per tool; below zero the "
            "rescuer has not handled it yet (TenureWaitpointDeadlinePassed past 5 min).",
            "tenure_waitpoint_deadline_min_seconds",
        ),
    ]
    return [
        ("Now", [(p, 4, 4) for p in now]),
        ("Throughput and outcomes", [(p, 8, 8) for p in throughput]),
        ("Queue", [(p, 8, 8) for p in queue]),
        ("Leases and heartbeats", [(p, 6, 8) for p in leases]),
        ("Ownership trouble", [(p, 6, 8) for p in trouble]),
        ("Fenced commits and the database", [(p, 8, 8) for p in commits]),
        ("Waitpoints", [(p, 8, 8) for p in waits]),
    ]


def panels() -> list[Panel]:
    """Rows and their panels with ids and grid positions, top to bottom."""
    laid: list[Panel] = []
    y = 0
    for title, members in rows():
        laid.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        x = 0
        height = 0
        for panel, width, tall in members:
            if x + width > 24:
                x, y = 0, y + height
            laid.append({**panel, "gridPos": {"h": tall, "w": width, "x": x, "y": y}})
            x += width
            height = max(height, tall)
        y += height
    return [{"id": i, **panel} for i, panel in enumerate(laid, start=1)]


def dashboard() -> dict[str, Any]:
    tool_query = "label_values(tenure_queue_depth, tool)"
    return {
        "__inputs": [
            {
                "name": "DS_PROMETHEUS",
                "label": "Prometheus",
                "description": "The Prometheus that scrapes tenure's workers (and receivers)",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "12.0.0"},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
            {"type": "panel", "id": "heatmap", "name": "Heatmap", "version": ""},
            {"type": "panel", "id": "stat", "name": "Stat", "version": ""},
            {"type": "panel", "id": "timeseries", "name": "Time series", "version": ""},
        ],
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": "tenure: long tool calls under leases on PostgreSQL. Throughput, the "
        "queue, held leases, ownership trouble (reclaims, lost heartbeats, rejected results, "
        "stale fences), fenced commit latency and waitpoints. Alerts: "
        "deploy/prometheus/tenure.rules.yml.",
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [],
        "panels": panels(),
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["tenure"],
        "templating": {
            "list": [
                {
                    "name": "DS_PROMETHEUS",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "includeAll": False,
                    "multi": False,
                    "options": [],
                    "refresh": 1,
                    "regex": "",
                },
                {
                    "name": "tool",
                    "label": "Tool",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "definition": tool_query,
                    "query": {
                        "qryType": 1,
                        "query": tool_query,
                        "refId": "PrometheusVariableQueryEditor-VariableQuery",
                    },
                    "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                    "hide": 0,
                    "includeAll": True,
                    "allValue": ".*",
                    "multi": True,
                    "options": [],
                    "refresh": 2,
                    "regex": "",
                    "sort": 1,
                },
            ]
        },
        "time": {"from": "now-3h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "title": "tenure",
        "uid": "tenure-overview",
        "version": 1,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}")
