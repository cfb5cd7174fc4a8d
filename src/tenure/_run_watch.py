"""Watching a durable run: its steps, its child jobs, its waits and its end, as events.

A run (an agent run of `TenureDurability` or `TenureRunner`, or any tool that uses steps)
tells its watchers to look again whenever it records a step, a child of it ends, it
reports progress, suspends or ends (all notify ``tenure_progress`` or ``tenure_done`` in
their own transaction). `follow_run` then reads the run's row, its steps and its children,
and yields what is new, in order: an event says what happened, never a tool's payload; the
run's final output is in the last event, for whoever started the run.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ._job import Job
from ._states import TERMINAL_STATES
from ._store import ChildRow, JobWaitpoint, StepRow, Store
from ._waiting import Deadline, Waiters, reread

MAX_ROWS = 10_000  # steps and children read per look: a run bigger than this is not watched whole

RunEventKind = Literal[
    "model_step", "tool_started", "tool_finished", "step", "progress", "waiting", "output", "ended"
]


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One thing that happened in a durable run, as `App.watch_run` yields it.

    ``kind``: ``model_step`` (a model answered: ``detail`` has the usage it reported),
    ``tool_started`` / ``tool_finished`` (a tool call; ``job_id`` is the child job's for a
    tenure tool, the run's for a function tool, which is seen once it finished), ``step``
    (any other recorded step), ``progress`` (the run's reported progress), ``waiting`` (the
    run suspended: ``detail`` names the wait and its kind, ``answer`` for a person's
    approval, ``sleep`` or ``children``), then ``output`` (``detail["output"]``: the run's
    result) or ``ended`` (failed or cancelled: ``detail`` has the state and error code).
    ``step`` is the recorded step's name; ``at``, when it happened (database clock).
    """

    kind: RunEventKind
    job_id: int
    step: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class _Look:
    """What one look at a run reads: its row, steps, children and (waiting) waitpoints."""

    job: Job
    steps: list[StepRow]
    children: list[ChildRow]
    waits: list[JobWaitpoint]


async def _look(store: Store, run_id: int) -> _Look:
    job = await store.get_job(run_id)
    steps = await store.job_step_rows(run_id, MAX_ROWS)
    children = await store.job_children(run_id, MAX_ROWS)
    waits = await store.job_waitpoints(run_id) if job.state == "waiting" else []
    return _Look(job, steps, children, waits)


async def follow_run(
    store: Store, waiters: Waiters, run_id: int, deadline: Deadline
) -> AsyncIterator[RunEvent]:
    """Yield the run's events from its start until it ended (see `RunEvent`). A look that
    a restart or a cut link breaks is taken again (`reread`), as a waiter's read is."""
    steps_seen: set[str] = set()
    children: dict[int, str] = {}
    progress: Any = None
    waiting: tuple[str, ...] | None = None
    async for _ in waiters.wakeups([run_id], deadline):
        look = await reread(functools.partial(_look, store, run_id), deadline)
        job = look.job
        for row in look.steps:
            if row["name"] in steps_seen:
                continue
            steps_seen.add(row["name"])
            if row["kind"] in ("start", "wait"):
                continue  # a child job's start and end are told from the child itself
            kind: RunEventKind = {"model": "model_step", "tool": "tool_finished"}.get(
                row["kind"], "step"
            )  # type: ignore[assignment]
            detail = {**row["detail"], "duration_ms": row["duration_ms"]}
            yield RunEvent(kind, run_id, row["name"], detail, row["recorded_at"])
        for child in look.children:
            before = children.get(child["id"])
            children[child["id"]] = child["state"]
            about = {"tool": child["tool"], "state": child["state"], "attempt": child["attempt"]}
            if before is None:
                yield RunEvent("tool_started", child["id"], None, about, child["created_at"])
            if child["state"] in TERMINAL_STATES and before not in TERMINAL_STATES:
                about["code"] = child["code"]
                yield RunEvent("tool_finished", child["id"], None, about, child["finished_at"])
        if job.progress is not None and job.progress != progress:
            progress = job.progress
            yield RunEvent("progress", run_id, None, dict(job.progress), None)
        if job.state == "waiting":
            opened = [w for w in look.waits if w["state"] == "open"]
            names = tuple(w["name"] for w in opened)
            if opened and names != waiting:
                waiting = names
                wait = opened[-1]
                about = {"waitpoint": wait["name"], "kind": wait["kind"]}
                yield RunEvent("waiting", run_id, None, about, wait["created_at"])
        else:
            waiting = None
        if job.state in TERMINAL_STATES:
            if job.state == "succeeded":
                yield RunEvent("output", run_id, None, {"output": job.result}, job.finished_at)
            else:
                code = (job.error or {}).get("code", job.state)
                about = {"state": job.state, "code": code}
                yield RunEvent("ended", run_id, None, about, job.finished_at)
            return
