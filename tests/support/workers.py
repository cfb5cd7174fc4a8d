"""Real worker processes for fault tests: spawn, kill, pause, resume, read their logs.

Each worker is ``python -m tenure worker MODULE:APP`` in its own process, with
``TENURE_DSN`` in its environment and stdout/stderr going to a log file of its
own, so a test can SIGKILL or SIGSTOP it exactly as an operator (or the kernel)
would. `WorkerGroup` is a context manager that always cleans up: stopped
workers are continued, then every survivor is killed and reaped.

Worker log lines are ``event=... job=... token=...`` key=value lines (see
``tenure._log``); `WorkerProcess.events` parses them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import psycopg
from psycopg.rows import dict_row

from .waiting import wait_until

__all__ = [
    "PROTOCOL_KINDS",
    "REPO_ROOT",
    "Journal",
    "WorkerGroup",
    "WorkerProcess",
    "closing_app",
    "parse_event",
    "wait_job",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_APP = "tests.apps.fault_app:app"
START_TIMEOUT = 20.0
EXIT_TIMEOUT = 10.0

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


class WorkerProcess:
    """One worker process and its log file."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.name = name
        self.proc = proc
        self.log_path = log_path
        self.paused = False

    def __repr__(self) -> str:
        return f"<WorkerProcess {self.name} pid={self.proc.pid} rc={self.proc.poll()}>"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    # -- the log ---------------------------------------------------------------

    def log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

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

    def wait_started(self, timeout: float = START_TIMEOUT) -> None:
        self.wait_event("worker_started", timeout=timeout)

    # -- signals ---------------------------------------------------------------

    def signal(self, sig: signal.Signals) -> None:
        if self.alive:
            os.kill(self.proc.pid, sig)

    def kill(self) -> int:
        """SIGKILL, then reap; returns the exit status (-9)."""
        self.signal(signal.SIGKILL)
        return self.wait(EXIT_TIMEOUT)

    def pause(self) -> None:
        """SIGSTOP: the whole process freezes, heartbeat thread included."""
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT."""
        self.signal(signal.SIGCONT)
        self.paused = False

    def terminate(self) -> None:
        """SIGTERM: the worker's graceful shutdown."""
        self.signal(signal.SIGTERM)

    def wait(self, timeout: float = EXIT_TIMEOUT) -> int:
        """Wait for the process to exit; raises subprocess.TimeoutExpired past ``timeout``."""
        return self.proc.wait(timeout)

    def stop(self) -> None:
        """Cleanup: continue it if stopped, then SIGKILL it if still alive, and reap."""
        if self.alive:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:  # pragma: no cover - a zombie we cannot reap
            pass


class WorkerGroup:
    """Spawns workers for one test and guarantees they are all gone afterwards."""

    def __init__(self, dsn: str, log_dir: Path, *, app: str = DEFAULT_APP) -> None:
        self.dsn = dsn
        self.log_dir = log_dir
        self.app = app
        self.workers: dict[str, WorkerProcess] = {}
        self._files: list[IO[bytes]] = []

    def spawn(
        self,
        name: str,
        *,
        concurrency: int = 1,
        poll_interval: float = 0.2,
        grace: float | None = None,
        dsn: str | None = None,
        env: dict[str, str] | None = None,
    ) -> WorkerProcess:
        """Start ``tenure worker`` named ``name`` (it is not waited for; see wait_started)."""
        if name in self.workers:
            raise ValueError(f"worker {name!r} already exists")
        command = [
            sys.executable,
            "-m",
            "tenure",
            "worker",
            self.app,
            "--concurrency",
            str(concurrency),
            "--name",
            name,
            "--poll-interval",
            str(poll_interval),
        ]
        if grace is not None:
            command += ["--grace", str(grace)]
        log_path = self.log_dir / f"worker-{name}.log"
        log = open(log_path, "wb")  # closed by close()
        self._files.append(log)
        child_env = {
            **os.environ,
            "TENURE_DSN": dsn or self.dsn,
            "PYTHONUNBUFFERED": "1",
            # Tests read every claim and outcome from the log, routine ones included.
            "TENURE_LOG_LEVEL": "DEBUG",
            **(env or {}),
        }
        child_env.pop("TENURE_LOG_FORMAT", None)  # tests parse key=value lines
        proc = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        worker = WorkerProcess(name, proc, log_path)
        self.workers[name] = worker
        return worker

    def __getitem__(self, name: str) -> WorkerProcess:
        return self.workers[name]

    def __iter__(self) -> Iterator[WorkerProcess]:
        return iter(list(self.workers.values()))

    def logs(self) -> str:
        """Every worker's log, for assertion messages."""
        return "\n".join(f"--- {w.name} (rc={w.proc.poll()})\n{w.log()}" for w in self)

    def close(self) -> None:
        for worker in self:
            if worker.alive:
                try:
                    os.kill(worker.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        for worker in self:
            worker.stop()
        for log in self._files:
            log.close()
        self._files.clear()

    def __enter__(self) -> WorkerGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


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
            return conn.execute(query, params).fetchall()  # type: ignore[arg-type]

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
        rows = self._rows("SELECT * FROM tenure_jobs WHERE id = %(id)s", {"id": job_id})
        assert rows, f"no job {job_id}"
        return rows[0]


def closing_app(app: Any) -> Iterator[Any]:
    """Yield a producer App and close it afterwards (for ``yield from`` in fixtures)."""
    try:
        yield app
    finally:
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
    return seen["row"]
