"""The job as callers see it: a frozen snapshot of one row."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from ._states import TERMINAL_STATES, JobState


@dataclass(frozen=True, slots=True)
class Job:
    """One tool call. ``payload`` and ``result`` are left out of ``repr`` so that
    logging a job never prints what the tool was given or returned."""

    id: int
    tool: str
    state: JobState
    idempotency_key: str
    attempt: int
    max_attempts: int
    token: int
    owner: str | None
    lease_until: datetime | None
    heartbeat_at: datetime | None
    run_after: datetime
    priority: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    error: dict[str, Any] | None
    tenant: str  # '' when the job was queued without one
    payload: Any = field(repr=False)
    result: Any = field(repr=False)
    created: bool = True  # False when enqueue found an existing job under the same key
    # The last progress its current owner reported ({"done", "total", "message", "at"}),
    # kept after it ended; None until a tool reports any. The message is the tool's text.
    progress: dict[str, Any] | None = field(default=None, repr=False)
    # Its waitpoints that were answered or timed out, by name (see App.answer_waitpoint).
    waitpoints: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Job:
        return cls(**{f.name: row[f.name] for f in fields(cls) if f.name in row})


@dataclass(frozen=True, slots=True)
class Enqueued:
    """One call of a bulk enqueue: its job's id, its key, and whether this enqueue created
    it (False: the key already named a job, which is the one returned)."""

    id: int
    idempotency_key: str
    created: bool
