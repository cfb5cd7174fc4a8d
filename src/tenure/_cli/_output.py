"""What the ``tenure`` command prints: rich tables of plain, printable text (never
markup), and errors as one line."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .._dashboard._pages import clock, describe_progress, seconds, summarize
from .._errors import PayloadError
from .._job import Job
from .._text import printable

EXIT_ERROR = 1
STATUS_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}
# Spaces between columns, a rule under the header: readable in a terminal and when pasted.
TABLE: dict[str, Any] = {"box": box.SIMPLE_HEAD, "title_justify": "left"}


def _one_line(exc: BaseException) -> str:
    """An exception as one line: its first non-empty line, else its type's name (controls
    made visible: a message may quote what a caller or a tool wrote)."""
    for line in str(exc).splitlines():
        if line.strip():
            return printable(line.strip())
    return type(exc).__name__


def _error(exc: BaseException) -> str:
    """What a failed command prints on stderr: one ``tenure: error:`` line, and under it,
    indented, every problem of a payload that does not fit its tool (the first line only
    says how many there are)."""
    lines = [f"tenure: error: {_one_line(exc)}"]
    if isinstance(exc, PayloadError):
        lines += [f"  {printable(problem)}" for problem in exc.problems]
    return "\n".join(lines)


def _console() -> Console:
    """stdout; wide when it is not a terminal, so piped tables are not squeezed to 80 columns.
    It reads no markup and no emoji codes: what it prints is data (see `_row`)."""
    return Console(
        highlight=False, markup=False, emoji=False, width=None if sys.stdout.isatty() else 200
    )


def _row(table: Table, *values: str | Text) -> None:
    """One row of data: each value plain text with its controls made visible."""
    table.add_row(*(v if isinstance(v, Text) else Text(printable(v)) for v in values))


def _since(later: datetime, earlier: datetime | None) -> float | None:
    return None if earlier is None else (later - earlier).total_seconds()


def jobs_table(jobs: Sequence[Job], now: datetime) -> Table:
    table = Table(title=f"{len(jobs)} jobs (database time {clock(now)})", **TABLE)
    for column in ("ID", "TOOL", "TENANT", "STATE", "ATTEMPT", "TOKEN", "OWNER", "LEASE LEFT"):
        table.add_column(column, no_wrap=True)
    table.add_column("HEARTBEAT AGE", no_wrap=True)
    table.add_column("CODE")
    for j in jobs:
        running = j.state == "running"
        _row(
            table,
            str(j.id),
            j.tool,
            j.tenant or "-",
            j.state,
            f"{j.attempt}/{j.max_attempts}",
            str(j.token),
            j.owner or "-",
            seconds(_since(j.lease_until, now)) if running and j.lease_until else "-",
            seconds(_since(now, j.heartbeat_at)) if running else "-",
            str((j.error or {}).get("code", "-")),
        )
    return table


def events_table(events: Iterable[Mapping[str, Any]], *, title: str, with_job: bool) -> Table:
    table = Table(title=title, **TABLE)
    columns = ["AT (DB)", "EVENT", "JOB", "TOKEN", "ATTEMPT", "WORKER", "TOOL", "DETAIL"]
    for column in columns if with_job else [c for c in columns if c != "JOB"]:
        table.add_column(column, no_wrap=column != "DETAIL")
    for e in events:
        cells = [
            e["at"].isoformat(timespec="milliseconds"),
            e["kind"],
            str(e.get("job_id", "-")),
            str(e["token"] if e["token"] is not None else "-"),
            str(e["attempt"] if e["attempt"] is not None else "-"),
            e["worker"] or "-",
            e["tool"] or "-",
            summarize(e),
        ]
        if not with_job:
            del cells[2]
        _row(table, *cells)
    return table


def workers_table(workers: Sequence[Mapping[str, Any]]) -> Table:
    """Who is alive, who went silent and what each holds (leases counted from the jobs)."""
    alive = sum(1 for w in workers if w["status"] == "alive")
    table = Table(title=f"{len(workers)} workers, {alive} alive", **TABLE)
    for column in ("NAME", "STATUS", "HOST", "PID", "VERSION", "LEASES", "CONCURRENCY"):
        table.add_column(column, no_wrap=True)
    table.add_column("STARTED", no_wrap=True)
    table.add_column("LAST SEEN", no_wrap=True)
    table.add_column("TOOLS")
    for w in workers:
        expired = f" ({w['leases_expired']} expired)" if w["leases_expired"] else ""
        _row(
            table,
            w["name"],
            w["status"],
            w["host"],
            str(w["pid"]),
            w["version"],
            f"{w['leases_held']}{expired}",
            str(w["concurrency"]),
            w["started_at"].isoformat(timespec="seconds"),
            f"{seconds(w['seen_ago'])} ago",
            ", ".join(w["tools"]),
        )
    return table


def job_table(job: Mapping[str, Any]) -> Table:
    now = job["db_now"]
    running = job["state"] == "running"
    beat = clock(job["heartbeat_at"])
    if running:
        beat += f" ({seconds(_since(now, job['heartbeat_at']))} ago)"
    table = Table(title=f"job {job['id']}", show_header=False, **TABLE)
    table.add_column(style="bold")
    table.add_column()
    rows = {
        "state": job["state"],
        "tool": job["tool"],
        "owner": job["owner"] or "-",
        "token": str(job["token"]),
        "attempt": f"{job['attempt']}/{job['max_attempts']}",
        "lease left": seconds(_since(job["lease_until"], now)) if running else "-",
        "last heartbeat": beat,
        "progress": describe_progress(job["progress"]),
        "error code": job["code"] or "-",
        "idempotency key": job["idempotency_key"],
        "tenant": job["tenant"] or "-",
        "payload hmac": job["payload_hmac"] or "- (no journal key)",
        "created": job["created_at"].isoformat(timespec="milliseconds"),
        "finished": clock(job["finished_at"]),
    }
    for name, value in rows.items():
        _row(table, name, value)
    return table


# Who may answer a waitpoint, as `tenure jobs show` says it (tenure.states.Answerer).
ANSWERERS = {
    "holder": "its token's holder",
    "caller": "the caller too",
    "nobody": "nobody (a sleep or child jobs)",
}


def waitpoints_table(waits: Iterable[Mapping[str, Any]]) -> Table:
    """A job's waitpoints: what it waits for, who may answer, how long it still may."""
    table = Table(title="waitpoints", **TABLE)
    for column in ("NAME", "STATE", "ANSWERED BY", "ON TIMEOUT", "TIME LEFT", "OPENED", "ASKS"):
        table.add_column(column, no_wrap=column != "ASKS")
    for w in waits:
        left = seconds(w["seconds_left"]) if w["state"] == "open" else "-"
        asks = "-" if w["request"] is None else json.dumps(w["request"], ensure_ascii=False)
        _row(
            table,
            w["name"],
            w["state"],
            ANSWERERS.get(w["answered_by"], w["answered_by"]),
            w["on_timeout"],
            left,
            w["created_at"].isoformat(timespec="seconds"),
            asks if len(asks) <= 200 else asks[:197] + "...",
        )
    return table
