"""The ownership picture of a job: its attempts as bars on one time axis (inline SVG).

Built from the job's row and its journal only, on the server, every value escaped: one lane
per claim (attempt, worker, fencing token), the bar from the claim to whatever ended that
lease (its commit, a cancel, a lost heartbeat, or the moment it ran out), and markers where
ownership was contested: the lease expiring and being reclaimed, a stale owner stopped or
its result refused or discarded, a receiver refusing a stale fence, a fenced request sent,
heartbeats confirmed. A running attempt's bar reaches the database's now, its lease the
dashed rest up to ``lease_until``. Journal rows carry no payload content, and neither does
the picture: ids, tokens, worker names, codes and times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ._pages import h, seconds

WIDTH = 960
LABEL = 230  # the lane labels' column
RIGHT = 20
LANE = 30
TOP = 26  # the axis' labels
TICKS = 5
DIGIT = 7  # px a marker number's digit takes (10 px bold); a number's room is len * DIGIT
NUMBER_GAP = 4  # px between two numbers on one row
NUMBER_ROW = 12  # px between rows of numbers: markers too close for one row stack below
MAX_NUMBER_ROWS = 6  # past it, a number shares the row where it overlaps least

# Kinds that end the lease they name (the bar stops there), and the class the bar gets.
ENDINGS = {
    "succeeded": "succeeded",
    "failed": "failed",
    "retried": "retried",
    "released": "released",
    "cancelled": "cancelled",
    "suspended": "suspended",
    "heartbeat_lost": "lost",
}
# Markers drawn on a lane, with what they say.
MARKERS = {
    "lease_expired": "lease expired",
    "heartbeat_lost": "stale owner stopped",
    "result_rejected": "result refused by the fenced commit",
    "result_discarded": "late result discarded",
    "stale_fence_rejected": "receiver rejected a stale fence",
    "ownership_unknown": "ownership unknown (database silent)",
    "tool_request_started": "fenced request sent",
    "heartbeat_ok": "heartbeat confirmed",
    "cancelled": "cancelled by an operator",
}


@dataclass
class Lane:
    """One claim: who held the lease, under which token, from when to when."""

    token: int
    attempt: int | None
    worker: str | None
    start: datetime
    end: datetime | None = None
    outcome: str = "running"
    lease_until: datetime | None = None
    confirmed: datetime | None = None  # the last heartbeat known to have been confirmed
    markers: list[tuple[datetime, str, str]] = field(default_factory=list)  # (at, kind, text)


def _ms(value: Any) -> timedelta:
    return timedelta(milliseconds=value or 0)


def lanes_of(job: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> list[Lane]:
    """Lanes in claim order, from the journal (and the row, for the attempt still running).

    A lane ends at the first of: the moment its lease ran out (a lease_expired row says how
    long after the end it was found), a lost heartbeat, its commit or a cancel; later rows
    of the same token (a stale owner stopped, its result refused) stay as markers after it.
    """
    lanes: dict[int, Lane] = {}
    ends: dict[int, list[tuple[datetime, str]]] = {}
    for event in sorted(events, key=lambda e: e["id"]):
        kind, token, at = event["kind"], event.get("token"), event["at"]
        if kind == "job_claimed" and token is not None:
            lanes[token] = Lane(token, event.get("attempt"), event.get("worker"), at)
            ends[token] = []
            continue
        lane = lanes.get(token) if token is not None else None
        if lane is None or token is None:
            continue
        if kind == "lease_expired":
            ran_out = at - _ms(event.get("duration_ms"))  # found this long after it ended
            by = (event.get("detail") or {}).get("reclaimed_by")
            text = f"lease expired (found {seconds((at - ran_out).total_seconds())} later"
            text += f", reclaimed by {by})" if by else ")"
            lane.markers.append((ran_out, kind, text))
            ends[token].append((ran_out, "expired"))
            continue
        if kind in MARKERS:
            text = MARKERS[kind] + (f" ({event['code']})" if event.get("code") else "")
            lane.markers.append((at, kind, text))
        if kind in ENDINGS:
            ends[token].append((at, ENDINGS[kind]))
        if kind == "heartbeat_lost":
            lane.confirmed = at - _ms(event.get("duration_ms"))  # since the last confirmation
        elif kind == "heartbeat_ok":
            lane.confirmed = at
    for token, lane in lanes.items():
        if ends[token]:
            lane.end = min(at for at, _ in ends[token])
            outcomes = [outcome for _, outcome in ends[token]]
            lane.outcome = next(
                (o for o in ("expired", "lost") if o in outcomes),
                min(ends[token])[1],
            )
    current = lanes.get(job["token"])
    if current is not None and job["state"] == "running" and current.end is None:
        current.confirmed = job.get("heartbeat_at") or current.confirmed
        until = job.get("lease_until")
        if until is not None and until <= job["db_now"]:  # ran out; nobody has reclaimed it
            current.end, current.outcome = until, "expired"
            current.markers.append((until, "lease_expired", "lease ran out, not reclaimed yet"))
        else:
            current.lease_until = until
    return list(lanes.values())


def _span(job: Mapping[str, Any], lanes: Sequence[Lane]) -> tuple[datetime, datetime]:
    moments = [job["created_at"], job["db_now"] if job["state"] == "running" else None]
    for lane in lanes:
        moments += [lane.start, lane.end, lane.lease_until, lane.confirmed]
        moments += [at for at, _, _ in lane.markers]
    known = [m for m in moments if m is not None]
    if job.get("finished_at") is not None:
        known.append(job["finished_at"])
    first, last = min(known), max(known)
    if last <= first:
        last = first + timedelta(seconds=1)
    return first, last


def time_axis(left: float, plot: float, top: int, height: int, total: float) -> str:
    """The ticks of a time axis from +0 to +``total`` seconds (the run page's too)."""
    parts = []
    for i in range(TICKS + 1):
        at = left + plot * i / TICKS
        parts.append(
            f'<line class="tick" x1="{at:.1f}" y1="{top - 6}" x2="{at:.1f}" y2="{height}"></line>'
            f'<text class="axis" x="{at:.1f}" y="{top - 10}" text-anchor="middle">'
            f"+{h(seconds(total * i / TICKS))}</text>"
        )
    return "".join(parts)


def picture(job: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> str:
    """The SVG (or a line saying there is nothing to draw yet)."""
    lanes = lanes_of(job, events)
    if not lanes:
        return '<p class="empty">not claimed yet: no lease to draw</p>'
    first, last = _span(job, lanes)
    total = (last - first).total_seconds()
    plot = WIDTH - LABEL - RIGHT
    now = job["db_now"]

    def x(moment: datetime) -> float:
        return LABEL + (moment - first).total_seconds() / total * plot

    numbers: dict[tuple[int, int], int] = {}  # (lane, marker) -> its note's number
    notes = []
    ordered = sorted(
        (moment, row, index)
        for row, lane in enumerate(lanes)
        for index, (moment, _, _) in enumerate(lane.markers)
    )
    for number, (moment, row, index) in enumerate(ordered, 1):
        numbers[(row, index)] = number
        lane = lanes[row]
        _, kind, text = lane.markers[index]
        notes.append(
            f'<li data-kind="{h(kind)}" data-token="{h(lane.token)}">'
            f"+{h(seconds((moment - first).total_seconds()))} · token {h(lane.token)} "
            f"({h(lane.worker or '-')}): {h(text)}</li>"
        )
    places = [
        _number_places([(x(at), numbers[(row, i)]) for i, (at, _, _) in enumerate(lane.markers)])
        for row, lane in enumerate(lanes)
    ]
    tops = [TOP]
    for placed in places:
        rows = 1 + max((r for _, r in placed), default=0)
        tops.append(tops[-1] + LANE + NUMBER_ROW * (rows - 1))
    height = tops[-1] + 8
    parts = [
        f'<svg class="ownership" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
        f'height="{height}" role="img" aria-label="ownership of job {h(job["id"])} over time">'
    ]
    parts.append(time_axis(LABEL, plot, TOP, height, total))
    for row, lane in enumerate(lanes):
        parts.append(_lane(lane, tops[row], x, now, job, places[row], numbers, row))
    parts.append("</svg>")
    if notes:
        parts.append(f'<ol class="picture-notes">{"".join(notes)}</ol>')
    return "".join(parts)


def _number_places(markers: Sequence[tuple[float, int]]) -> list[tuple[float, int]]:
    """Where each marker's number goes, in the markers' order: ``(x, row)``.

    A number sits just right of its marker (left of it at the right edge), on the first
    row where it overlaps no number already placed; markers too close together for one
    row (two events in the same millisecond, a stale owner stopped and refused at once)
    stack their numbers in rows below, so each stays legible.
    """
    placed: list[tuple[float, float, int]] = []  # (left, right, row) of each number so far
    places: dict[int, tuple[float, int]] = {}
    for index in sorted(range(len(markers)), key=lambda i: markers[i]):
        mx, number = markers[index]
        width = DIGIT * len(str(number))
        left = mx + 6 if mx + 6 + width <= WIDTH - 2 else mx - 6 - width

        def clash(row: int, left: float = left, width: float = width) -> float:
            return sum(
                max(0.0, min(right, left + width + NUMBER_GAP) - max(start, left - NUMBER_GAP))
                for start, right, taken in placed
                if taken == row
            )

        free = [row for row in range(MAX_NUMBER_ROWS) if clash(row) == 0]
        row = free[0] if free else min(range(MAX_NUMBER_ROWS), key=clash)
        placed.append((left, left + width, row))
        places[index] = (left, row)
    return [places[i] for i in range(len(markers))]


def _lane(
    lane: Lane,
    top: int,
    x: Any,
    now: datetime,
    job: Mapping[str, Any],
    places: Sequence[tuple[float, int]],
    numbers: Mapping[tuple[int, int], int],
    row: int,
) -> str:
    mid = top + LANE / 2
    label = f"attempt {lane.attempt if lane.attempt is not None else '?'} · {lane.worker or '-'}"
    end = lane.end or (now if job["state"] == "running" else lane.start)
    start_x, end_x = x(lane.start), x(end)
    out = [
        f'<g class="lane" data-token="{h(lane.token)}" data-worker="{h(lane.worker)}" '
        f'data-outcome="{h(lane.outcome)}">',
        f'<text class="lane-label" x="4" y="{mid + 4:.1f}">{h(label)}</text>',
        f'<text class="lane-token" x="{LABEL - 8}" y="{mid + 4:.1f}" text-anchor="end">'
        f"token {h(lane.token)}</text>",
        f'<rect class="held held-{h(lane.outcome)}" x="{start_x:.1f}" y="{top + 7}" '
        f'width="{max(end_x - start_x, 2):.1f}" height="{LANE - 14}">'
        f"<title>{h(label)}, token {h(lane.token)}: {h(lane.outcome)}</title></rect>",
    ]
    if lane.lease_until is not None and lane.lease_until > end:
        out.append(
            f'<rect class="lease-rest" x="{end_x:.1f}" y="{top + 7}" '
            f'width="{x(lane.lease_until) - end_x:.1f}" height="{LANE - 14}">'
            "<title>lease granted until</title></rect>"
        )
    if lane.confirmed is not None:
        cx = x(lane.confirmed)
        out.append(
            f'<line class="beat" x1="{cx:.1f}" y1="{top + 4}" x2="{cx:.1f}" y2="{top + LANE - 4}">'
            "<title>last heartbeat confirmed</title></line>"
        )
    for index, (at, kind, text) in enumerate(lane.markers):
        mx = x(at)
        number = numbers.get((row, index), 0)
        left, level = places[index]
        out.append(
            f'<g class="marker marker-{h(kind)}" data-kind="{h(kind)}" data-number="{number}">'
            f'<path d="M{mx:.1f} {top + 3} l5 6 l-5 6 l-5 -6 z"></path>'
            f'<text class="note-number" x="{left:.1f}" y="{top + 26 + NUMBER_ROW * level}">'
            f"{number}</text><title>{number}. {h(text)}</title></g>"
        )
    out.append("</g>")
    return "".join(out)
