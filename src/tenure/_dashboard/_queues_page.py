"""The dashboard's queues page: per tool, what came in and what came out, over time.

Per minute of the window (the last hour, or the last day: 1,440 minutes): jobs queued
(enqueued, from the jobs' ``created_at``), started running (claims), reclaimed (claims
that took over an expired lease), succeeded and failed (from the journal); beside them,
the queue as it is now (queued, running, the age of the oldest queued job that is due).
Everything comes from data tenure keeps anyway, counted by the server per tool and minute
over an indexed range (so a refresh gets at most tools x minutes rows, never raw rows);
the charts are inline SVG step lines drawn here, refreshed by the page's poll.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from .._errors import ConfigError
from ._pages import h, seconds

SERIES = ("queued", "running", "succeeded", "failed", "reclaimed")
TOOLS_SHOWN = 30  # the busiest; the page says when there were more
SNAPSHOT_CAP = 100_000
TTL = 5.0  # seconds a window's figures are reused, however many pages poll
WIDTH = 360
HEIGHT = 90
TOP = 12  # the peak label's band, above the plot
PLOT = 100  # the plot's own height, in its viewBox units


@dataclass(frozen=True, slots=True)
class Window:
    name: str
    seconds: int
    bucket: int

    @property
    def label(self) -> str:
        return "minute" if self.bucket == 60 else f"{self.bucket // 60} minutes"

    @property
    def buckets(self) -> int:
        return self.seconds // self.bucket


class QueueReads(Protocol):
    """What the queues page reads: the App's admin (`Admin`), or anything with its reads."""

    async def database_time(self) -> datetime: ...

    async def queue_flow(
        self, since: datetime, bucket_ms: int, tools: int
    ) -> Sequence[Mapping[str, Any]]: ...

    async def queue_arrivals(
        self, since: datetime, bucket_ms: int, tools: int
    ) -> Sequence[Mapping[str, Any]]: ...

    async def queue_depth(self, cap: int) -> Sequence[Mapping[str, Any]]: ...

    async def running_summary(self, cap: int) -> Sequence[Mapping[str, Any]]: ...


WINDOWS = {"1h": Window("1h", 3600, 60), "1d": Window("1d", 86400, 60)}


def window_of(value: str | None) -> Window:
    """``?window=``: 1h (the default) or 1d; anything else is a ConfigError."""
    window = WINDOWS.get(value or "1h")
    if window is None:
        raise ConfigError(f"window must be one of {', '.join(WINDOWS)}")
    return window


async def queue_data(reads: QueueReads, window: Window) -> dict[str, Any]:
    """The series per tool, the queue now, and the rendered fragment."""
    now = await reads.database_time()
    step = timedelta(seconds=window.bucket)
    last = _floor(now, window.bucket)
    buckets = [last - step * i for i in range(window.buckets - 1, -1, -1)]
    bucket_ms = window.bucket * 1000
    flow = await reads.queue_flow(buckets[0], bucket_ms, TOOLS_SHOWN)
    arrivals = await reads.queue_arrivals(buckets[0], bucket_ms, TOOLS_SHOWN)
    depth = await reads.queue_depth(SNAPSHOT_CAP)
    running = await reads.running_summary(SNAPSHOT_CAP)
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
    # Each statement counts every tool it saw but returns only its busiest TOOLS_SHOWN:
    # a lower bound of how many tools there were.
    seen = max([len(tools), *(r["tools"] for r in flow), *(r["tools"] for r in arrivals)])
    data: dict[str, Any] = {
        "window": window.name,
        "bucket_seconds": window.bucket,
        "buckets": [b.isoformat() for b in buckets],
        "db_now": now.isoformat(),
        "tools_seen": seen,
        "tools_cut": seen > len(shown),
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

    async def read(self, reads: QueueReads, window: Window) -> dict[str, Any]:
        async with self._lock:
            at, data = self._cache.get(window.name, (0.0, {}))
            if time.monotonic() - at > TTL:
                data = await queue_data(reads, window)
                self._cache[window.name] = (time.monotonic(), data)
            return data


def queues_fragment(data: Mapping[str, Any], window: Window) -> str:
    if not data["tools"]:
        return f'<p class="empty">no jobs in the last {h(window.name)}</p>'
    notes = []
    if data["tools_cut"]:
        notes.append(
            f"{data['tools_seen']:,}+ tools in the last {window.name}: "
            f"the {len(data['tools'])} busiest are shown"
        )
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
    """One step line per series on a shared scale, in a plot whose viewBox is one unit per
    minute (stretched to the chart's width, the strokes kept thin): a flat stretch is one
    segment, so a day's 1,440 quiet minutes cost a few bytes. The peak is labelled; time runs
    left to right and ends now."""
    slots = len(series["queued"])
    peak = max(1, *(max(values, default=0) for values in series.values()))
    paths = "".join(
        f'<path class="line-{name}" d="{step_path(series[name], peak)}"></path>' for name in SERIES
    )
    return (
        f'<svg class="queue-chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" role="img" aria-label="{h(tool)} per {h(window.label)}">'
        f'<text class="peak" x="2" y="10">{peak}</text>'
        f'<text class="axis" x="{WIDTH - 2}" y="10" text-anchor="end">now</text>'
        f'<svg class="plot" x="0" y="{TOP}" width="{WIDTH}" height="{HEIGHT - TOP - 2}" '
        f'viewBox="0 0 {slots} {PLOT}" preserveAspectRatio="none">{paths}</svg></svg>'
    )


def step_path(values: Sequence[int], peak: int) -> str:
    """``values`` as an SVG step line: minute i spans x in [i, i+1] at its value's height
    (0 at the bottom, ``peak`` at the top); each change of value is one ``V`` command."""

    def y(value: int) -> str:
        return f"{PLOT - value / peak * PLOT:.4g}"

    if not values:
        return ""
    parts = [f"M0,{y(values[0])}"]
    current, run = values[0], 0
    for value in values:
        if value != current:
            parts.append(f"h{run}V{y(value)}")
            current, run = value, 0
        run += 1
    parts.append(f"h{run}")
    return "".join(parts)


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
