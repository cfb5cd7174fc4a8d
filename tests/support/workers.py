"""Real worker processes for fault tests: spawn, kill, pause, resume, read their logs.

Each worker is ``python -m tenure worker MODULE:APP`` in its own process, with
``TENURE_DSN`` in its environment and stdout/stderr going to a log file of its
own, so a test can SIGKILL or SIGSTOP it exactly as an operator (or the kernel)
would. `WorkerGroup` is a context manager that always cleans up: stopped
workers are continued, then every survivor is killed and reaped.

Both are ``tenure chaos``'s own harness (`tenure._chaos._harness`: `Workers`,
`WorkerHandle`) with the suite's defaults; what is added here is only what tests
read: worker log lines are ``event=... job=... token=...`` key=value lines (see
``tenure._log``), which `WorkerProcess.events` parses.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tenure._chaos._harness import WorkerHandle, Workers

from .waiting import wait_until

__all__ = [
    "PROTOCOL_KINDS",
    "REPO_ROOT",
    "Journal",
    "WorkerGroup",
    "WorkerProcess",
    "aclosing_app",
    "closing_app",
    "parse_event",
    "wait_job",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_APP = "tests.apps.fault_app:app"

_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def parse_event(line: str) -> dict[str, str] | None:
    """``ts=... event=x job=1 reason="a b"`` → {"ts": ..., "event": "x", "job": "1", ...}."""
    line = line.strip()
    if not line.startswith("event=") and not re.match(r"ts=\S+ event=", line):
        return None
    fields: dict[str, str] = {}
    for key, value in _FIELD.findall(line):
        fields[key] = json.loads(value) if value.startswith('"') else value
    return fields


class WorkerProcess(WorkerHandle):
    """One worker process and its log file; it has started once its log says so."""

    def events(self, kind: str | None = None, **match: object) -> list[dict[str, str]]:
        """Parsed event lines, optionally only of ``kind`` and with fields equal to ``match``."""
        found = []
        for line in self.log().splitlines():
            event = parse_event(line)
            if event is None or (kind is not None and event.get("event") != kind):
                continue
            if all(event.get(k) == str(v) for k, v in match.items()):
                found.append(event)
        return found

    def has_event(self, kind: str, **match: object) -> bool:
        return bool(self.events(kind, **match))

    def has_started(self) -> bool:
        return self.has_event("worker_started")

    def wait_event(self, kind: str, timeout: float = 10.0, **match: object) -> dict[str, str]:
        """Poll the log until an event of ``kind`` (with ``match``) appears; return it."""
        wait_until(
            lambda: self.has_event(kind, **match) or not self.alive,
            timeout=timeout,
            interval=0.02,
            message=f"{self.name}: no {kind} {match} in its log\n{self.log()[-3000:]}",
        )
        found = self.events(kind, **match)
        assert found, (
            f"{self.name} exited (rc={self.proc.poll()}) before {kind} {match}:\n"
            + (self.log()[-3000:])
        )
        return found[0]


class WorkerGroup(Workers[WorkerProcess]):
    """Spawns plain ``tenure worker`` processes for one test (one at a time by default,
    logging at DEBUG) and guarantees they are all gone afterwards: killed, not asked."""

    handle = WorkerProcess
    graceful = False
    log_mode = "wb"

    def __init__(self, dsn: str, log_dir: Path, *, app: str = DEFAULT_APP) -> None:
        # Tests read every claim and outcome from the log, routine ones included.
        env = {"TENURE_LOG_LEVEL": "DEBUG"}
        super().__init__(dsn, log_dir, app, concurrency=1, grace=None, env=env, cwd=REPO_ROOT)
        self.log_dir = log_dir

    def command(self, name: str) -> list[str]:
        return [sys.executable, "-m", "tenure", "worker"]

    def history_of(self, name: str, pid: int) -> Path | None:
        return None

    def logs(self) -> str:
        """Every worker's log, for assertion messages."""
        return "\n".join(f"--- {w.name} (rc={w.proc.poll()})\n{w.log()}" for w in self)


# Claims, outcomes and refused outcomes: every journal entry that records a write to a
# job's row (or an attempt at one).
PROTOCOL_KINDS = frozenset(
    {"job_claimed", "retried", "released", "succeeded", "failed", "cancelled", "result_rejected"}
)


class Journal:
    """Reads tenure's tables directly, the way an operator would at 02:00."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def _rows(self, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        with psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row) as conn:
            return conn.execute(query, params).fetchall()

    def events(self, job_id: int, kind: str | None = None) -> list[dict[str, Any]]:
        """The job's journal, oldest first (optionally one kind only)."""
        return self._rows(
            "SELECT * FROM tenure_events WHERE job_id = %(id)s"
            " AND (%(kind)s::text IS NULL OR kind = %(kind)s::text) ORDER BY id",
            {"id": job_id, "kind": kind},
        )

    def kinds(self, job_id: int) -> list[str]:
        return [e["kind"] for e in self.events(job_id)]

    def protocol_events(self, job_id: int) -> list[dict[str, Any]]:
        """Only the events that change or try to change the row (`PROTOCOL_KINDS`), so
        that informational entries (lease_expired, heartbeat_lost, ...) may be added to
        the journal without breaking assertions about what happened to the job."""
        return [e for e in self.events(job_id) if e["kind"] in PROTOCOL_KINDS]

    def protocol_kinds(self, job_id: int) -> list[str]:
        return [e["kind"] for e in self.protocol_events(job_id)]

    def job(self, job_id: int) -> dict[str, Any]:
        """The job's row, its lease as the database decides it: a lease that follows its
        owner's session (migration 0023) shows the session's last beat and the end it
        gives, as `tenure jobs show` does."""
        rows = self._rows(
            "SELECT j.*, tenure_lease_end(j.lease_until, j.lease_ms, s.beat_at) AS lease_end,"
            " CASE WHEN j.lease_ms IS NULL THEN j.heartbeat_at"
            "      ELSE greatest(j.heartbeat_at, s.beat_at) END AS beat_at"
            " FROM tenure_jobs j LEFT JOIN tenure_sessions s ON s.owner = j.owner"
            " WHERE j.id = %(id)s",
            {"id": job_id},
        )
        assert rows, f"no job {job_id}"
        row = rows[0]
        if row["state"] == "running":
            row["lease_until"], row["heartbeat_at"] = row["lease_end"], row["beat_at"]
        del row["lease_end"], row["beat_at"]
        return row


def closing_app(app: Any) -> Iterator[Any]:
    """Yield a producer App and close it afterwards (for ``yield from`` in fixtures)."""
    try:
        yield app
    finally:
        app.close()


async def aclosing_app(app: Any) -> AsyncIterator[Any]:
    """`closing_app` for an async test: the App's connections on the test's event loop are
    closed on that loop, before it is. Left to the loop's teardown, the pool's tasks are
    cancelled mid-connect, which can hang that teardown on a loaded machine."""
    try:
        yield app
    finally:
        await app.aclose()
        app.close()


def wait_job(
    journal: Journal,
    job_id: int,
    predicate: Callable[[dict[str, Any]], bool],
    what: str = "",
    workers: WorkerGroup | None = None,
    timeout: float = 20.0,
) -> dict[str, Any]:
    """Poll the job's row until ``predicate(row)``; return that row. On failure the message
    carries the last row, the job's journal and the workers' logs."""
    seen: dict[str, Any] = {}

    def check() -> bool:
        seen["row"] = journal.job(job_id)
        return predicate(seen["row"])

    try:
        wait_until(check, timeout=timeout, interval=0.02, message=f"job {job_id}: {what}")
    except AssertionError as exc:
        row = seen.get("row", {})
        state = {k: row.get(k) for k in ("state", "owner", "token", "attempt", "error")}
        logs = workers.logs() if workers is not None else ""
        raise AssertionError(
            f"{exc}\nlast row: {state}\njournal: {journal.kinds(job_id)}\n{logs}"
        ) from None
    last: dict[str, Any] = seen["row"]
    return last
