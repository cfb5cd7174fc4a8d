"""Waitpoints: a call suspends, an answer or its deadline resumes it (queries/waitpoints.sql)."""

from __future__ import annotations

from typing import cast

from .._errors import ConfigError
from .._job import Job
from ._base import StoreBase
from ._connection import (
    FINISH_TIMEOUT,
)
from ._rows import (
    Finish,
    JobWaitpoint,
)


class WaitpointStatements(StoreBase):
    """One method per statement of queries/waitpoints.sql."""

    # -- waitpoints ----------------------------------------------------------------

    async def waitpoint_secret(self) -> bytes:
        """The key waitpoint tokens are derived with (made by migration 0008). Only a role
        that may change jobs reads it (migration 0014): ConfigError for one that may not."""
        rows = await self._fetch("waitpoint_secret", {})
        if not rows:
            raise ConfigError(
                "this database role cannot read tenure's waitpoint key: tenure_secrets shows "
                "it only to roles with UPDATE on tenure_jobs (workers, producers, the MCP "
                "server); grant them as docs/operations/roles.md says"
            )
        return str(rows[0]["value"]).encode()

    async def suspend(self, owner: str, finish: Finish) -> bool:
        """The fenced commit of a call that suspends; False: the lease was lost. A wait for
        child jobs is committed by its own statement (suspend_for_children), which queues
        the job again at once when every child had already ended. A database error is
        raised as its StoreError (the completer acts on its verdict)."""
        wp = finish.waitpoint
        assert wp is not None
        params = {
            "id": finish.job_id,
            "token": finish.token,
            "owner": owner,
            "name": wp.name,
            "token_hash": wp.token_hash,
            "timeout_ms": wp.timeout_ms,
            "on_timeout": wp.on_timeout,
            "progress": finish.progress_json,
        }
        if wp.kind == "children":
            params["children"] = list(wp.waiting_on)
            rows = await self._fetch("suspend_for_children", params, FINISH_TIMEOUT)
        else:
            params |= {
                "request": wp.request_json,
                "answered_by": wp.answered_by,
                "answer_schema": wp.answer_schema_json,
                "kind": wp.kind,
            }
            rows = await self._fetch("suspend_job", params, FINISH_TIMEOUT)
        return bool(rows)

    async def resume_children_waits(self, limit: int) -> list[int]:
        """The backstop: answer open children waits none of whose children is still going."""
        rows = await self._fetch("resume_children_waits", {"limit": limit})
        return [int(row["id"]) for row in rows]

    async def complete_waitpoint(self, token_hash: str, answer_json: str) -> Job | None:
        """Answer an open waitpoint (compare-and-set); its job as the answer left it (queued
        again), or None when no open waitpoint has this token (unknown, answered, timed
        out or cancelled), or it is a sleep or a wait for children, which only their
        deadline or their children end. Database errors as StoreErrors (a read-only role's:
        PermissionDenied)."""
        return await self._complete(
            {"token_hash": token_hash, "job_id": None, "name": None, "tenant": None}, answer_json
        )

    async def answer_caller_waitpoint(
        self, job_id: int, name: str, tenant: str, answer_json: str
    ) -> Job | None:
        """As `complete_waitpoint`, for the job's caller: the open waitpoint ``name`` of job
        ``job_id`` of ``tenant``, only if it was declared answered by its caller."""
        return await self._complete(
            {"token_hash": None, "job_id": job_id, "name": name, "tenant": tenant}, answer_json
        )

    async def _complete(self, where: dict[str, object], answer_json: str) -> Job | None:
        rows = await self._fetch("complete_waitpoint", {**where, "answer": answer_json})
        return Job.from_row(rows[0]) if rows else None

    async def expire_waitpoints(self, limit: int) -> list[int]:
        """Resume or fail the jobs of open waitpoints past their deadline (one batch)."""
        return [int(row["id"]) for row in await self._fetch("expire_waitpoints", {"limit": limit})]

    async def job_waitpoints(self, job_id: int) -> list[JobWaitpoint]:
        """A job's waitpoints; ConnectionLost when the link breaks (a watcher reads again)."""
        rows = await self._fetch("job_waitpoints", {"job_id": job_id})
        return cast(list[JobWaitpoint], rows)
