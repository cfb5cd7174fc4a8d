"""The dashboard's queues page: per tool, what came in and what came out, over time.

Per bucket of the window (a minute over the last hour, ten minutes over the last day):
jobs queued (enqueued, from the jobs' ``created_at``), started running (claims),
reclaimed (claims that took over an expired lease), succeeded and failed (from the
journal); beside them, the queue as it is now (queued, running, the age of the oldest
queued job that is due). Everything comes from data tenure keeps anyway, through indexed,
capped reads; the charts are inline SVG drawn here, refreshed by the page's poll.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .._errors import ConfigError
from .._store import Store
from ._pages import h, seconds

SERIES = ("queued", "running", "succeeded", "failed", "reclaimed")
TOOLS_SHOWN = 30
READ_CAP = 200_000  # rows read per source per refresh; `capped` says when it bit
SNAPSHOT_CAP = 100_000
TTL = 5.0  # seconds a window's figures are reused, however many pages poll
WIDTH = 360
HEIGHT = 90


@dataclass(frozen=True, slots=True)
class Window:
    name: str
    seconds: int
    bucket: int

    @property
    def label(self) -> str:
        return "minute" if self.bucket == 60 else f"{self.bucket // 60} minutes"


WINDOWS = {"1h": Window("1h", 3600, 60), "1d": Window("1d", 86400, 600)}


def window_of(value: str | None) -> Window:
    """``?window=``: 1h (the default) or 1d; anything else is a ConfigError."""
    window = WINDOWS.get(value or "1h")
    if window is None:
        raise ConfigError(f"window must be one of {', '.join(WINDOWS)}")
    return window


async def queue_data(store: Store, window: Window) -> dict[str, Any]:
    """The series per tool, the queue now, and the rendered fragment."""
    ms, bucket_ms = window.seconds * 1000, window.bucket * 1000
    flow = await store.queue_flow(ms, bucket_ms, READ_CAP)
    arrivals = await store.queue_arrivals(ms, bucket_ms, READ_CAP)
    depth = await store.queue_depth(SNAPSHOT_CAP)
    running = await store.running_summary(SNAPSHOT_CAP)
    now = await store.db_now()
    step = timedelta(seconds=window.bucket)
    last = _floor(now, window.bucket)
    buckets = [last - step * i for i in range(window.seconds // window.bucket - 1, -1, -1)]
    index = {b: i for i, b in enumerate(buckets)}
    tools: dict[str, dict[str, Any]] = {}

    def tool(name: str | None) -> dict[str, Any]:
        key = name or "-"
        if key not in tools:
            tools[key] = {
                "tool": key,
                "queued_now": 0,
                "running_now": 0,
                "oldest_queued_age": None,
                "series": {s: [0] * len(buckets) for s in SERIES},
            }
        return tools[key]

    for row in arrivals:
        slot = index.get(row["bucket"])
        if slot is not None:
            tool(row["tool"])["series"]["queued"][slot] += row["queued"]
    for flow_row in flow:
        slot = index.get(flow_row["bucket"])
        if slot is not None:
            series = tool(flow_row["tool"])["series"]
            for name in ("running", "succeeded", "failed", "reclaimed"):
                series[name][slot] += flow_row[name]
    for d in depth:
        entry = tool(d["tool"])
        entry["queued_now"] = d["depth"]
        entry["oldest_queued_age"] = d["oldest_age"]
    for r in running:
        tool(r["tool"])["running_now"] = r["running"]
    shown = sorted(tools.values(), key=_weight, reverse=True)[:TOOLS_SHOWN]
    shown.sort(key=lambda t: t["tool"])
    data: dict[str, Any] = {
        "window": window.name,
        "bucket_seconds": window.bucket,
        "buckets": [b.isoformat() for b in buckets],
        "db_now": now.isoformat(),
        "capped": any(r["capped"] for r in flow) or any(r["capped"] for r in arrivals),
        "queue_capped": any(d["capped"] for d in depth),
        "tools": shown,
    }
    data["fragments"] = {"queues": queues_fragment(data, window)}
    return data


def _floor(moment: datetime, bucket: int) -> datetime:
    """The start of ``moment``'s bucket, aligned as the statements align it (2000-01-01 UTC)."""
    origin = datetime(2000, 1, 1, tzinfo=UTC)
    offset = (moment - origin).total_seconds()
    return origin + timedelta(seconds=offset - offset % bucket)


def _weight(entry: Mapping[str, Any]) -> int:
    return (
        int(entry["queued_now"])
        + int(entry["running_now"])
        + sum(sum(values) for values in entry["series"].values())
    )


class QueueCharts:
    """Each window's figures, read at most every TTL seconds whoever polls."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = asyncio.Lock()

    async def read(self, store: Store, window: Window) -> dict[str, Any]:
        async with self._lock:
            at, data = self._cache.get(window.name, (0.0, {}))
            if time.monotonic() - at > TTL:
                data = await queue_data(store, window)
                self._cache[window.name] = (time.monotonic(), data)
            return data


def queues_fragment(data: Mapping[str, Any], window: Window) -> str:
    if not data["tools"]:
        return f'<p class="empty">no jobs in the last {h(window.name)}</p>'
    notes = []
    if data["capped"]:
        notes.append(f"more than {READ_CAP:,} rows in the window: the oldest buckets are short")
    if data["queue_capped"]:
        notes.append(f"{SNAPSHOT_CAP:,}+ jobs queued: the counts are lower bounds")
    note = "".join(f'<p class="hint capped">{h(n)}</p>' for n in notes)
    return note + "".join(_card(t, window) for t in data["tools"])


def _card(entry: Mapping[str, Any], window: Window) -> str:
    series: Mapping[str, Sequence[int]] = entry["series"]
    totals = " · ".join(
        f'<span class="series-{s}" data-series="{s}">{sum(series[s])} {s}</span>' for s in SERIES
    )
    oldest = entry["oldest_queued_age"]
    return (
        f'<figure class="queue" data-tool="{h(entry["tool"])}">'
        f"<figcaption><b>{h(entry['tool'])}</b> now: "
        f'<span class="queued-now">{entry["queued_now"]}</span> queued · '
        f'<span class="running-now">{entry["running_now"]}</span> running · oldest queued '
        f'<span class="oldest">{seconds(oldest)}</span></figcaption>'
        f"{_svg(entry['tool'], series, window)}"
        f'<div class="totals">per {h(window.label)}, last {h(window.name)}: {totals}</div>'
        "</figure>"
    )


def _svg(tool: str, series: Mapping[str, Sequence[int]], window: Window) -> str:
    """One polyline per series on a shared scale; the peak is labelled, time runs left to
    right and ends now."""
    slots = len(series["queued"])
    peak = max(1, *(max(values, default=0) for values in series.values()))
    dx = WIDTH / max(1, slots - 1)
    lines = []
    for name in SERIES:
        points = " ".join(
            f"{i * dx:.1f},{HEIGHT - 2 - v / peak * (HEIGHT - 14):.1f}"
            for i, v in enumerate(series[name])
        )
        lines.append(f'<polyline class="line-{name}" points="{points}"></polyline>')
    return (
        f'<svg class="queue-chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" role="img" aria-label="{h(tool)} per {h(window.label)}">'
        f'<text class="peak" x="2" y="10">{peak}</text>'
        f'<text class="axis" x="{WIDTH - 2}" y="10" text-anchor="end">now</text>'
        f"{''.join(lines)}</svg>"
    )


def queues_body(fragment: str, window: Window) -> str:
    links = " ".join(
        f'<a href="/queues?window={name}"'
        + (' class="current" aria-current="page"' if name == window.name else "")
        + f">last {name}</a>"
        for name in WINDOWS
    )
    legend = " ".join(f'<span class="key series-{s}">{s}</span>' for s in SERIES)
    return (
        f'<section><h2>Queues over time</h2><p class="windows">{links}</p>'
        f'<p class="hint">per tool and {h(window.label)}: jobs queued (enqueued), started '
        "running, reclaimed from an expired lease, succeeded and failed; and the queue as it "
        f"is now. {legend}</p>"
        f'<div id="queues">{fragment}</div></section>'
    )
