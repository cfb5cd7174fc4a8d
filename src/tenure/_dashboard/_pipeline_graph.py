"""A pipeline run drawn as its graph (inline SVG): stages as boxes, edges from the run's own
copy of the graph (``next`` and each verdict's ``on``), and on each box what happened to
that stage in this run: its rounds, each round's state and verdict; a stage that ran links
to its latest round's job.

Only the graph's structure reaches the dashboard (names, next, on: the statement selects
nothing else), never the run's input, context, result or a stage's arguments. Columns are
the distance from a start stage; an edge that goes back (a reject loop) bends below.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._text import html_text

BOX_W = 170
BOX_H = 64
GAP_X = 60
GAP_Y = 26
PAD = 12
MAX_ROUNDS_SHOWN = 3
LOOP = 40  # room for edges that go back


def h(value: object) -> str:
    """Escape for HTML text and attribute values (as `_pages.h`, which imports this module)."""
    return html_text(value)


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _edges(spec: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(from, to, label) for every edge: ``next`` unlabelled, ``on`` by verdict."""
    edges = []
    for stage in spec:
        name = str(stage.get("name"))
        for target in stage.get("next") or ():
            edges.append((name, str(target), ""))
        for verdict, targets in (stage.get("on") or {}).items():
            for target in targets or ():
                edges.append((name, str(target), str(verdict)))
    return edges


def _columns(
    names: list[str], start: Sequence[str], edges: list[tuple[str, str, str]]
) -> dict[str, int]:
    """Each stage's column: its distance from a start stage (breadth first); stages nothing
    reaches go after the rest."""
    column: dict[str, int] = {}
    frontier = [n for n in start if n in names] or names[:1]
    for name in frontier:
        column[name] = 0
    while frontier:
        following = []
        for name in frontier:
            for source, target, _ in edges:
                if source == name and target in names and target not in column:
                    column[target] = column[name] + 1
                    following.append(target)
        frontier = following
    last = max(column.values(), default=-1)
    for name in names:
        if name not in column:
            last += 1
            column[name] = last
    return column


def run_graph(run: Mapping[str, Any]) -> str:
    """The SVG of one run: its graph's stages, edges and what each stage did."""
    stages = _loads(run.get("stages")) or []
    spec = [s for s in _loads(run.get("graph")) or [] if isinstance(s, dict)]
    start = _loads(run.get("start"))
    start = [str(n) for n in start] if isinstance(start, list) else []
    names = [str(s.get("name")) for s in spec]
    for stage in stages:  # a stage the graph does not name (an old run) still shows
        if str(stage.get("stage")) not in names:
            names.append(str(stage.get("stage")))
    if not names:
        return '<p class="empty">no stages yet</p>'
    edges = [e for e in _edges(spec) if e[0] in names and e[1] in names]
    column = _columns(names, start, edges)
    row: dict[str, int] = {}
    used: dict[int, int] = {}
    for name in names:
        row[name] = used.get(column[name], 0)
        used[column[name]] = row[name] + 1
    # Edges back to an earlier column go above the boxes from the top row, below from the
    # others; edges within a column go around its right side. Room is made for each.
    above = any(column[t] < column[s] and row[s] == 0 for s, t, _ in edges)
    below = any(column[t] < column[s] and row[s] > 0 for s, t, _ in edges)
    beside = any(column[t] == column[s] for s, t, _ in edges)
    top = PAD + (LOOP if above else 0)
    width = PAD * 2 + (max(column.values()) + 1) * (BOX_W + GAP_X) - GAP_X + (LOOP if beside else 0)
    height = top + PAD + max(used.values()) * (BOX_H + GAP_Y) - GAP_Y + (LOOP if below else 0)

    def box(name: str) -> tuple[float, float]:
        return PAD + column[name] * (BOX_W + GAP_X), top + row[name] * (BOX_H + GAP_Y)

    parts = [
        f'<svg class="run-graph" data-run="{h(run.get("run_id"))}" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" '
        f'aria-label="pipeline {h(run.get("pipeline"))}, run {h(run.get("run_id"))}">'
        f'<defs><marker id="arrow-{h(run.get("run_id"))}" viewBox="0 0 10 10" refX="10" '
        'refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z"></path>'
        "</marker></defs>"
    ]
    for source, target, label in edges:
        if column[target] == column[source]:
            route = "beside"
        elif column[target] > column[source]:
            route = "ahead"
        else:
            route = "above" if row[source] == 0 else "below"
        parts.append(_edge(box(source), box(target), route, label, height, run.get("run_id")))
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for stage in stages:
        by_name.setdefault(str(stage.get("stage")), []).append(stage)
    for name in names:
        parts.append(_node(name, box(name), by_name.get(name, [])))
    parts.append("</svg>")
    return "".join(parts)


def _edge(
    a: tuple[float, float],
    b: tuple[float, float],
    route: str,
    label: str,
    height: int,
    run_id: Any,
) -> str:
    """One edge: ``ahead`` (a straight arrow to a later column), ``beside`` (within a
    column, around its right side), ``above`` or ``below`` (back to an earlier column)."""
    if route == "beside":
        x1, y1 = a[0] + BOX_W, a[1] + BOX_H / 2
        x2, y2 = x1, b[1] + BOX_H / 2
        out = x1 + LOOP
        path = f"M{x1:.0f} {y1:.0f} C{out:.0f} {y1:.0f} {out:.0f} {y2:.0f} {x2:.0f} {y2:.0f}"
        lx, ly = out - 4, (y1 + y2) / 2 + 4
    elif route in ("above", "below"):
        side = 0.0 if route == "above" else BOX_H
        edge = 6.0 if route == "above" else height - 6.0
        x1, y1 = a[0] + BOX_W / 2, a[1] + side
        x2, y2 = b[0] + BOX_W / 2, b[1] + side
        path = f"M{x1:.0f} {y1:.0f} C{x1:.0f} {edge:.0f} {x2:.0f} {edge:.0f} {x2:.0f} {y2:.0f}"
        lx, ly = (x1 + x2) / 2, edge + (10.0 if route == "above" else -4.0)
    else:
        x1, y1 = a[0] + BOX_W, a[1] + BOX_H / 2
        x2, y2 = b[0], b[1] + BOX_H / 2
        path = f"M{x1:.0f} {y1:.0f} L{x2:.0f} {y2:.0f}"
        lx, ly = (x1 + x2) / 2, (y1 + y2) / 2 - 4
    text = (
        f'<text class="edge-label" x="{lx:.0f}" y="{ly:.0f}" text-anchor="middle">{h(label)}</text>'
        if label
        else ""
    )
    return (
        f'<g class="edge" data-verdict="{h(label)}">'
        f'<path d="{path}" marker-end="url(#arrow-{h(run_id)})">'
        f"</path>{text}</g>"
    )


def _node(name: str, at: tuple[float, float], rounds: list[Mapping[str, Any]]) -> str:
    x, y = at
    latest = rounds[-1] if rounds else None
    state = str(latest.get("state")) if latest else "not-reached"
    lines = [
        f"#{r.get('round')} {r.get('state')}" + (f" → {r['decision']}" if r.get("decision") else "")
        for r in rounds[-MAX_ROUNDS_SHOWN:]
    ]
    if len(rounds) > MAX_ROUNDS_SHOWN:
        lines[0] = f"… {lines[0]}"
    text = "".join(
        f'<text class="round" x="{x + 8:.0f}" y="{y + 34 + 12 * i:.0f}">{h(line)}</text>'
        for i, line in enumerate(lines or ["not reached"])
    )
    job = latest.get("job_id") if latest else None
    job = job if isinstance(job, int) and not isinstance(job, bool) else None
    title = f"{name}: {state}" + (f", job {job}" if job is not None else "")
    node = (
        f'<g class="stage-node stage-{h(state)}" data-stage="{h(name)}" data-state="{h(state)}" '
        f'data-round="{h(latest.get("round") if latest else "")}">'
        f"<title>{h(title)}</title>"
        f'<rect x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="6"></rect>'
        f'<text class="stage-name" x="{x + 8:.0f}" y="{y + 18:.0f}">{h(name)}</text>{text}</g>'
    )
    # A stage that ran links to its latest round's job (its ownership picture, timeline).
    return node if job is None else f'<a class="stage-link" href="/jobs/{job}">{node}</a>'
