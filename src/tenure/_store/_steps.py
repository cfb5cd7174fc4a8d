"""Fenced steps: a job's checkpoints, read once per attempt and written under its token
(queries/steps.sql)."""

from __future__ import annotations

from typing import Any, Literal, cast

from psycopg.types.json import Jsonb

from ._base import StoreBase
from ._connection import FINISH_TIMEOUT
from ._rows import NewStep, StepRow

StepVerdict = Literal["recorded", "replayed", "refused"]


class StepStatements(StoreBase):
    """One method per statement of queries/steps.sql."""

    async def job_steps(self, job_id: int) -> dict[str, Any]:
        """The job's recorded steps: name → JSON result."""
        rows = await self._fetch("job_steps", {"job_id": job_id})
        return {row["name"]: row["result"] for row in rows}

    async def record_step(self, owner: str, step: NewStep) -> tuple[StepVerdict, Any]:
        """Record one step under the job's token: ``recorded`` (its result is the one given),
        ``replayed`` (an earlier attempt recorded it first: its result is returned) or
        ``refused`` (zero rows: the lease is lost, nothing was written)."""
        rows = await self._fetch(
            "record_step",
            {
                "id": step.job_id,
                "token": step.token,
                "owner": owner,
                "name": step.name,
                "kind": step.kind,
                "result": Jsonb(step.result_json, dumps=str),
                "duration_ms": step.duration_ms,
                "detail": Jsonb(step.detail or {}),
            },
            FINISH_TIMEOUT,
        )
        row = rows[0]
        if not row["owned"]:
            return "refused", None
        if not row["recorded"]:
            return "replayed", row["first"]
        return "recorded", None

    async def job_step_rows(self, job_id: int, limit: int) -> list[StepRow]:
        rows = await self._fetch("job_step_rows", {"job_id": job_id, "limit": limit})
        return cast(list[StepRow], rows)
