"""The dashboard's run page: a durable run's steps on one time axis (inline SVG).

A run is any job that records steps (an agent run of `TenureDurability` or `TenureRunner`,
a tool using ``ctx.step``): one lane per step and per child job, each bar from when it
started to when it was recorded or ended (database clock; a step's start is its record less
how long it ran). Model steps show the model and the usage it reported; each tool call that
is a job of its own links to that job's page, whose ownership picture says who held it; the
run's own ownership picture is on this page too. Then the totals: steps, model tokens,
tool calls, the run's time. Built from the steps' names, kinds and content-free details and
the children's rows only, every value escaped: never a payload, a prompt or a result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from .._app import Admin
from . import _picture
from ._pages import h, seconds

WIDTH = 960
LABEL = 260
RIGHT = 20
LANE = 24
TOP = 26
MAX_ROWS = 2000  # steps and children drawn; a longer run shows its first ones


def _lanes(
    steps: Sequence[Mapping[str, Any]], children: Sequence[Mapping[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    lanes = []
    for step in steps:
        end = step["recorded_at"]
        lanes.append(
            {
                "kind": step["kind"],
                "label": step["name"],
                "start": end - timedelta(milliseconds=step["duration_ms"]),
                "end": end,
                "detail": step["detail"],
                "link": None,
                "state": "recorded",
                "token": step["token"],
            }
        )
    for child in children:
        lanes.append(
            {
                "kind": "job",
                "label": f"{child['tool']} (job {child['id']})",
                "start": child["created_at"],
                "end": child["finished_at"] or now,
                "detail": {"attempt": child["attempt"], "code": child["code"]},
                "link": f"/jobs/{child['id']}",
                "state": child["state"],
                "token": child["token"],
            }
        )
    return sorted(lanes, key=lambda lane: (lane["start"], lane["end"]))


def _about(lane: Mapping[str, Any]) -> str:
    detail = lane["detail"] or {}
    if lane["kind"] == "model":
        usage = [f"{k} {detail[k]}" for k in ("input_tokens", "output_tokens") if k in detail]
        return " · ".join(([str(detail["model"])] if "model" in detail else []) + usage)
    if lane["kind"] == "job":
        code = f" ({detail['code']})" if detail.get("code") else ""
        return f"{lane['state']}{code}, attempt {detail.get('attempt')}"
    if "tool" in detail:
        return f"tool {detail['tool']}"
    return ""


def steps_svg(lanes: Sequence[Mapping[str, Any]]) -> str:
    if not lanes:
        return '<p class="empty">no steps recorded yet</p>'
    first: datetime = min(lane["start"] for lane in lanes)
    last: datetime = max(lane["end"] for lane in lanes)
    total = max((last - first).total_seconds(), 0.001)
    plot = WIDTH - LABEL - RIGHT

    def x(moment: datetime) -> float:
        return LABEL + (moment - first).total_seconds() / total * plot

    height = TOP + LANE * len(lanes) + 8
    parts = [
        f'<svg class="run-steps" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
        f'height="{height}" role="img" aria-label="the run\'s steps over time">'
    ]
    parts.append(_picture.time_axis(LABEL, plot, TOP, height, total))
    for row, lane in enumerate(lanes):
        top = TOP + row * LANE
        start_x, end_x = x(lane["start"]), x(lane["end"])
        title = f"{lane['label']}: {_about(lane)}".rstrip(": ")
        bar = (
            f'<rect class="step step-{h(lane["kind"])} step-{h(lane["state"])}" '
            f'x="{start_x:.1f}" y="{top + 5}" width="{max(end_x - start_x, 2):.1f}" '
            f'height="{LANE - 10}"><title>{h(title)}</title></rect>'
        )
        label = (
            f'<text class="lane-label" x="4" y="{top + LANE / 2 + 4:.1f}">{h(lane["label"])}</text>'
        )
        if lane["link"]:
            label = f'<a href="{h(lane["link"])}">{label}</a>'
            bar = f'<a href="{h(lane["link"])}">{bar}</a>'
        parts.append(
            f'<g class="run-lane" data-kind="{h(lane["kind"])}" data-name="{h(lane["label"])}">'
            f"{label}{bar}</g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def steps_table(lanes: Sequence[Mapping[str, Any]]) -> str:
    if not lanes:
        return ""
    rows = []
    for lane in lanes:
        name = h(lane["label"])
        if lane["link"]:
            name = f'<a href="{h(lane["link"])}">{name}</a>'
        took = (lane["end"] - lane["start"]).total_seconds()
        rows.append(
            f'<tr data-kind="{h(lane["kind"])}"><td>{name}</td><td>{h(lane["kind"])}</td>'
            f"<td>{h(_about(lane))}</td><td>{h(seconds(took))}</td>"
            f"<td>{h(lane['token'])}</td></tr>"
        )
    return (
        '<table class="run-table"><thead><tr><th>step</th><th>kind</th><th>what</th>'
        f"<th>took</th><th>token</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def totals(
    job: Mapping[str, Any],
    steps: Sequence[Mapping[str, Any]],
    children: Sequence[Mapping[str, Any]],
) -> str:
    models = [s for s in steps if s["kind"] == "model"]
    tokens = {
        key: sum(int(s["detail"].get(key) or 0) for s in models)
        for key in ("input_tokens", "output_tokens")
    }
    tools = sum(1 for s in steps if s["kind"] == "tool") + len(children)
    end = job["finished_at"] or job["db_now"]
    took = (end - job["created_at"]).total_seconds()
    figures = [
        ("state", job["state"]),
        ("model steps", len(models)),
        ("input tokens", tokens["input_tokens"]),
        ("output tokens", tokens["output_tokens"]),
        ("tool calls", tools),
        ("steps recorded", len(steps)),
        ("run time", seconds(took)),
        ("attempts", job["attempt"]),
    ]
    cells = "".join(
        f'<div class="figure" data-name="{h(label)}"><span>{h(label)}</span>'
        f"<strong>{h(value)}</strong></div>"
        for label, value in figures
    )
    return (
        f'<div class="run-totals">{cells}</div>'
        f'<p><a href="/jobs/{h(job["id"])}">job {h(job["id"])}</a>: its row and journal</p>'
    )


async def run_fragments(admin: Admin, job_id: int) -> dict[str, str]:
    """The page's parts; JobNotFound for no such job."""
    job = await admin.job(job_id)
    steps = await admin.steps(job_id, MAX_ROWS)
    children = await admin.children(job_id, MAX_ROWS)
    timeline = await admin.events(job_id)
    lanes = _lanes(steps, children, job["db_now"])
    return {
        "run-totals": totals(job, steps, children),
        "run-steps": steps_svg(lanes),
        "run-table": steps_table(lanes),
        "picture": _picture.picture(job, timeline),
    }


def run_body(job_id: int, fragments: Mapping[str, str]) -> str:
    return (
        f'<section><h2>Run {h(job_id)}</h2><div id="run-totals">{fragments["run-totals"]}</div>'
        "</section>"
        '<section><h2>Steps</h2><p class="hint">each recorded step and each tool call that is '
        "a job of its own, on one time axis (database clock); model steps carry the usage "
        "the model reported; a tool's job links to its page</p>"
        f'<div id="run-steps">{fragments["run-steps"]}</div>'
        f'<div id="run-table">{fragments["run-table"]}</div></section>'
        '<section><h2>Ownership of the run</h2><p class="hint">each claim of the run\'s job '
        "as a bar: who held the lease, under which token, until what ended it</p>"
        f'<div id="picture">{fragments["picture"]}</div></section>'
    )
