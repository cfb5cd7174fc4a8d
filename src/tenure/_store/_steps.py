"""Fenced steps: a job's checkpoints, read once per attempt and written under its token
(queries/steps.sql)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal, cast

from psycopg.types.json import Jsonb

from .._job import Job
from ._base import StoreBase
from ._connection import FINISH_TIMEOUT, rows_of
from ._jobs import enqueued
from ._rows import ChildRow, NewJob, NewStep, StepRow

StepVerdict = Literal["recorded", "replayed", "refused"]


class StepStatements(StoreBase):
    """One method per statement of queries/steps.sql."""

    # A tool's ctx.step, ctx.enqueue and ctx.wait_for run these statements: each database
    # error reaches the tool as its StoreError (verdict and all, `_errors.RULES`), as a
    # commit's does, never as a psycopg error.

    async def job_steps(self, job_id: int) -> dict[str, Any]:
        """The job's recorded steps: name → JSON result."""
        rows = await self._fetch("job_steps", {"job_id": job_id})
        return {row["name"]: row["result"] for row in rows}

    async def record_step(self, owner: str, step: NewStep) -> tuple[StepVerdict, Any]:
        """Record one step under the job's token: ``recorded`` (its result is the one given),
        ``replayed`` (an earlier attempt recorded it first: its result is returned) or
        ``refused`` (zero rows: the lease is lost, nothing was written)."""
        rows = await self._fetch("record_step", _step_params(owner, step), FINISH_TIMEOUT)
        return _step_verdict(rows[0])

    async def start_child(
        self, owner: str, child: NewJob, step: NewStep
    ) -> tuple[StepVerdict, Any]:
        """Queue ``child`` for a running job and record the step that started it (its result:
        the child's id), in one transaction that begins by locking the job under the
        fenced predicate: ``refused`` (the lease is lost) writes neither. The child's key
        makes a repeated start find the same job; IdempotencyConflict, QuotaExceeded and
        PayloadError roll everything back; a database error is its StoreError."""
        async with self._pool.connection() as conn, conn.transaction():
            fence = {"id": step.job_id, "token": step.token, "owner": owner}
            if not await rows_of(conn, "lock_owned_job", fence):
                return "refused", None
            rows = await rows_of(conn, "enqueue", child.params())
            if not rows:
                params = {"key": child.key, "tenant": child.tenant}
                rows = await rows_of(conn, "job_by_key", params)
            job = enqueued(child, rows)
            detail = {**(step.detail or {}), "job": job.id}  # the run page links to it
            step = replace(step, result_json=str(job.id), detail=detail)
            recorded = await rows_of(conn, "record_step", _step_params(owner, step))
        verdict, first = _step_verdict(recorded[0])
        return verdict, job.id if verdict == "recorded" else first

    async def child_outcomes(self, parent: int, ids: list[int]) -> dict[int, Job]:
        """The rows of ``parent``'s children among ``ids`` (never their payload), by id."""
        rows = await self._fetch("child_outcomes", {"ids": ids, "parent": parent})
        return {row["id"]: Job.from_row({**row, "payload": None}) for row in rows}

    # What a watcher reads (App.watch_run, the run page) raises ConnectionLost, never a
    # driver error, when the link breaks: the watcher reads again.

    async def job_step_rows(self, job_id: int, limit: int) -> list[StepRow]:
        rows = await self._fetch("job_step_rows", {"job_id": job_id, "limit": limit})
        return cast(list[StepRow], rows)

    async def job_children(self, job_id: int, limit: int) -> list[ChildRow]:
        rows = await self._fetch("job_children", {"job_id": job_id, "limit": limit})
        return cast(list[ChildRow], rows)


def _step_params(owner: str, step: NewStep) -> dict[str, Any]:
    return {
        "id": step.job_id,
        "token": step.token,
        "owner": owner,
        "name": step.name,
        "kind": step.kind,
        "result": Jsonb(step.result_json, dumps=str),
        "duration_ms": step.duration_ms,
        "detail": Jsonb(step.detail or {}),
    }


def _step_verdict(row: dict[str, Any]) -> tuple[StepVerdict, Any]:
    if not row["owned"]:
        return "refused", None
    if not row["recorded"]:
        return "replayed", row["first"]
    return "recorded", None
