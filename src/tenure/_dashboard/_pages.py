"""HTML for the dashboard: server-rendered fragments, every value escaped.

The same functions render the first page and the fragments the page's script
fetches every second, so there is one renderer, not a second one in
JavaScript. Nothing here ever sees a payload, a result or an error message:
the statements behind it select ids, tokens, codes and times only.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from .._text import html_text
from ._pipeline_graph import run_graph

CHART_TOOLS = 6
CHART_WIDTH = 300
CHART_HEIGHT = 64


def h(value: object) -> str:
    """Escape for HTML text and attribute values (quotes included; controls made visible)."""
    return html_text(value)


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 120:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s"


def clock(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%H:%M:%S.%f")[:-3]


def _since(later: datetime, earlier: datetime | None) -> float | None:
    return None if earlier is None else (later - earlier).total_seconds()


def page(title: str, body: str, *, poll: str, interval: float, csrf: str | None) -> str:
    """A whole page; the script polls ``poll`` (a JSON endpoint) every ``interval`` seconds."""
    logout = (
        f'<form method="post" action="/logout" class="logout">'
        f'<input type="hidden" name="csrf" value="{h(csrf)}"><button>log out</button></form>'
        if csrf
        else ""
    )
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{h(title)} · tenure</title>
<link rel="stylesheet" href="/static/dashboard.css">
<script src="/static/dashboard.js" defer></script>
</head>
<body data-poll="{h(poll)}" data-interval="{interval:g}">
<header><a href="/" class="brand">tenure</a>
<nav><a href="/jobs" id="nav-jobs">jobs</a><a href="/workers">workers</a>
<a href="/queues">queues</a><a href="/pipelines">pipelines</a></nav>
<span class="title">{h(title)}</span>
<span class="status" id="status">live</span>{logout}</header>
<main>{body}</main>
</body>
</html>
"""


def lease_bar(row: Mapping[str, Any], now: datetime) -> str:
    """A bar for the lease left; the script shrinks it between polls from the data attributes."""
    remaining = _since(row["lease_until"], now) if row["lease_until"] else None
    granted = _since(row["lease_until"], row["heartbeat_at"]) if row["heartbeat_at"] else None
    if remaining is None or not granted:
        return "-"
    width = max(0.0, min(1.0, remaining / granted)) * 100
    return (
        f'<span class="lease" data-remaining="{remaining:.3f}" data-granted="{granted:.3f}">'
        f'<svg class="bar" viewBox="0 0 100 8" preserveAspectRatio="none" aria-hidden="true">'
        f'<rect class="bar-bg" width="100" height="8"></rect>'
        f'<rect class="bar-fill" width="{width:.2f}" height="8"></rect></svg>'
        f'<span class="lease-left">{seconds(remaining)}</span></span>'
    )


def _age(moment: datetime | None, now: datetime) -> str:
    age = _since(now, moment)
    if age is None:
        return "-"
    return f'<span class="age" data-age="{age:.3f}">{seconds(age)}</span>'


def running_table(rows: Sequence[Mapping[str, Any]], now: datetime) -> str:
    if not rows:
        return '<p class="empty">no leases held</p>'
    body = "".join(
        f'<tr data-job="{r["id"]}">'
        f'<td><a href="/jobs/{r["id"]}">{r["id"]}</a></td><td>{h(r["tool"])}</td>'
        f'<td class="owner">{h(r["owner"])}</td><td class="token">{r["token"]}</td>'
        f"<td>{r['attempt']}/{r['max_attempts']}</td>"
        f"<td>{lease_bar(r, now)}</td><td>{_age(r['heartbeat_at'], now)}</td>"
        f"<td>{_age(r['claimed_at'], now)}</td></tr>"
        for r in rows
    )
    return (
        '<table class="running"><thead><tr><th>job</th><th>tool</th><th>owner</th>'
        "<th>token</th><th>attempt</th><th>lease left</th><th>heartbeat age</th>"
        f"<th>held for</th></tr></thead><tbody>{body}</tbody></table>"
    )


def summarize(event: Mapping[str, Any]) -> str:
    """The few detail fields worth a glance (shared with the CLI); the journal holds
    nothing private to begin with."""
    detail = dict(event.get("detail") or {})
    parts = []
    if event.get("code"):
        parts.append(f"code {event['code']}")
    for key in ("reclaimed_by", "reclaimed_from", "previous_token", "outcome", "operation"):
        if detail.get(key) is not None:
            parts.append(f"{key.replace('_', ' ')} {detail[key]}")
    if event.get("duration_ms") is not None:
        parts.append(seconds(event["duration_ms"] / 1000))
    return ", ".join(parts)


def events_table(rows: Iterable[Mapping[str, Any]], *, with_job: bool) -> str:
    cells = []
    for e in rows:
        job = (
            f'<td><a href="/jobs/{e["job_id"]}">{e["job_id"]}</a></td>'
            if with_job and e.get("job_id") is not None
            else ("<td>-</td>" if with_job else "")
        )
        cells.append(
            f'<tr class="kind-{h(e["kind"])}" data-kind="{h(e["kind"])}"><td>{clock(e["at"])}</td>'
            f'<td class="kind">{h(e["kind"])}</td>{job}<td class="token">{h(e["token"])}</td>'
            f"<td>{h(e['attempt'])}</td><td>{h(e['worker'] or '-')}</td>"
            f"<td>{h(summarize(e))}</td></tr>"
        )
    if not cells:
        return '<p class="empty">nothing yet</p>'
    job_head = "<th>job</th>" if with_job else ""
    return (
        f'<table class="events"><thead><tr><th>at (db)</th><th>event</th>{job_head}'
        "<th>token</th><th>attempt</th><th>worker</th><th>detail</th></tr></thead>"
        f"<tbody>{''.join(cells)}</tbody></table>"
    )


def charts(rows: Sequence[Mapping[str, Any]], window: float, bucket: float) -> str:
    """Small multiples, one per tool: stacked bars of succeeded, retried and failed/lost."""
    per_tool: dict[str, dict[datetime, Mapping[str, Any]]] = defaultdict(dict)
    for row in rows:
        per_tool[row["tool"] or "-"][row["bucket"]] = row
    if not per_tool:
        return f'<p class="empty">no outcomes in the last {seconds(window)}</p>'
    totals = {
        tool: sum(r["succeeded"] + r["failed"] + r["retried"] + r["lost"] for r in b.values())
        for tool, b in per_tool.items()
    }
    shown = sorted(per_tool, key=lambda t: -totals[t])[:CHART_TOOLS]
    latest = max(row["bucket"] for row in rows)  # one time axis for every chart
    return "".join(_chart(tool, per_tool[tool], latest, window, bucket) for tool in shown)


def _chart(
    tool: str,
    buckets: Mapping[datetime, Mapping[str, Any]],
    latest: datetime,
    window: float,
    bucket: float,
) -> str:
    slots = max(1, round(window / bucket))
    peak = max(r["succeeded"] + r["failed"] + r["retried"] + r["lost"] for r in buckets.values())
    width = CHART_WIDTH / slots
    bars = []
    for moment, row in buckets.items():
        slot = slots - 1 - round((latest - moment).total_seconds() / bucket)
        if slot < 0:
            continue
        base = float(CHART_HEIGHT)
        for series in ("succeeded", "retried", "failed", "lost"):
            height = row[series] / peak * (CHART_HEIGHT - 4) if peak else 0
            if height:
                base -= height
                bars.append(
                    f'<rect class="{series}" x="{slot * width:.1f}" y="{base:.1f}" '
                    f'width="{max(width - 1, 1):.1f}" height="{height:.1f}"></rect>'
                )
    done = sum(r["succeeded"] for r in buckets.values())
    failed = sum(r["failed"] for r in buckets.values())
    retried = sum(r["retried"] for r in buckets.values())
    lost = sum(r["lost"] for r in buckets.values())
    return (
        f'<figure class="chart" data-tool="{h(tool)}"><figcaption><b>{h(tool)}</b> '
        f"{done} succeeded · {retried} retried · {failed} failed · {lost} lost</figcaption>"
        f'<svg viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" width="{CHART_WIDTH}" '
        f'height="{CHART_HEIGHT}" role="img" aria-label="{h(tool)} outcomes">'
        f"{''.join(bars)}</svg></figure>"
    )


def _stages(run: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    stages = run["stages"] if isinstance(run["stages"], list) else json.loads(run["stages"])
    return [s for s in stages if isinstance(s, dict)]


def _chip(stage: Mapping[str, Any]) -> str:
    """One stage round as a chip, a link to its job when it has one."""
    text = f"{h(stage.get('stage'))}#{h(stage.get('round'))} {h(stage.get('state'))}" + (
        f" → {h(stage['decision'])}" if stage.get("decision") else ""
    )
    job = stage.get("job_id")
    inner = f'<a href="/jobs/{h(job)}">{text}</a>' if isinstance(job, int) else text
    return f'<span class="stage stage-{h(stage.get("state"))}">{inner}</span>'


def pipelines_table(runs: Sequence[Mapping[str, Any]] | None) -> str:
    """The runs, one row each: a link to the run's own page (its graph), its stages as
    chips that wrap (each a link to its job), never a graph per row."""
    if runs is None:
        return '<p class="empty">no pipelines</p>'
    if not runs:
        return '<p class="empty">no pipeline runs yet</p>'
    rows = "".join(
        f'<tr data-run="{run["run_id"]}">'
        f'<td><a href="/pipelines/{run["run_id"]}">{run["run_id"]}</a></td>'
        f"<td>{h(run['pipeline'])}</td>"
        f'<td><span class="state state-{h(run["state"])}">{h(run["state"])}</span></td>'
        f'<td class="chips">{"".join(_chip(s) for s in _stages(run))}</td>'
        f"<td>{clock(run['updated_at'])}</td></tr>"
        for run in runs
    )
    return (
        '<table class="pipelines"><thead><tr><th>run</th><th>pipeline</th><th>state</th>'
        f"<th>stages (each a link to its job)</th><th>updated</th></tr></thead><tbody>{rows}"
        "</tbody></table>"
    )


def pipeline_run(run: Mapping[str, Any]) -> str:
    """One run's page: its graph (each stage box a link to its latest job) and its stage
    rounds, in order."""
    return (
        f'<div class="graph">{run_graph(run)}</div>'
        f'<p class="chips">{"".join(_chip(s) for s in _stages(run))}</p>'
    )


def pipelines_body(fragment: str) -> str:
    return (
        '<section><h2>Pipeline runs</h2><p class="hint">newest first; a run\'s graph is on '
        f'its own page</p><div id="pipelines">{fragment}</div></section>'
    )


def pipeline_run_body(run: Mapping[str, Any], fragment: str) -> str:
    return (
        f"<section><h2>Run {h(run['run_id'])} · {h(run['pipeline'])} · "
        f'<span id="run-state">{h(run["state"])}</span></h2>'
        '<p class="hint">the run\'s own copy of its graph: each box a stage, with its '
        "rounds and verdicts; a box links to its latest job</p>"
        f'<div id="run">{fragment}</div></section>'
    )


def waiting_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Jobs waiting at a waitpoint: no lease, no slot; only a deadline."""
    if not rows:
        return '<p class="empty">no job is waiting</p>'
    body = "".join(
        f'<tr data-job="{r["job_id"]}">'
        f'<td><a href="/jobs/{r["job_id"]}">{r["job_id"]}</a></td><td>{h(r["tool"])}</td>'
        f"<td>{h(r['tenant'] or '-')}</td><td>{h(r['name'])}</td>"
        f"<td>{seconds(r['waited'])}</td><td>{seconds(max(0.0, r['seconds_left']))}</td>"
        f"<td>{h(r['on_timeout'])}</td></tr>"
        for r in rows
    )
    return (
        '<table class="waiting"><thead><tr><th>job</th><th>tool</th><th>tenant</th>'
        "<th>waitpoint</th><th>waited</th><th>time left</th><th>then</th></tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def overview(fragments: Mapping[str, str]) -> str:
    return (
        '<section><h2>Held leases</h2><div id="running">'
        f"{fragments['running']}</div></section>"
        '<section><h2>Waiting</h2><p class="hint">calls waiting for an answer or a webhook: '
        f'they hold no lease and no worker slot</p><div id="waiting">{fragments["waiting"]}'
        "</div></section>"
        '<section><h2>Ownership events</h2><p class="hint">expired leases, reclaims, lost '
        "heartbeats, rejected results, stale fences, operator actions</p>"
        f'<div id="events">{fragments["events"]}</div></section>'
        f'<section><h2>Outcomes per tool</h2><div id="charts">{fragments["charts"]}</div>'
        "</section>"
        '<section><h2>Pipelines</h2><p class="hint">the latest runs; '
        '<a href="/pipelines">every run</a>, each with its graph on its own page</p>'
        f'<div id="pipelines">{fragments["pipelines"]}</div></section>'
    )


def job_summary(job: Mapping[str, Any], *, csrf: str | None, can_act: bool) -> str:
    now = job["db_now"]
    fields = [
        ("state", f'<span class="state state-{h(job["state"])}">{h(job["state"])}</span>'),
        ("tool", h(job["tool"])),
        ("owner", h(job["owner"] or "-")),
        ("token", h(job["token"])),
        ("attempt", f"{job['attempt']}/{job['max_attempts']}"),
        ("lease left", lease_bar(job, now) if job["state"] == "running" else "-"),
        ("heartbeat age", _age(job["heartbeat_at"], now) if job["state"] == "running" else "-"),
        ("progress", progress_cell(job.get("progress"))),
        ("error code", h(job["code"] or "-")),
        ("idempotency key", h(job["idempotency_key"])),
        ("payload hmac", h(job["payload_hmac"] or "- (no journal key)")),
        ("created", clock(job["created_at"])),
        ("finished", clock(job["finished_at"])),
    ]
    rows = "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in fields)
    return f'<table class="job">{rows}</table>{_actions(job, csrf=csrf, can_act=can_act)}'


def _actions(job: Mapping[str, Any], *, csrf: str | None, can_act: bool) -> str:
    if not can_act:
        return (
            '<p class="hint actions-off">Cancel and retry need an access token: start the '
            "dashboard with TENURE_DASHBOARD_TOKEN set.</p>"
        )
    buttons = []
    if job["state"] in ("queued", "running"):
        buttons.append(("cancel", "Cancel"))
    if job["state"] in ("failed", "cancelled"):
        buttons.append(("retry", "Retry"))
    return "".join(
        f'<form method="post" action="/jobs/{job["id"]}/{action}" class="action">'
        f'<input type="hidden" name="csrf" value="{h(csrf)}">'
        f'<button type="submit" id="{action}">{label}</button></form>'
        for action, label in buttons
    )


def job_page(job_id: int, fragments: Mapping[str, str], notice: str | None) -> str:
    flash = f'<p class="notice">{h(notice)}</p>' if notice else ""
    return (
        f"{flash}<section><h2>Job {job_id}</h2>"
        f'<div id="summary">{fragments["summary"]}</div>'
        f'<p class="hint"><a href="/runs/{job_id}">its steps</a> (a durable run, or a tool '
        "that records steps)</p></section>"
        '<section><h2>Ownership</h2><p class="hint">each claim as a bar on one time axis '
        "(database clock): who held the lease, under which token, until what ended it</p>"
        f'<div id="picture">{fragments["picture"]}</div>{picture_legend()}</section>'
        '<section><h2>Timeline</h2><p class="hint">who held it, under which token, when '
        "each lease was confirmed or lost, which requests were sent (database clock)</p>"
        f'<div id="timeline">{fragments["timeline"]}</div></section>'
    )


def picture_legend() -> str:
    """What the ownership picture's shapes mean (`_picture.py` draws them)."""
    return (
        '<p class="hint legend"><span class="key held-running"></span> lease held '
        '<span class="key held-succeeded"></span> committed '
        '<span class="key held-expired"></span> expired or lost '
        '<span class="key lease-rest"></span> lease granted, not yet run out · '
        "a thin line: the last heartbeat confirmed · "
        "◆ n: ownership event n, listed with the picture</p>"
    )


def login_page(next_url: str, failed: bool) -> str:
    error = '<p class="error">That is not the access token.</p>' if failed else ""
    return (
        f'<section class="login"><h2>Access token</h2>{error}'
        '<form method="post" action="/login">'
        f'<input type="hidden" name="next" value="{h(next_url)}">'
        '<input type="password" name="token" id="token" autocomplete="current-password" '
        'autofocus required><button type="submit" id="login">Sign in</button></form></section>'
    )


def describe_progress(progress: Mapping[str, Any] | None) -> str:
    """``120/200 (60 %): step 120``, from a job's progress; ``-`` before any report."""
    if not progress:
        return "-"
    done, total = progress.get("done"), progress.get("total")
    text = f"{done:g}" if isinstance(done, int | float) else "?"
    if isinstance(total, int | float) and total:
        text += f"/{total:g}"
        if isinstance(done, int | float):
            text += f" ({100 * done / total:.0f} %)"
    message = progress.get("message")
    return f"{text}: {message}" if message else text


def progress_cell(progress: Mapping[str, Any] | None) -> str:
    """The tool's last report as a bar (when it gave a total) and its text, escaped."""
    text = h(describe_progress(progress))
    if not progress:
        return text
    done, total = progress.get("done"), progress.get("total")
    if isinstance(done, int | float) and isinstance(total, int | float) and total > 0:
        value = max(0.0, min(float(done), float(total)))
        return f'<progress max="{float(total):g}" value="{value:g}"></progress> {text}'
    return text
