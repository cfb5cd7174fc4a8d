"""The history: what every process of a chaos run saw, in local JSON-lines files.

Nothing here touches the database under test: a history that lives in the
faulted database would be faulted with it. Each worker process appends to its
own file ``{directory}/{worker}-{pid}.jsonl``, one ``os.write`` of one line per
event on a file opened with ``O_APPEND``, so a SIGKILL loses at most the event
being formed and lines never interleave.

Every line carries ``ev`` (the kind), ``job``, ``token``, ``worker``, ``pid``,
``wall`` (``time.time()``) and ``mono`` (``time.monotonic()``), plus the
event's own fields. ``wall``/``mono`` are the *process's* clocks: under a
faked clock (the storms' ``faketime``) they are the faked ones, which is the point
(the storms' checker compares a process's beliefs with its own clock, and with the
database's only through clock samples).

In a worker, `install` attaches a handler to tenure's telemetry
(`tenure._log.attach`), which sees every event the runtime emits — claims,
confirmed heartbeats (DEBUG, not logged but still handed to handlers), lost
leases, fenced sends, finished and abandoned calls, rejected commits.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .._log import Event, attach

HISTORY_ENV = "TENURE_CHAOS_HISTORY"

# The runtime events a history keeps (others are noise for the checker).
KEPT_EVENTS = frozenset(
    {
        "worker_started",
        "job_claimed",
        "heartbeat_ok",
        "heartbeat_lost",
        "heartbeat_withheld",
        "ownership_unknown",
        "tool_request_started",
        "call_finished",
        "call_abandoned",
        "commit_uncertain",
        "result_rejected",
        "claim_failed",
    }
)


class HistoryWriter:
    """Appends events as JSON lines to one file; safe from any thread, cheap per call."""

    def __init__(self, path: Path, *, worker: str | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.worker = worker
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._lock = threading.Lock()
        self._closed = False

    def write(self, ev: str, **fields: Any) -> None:
        record: dict[str, Any] = {
            "ev": ev,
            "worker": fields.pop("worker", None) or self.worker,
            "pid": os.getpid(),
            "wall": time.time(),
            "mono": time.monotonic(),
        }
        record.update({k: v for k, v in fields.items() if v is not None})
        line = (json.dumps(record, default=str, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if not self._closed:
                os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._fd)

    def on_event(self, event: Event) -> None:
        """A `tenure._log` handler: keep the events the checker reads."""
        if event.kind not in KEPT_EVENTS:
            return
        self.write(
            event.kind,
            job=event.job,
            token=event.token,
            attempt=event.attempt,
            worker=event.worker,
            **dict(event.fields),
        )


def install(directory: Path, worker: str, **clock: Any) -> HistoryWriter:
    """Record this process's runtime events under ``directory``; returns the writer.

    Writes a ``clock`` line first: the process's wall and monotonic clocks next
    to each other, and whatever else ``clock`` says of them (the storms add the
    skew a worker was given, from which their checker learns it).
    """
    writer = HistoryWriter(directory / f"{worker}-{os.getpid()}.jsonl", worker=worker)
    writer.write("clock", **clock)
    attach(writer.on_event)
    return writer


def read_history(directory: Path) -> list[dict[str, Any]]:
    """Every event of every file in ``directory``, in file order per file (a torn
    last line, from a SIGKILL mid-write, is skipped)."""
    events: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.jsonl")):
        events.extend(_lines(path))
    return events


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """A JSON-lines file as dicts ([] if it does not exist)."""
    return list(_lines(path)) if path.exists() else []


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, Mapping):
                yield dict(value)
