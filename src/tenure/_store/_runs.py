"""Pipeline runs: the transaction that moves a run on, and the reads (queries/pipeline.sql)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from .._job import Job
from ._base import StoreBase
from ._connection import (
    as_jsonb,
    from_row,
    rows_of,
    typed_errors,
    typed_methods,
)
from ._rows import (
    RunRow,
    StageRow,
    Transition,
)


class RunTransaction:
    """The statements of one transaction that moves runs on (see `Store.transaction`).

    Every writer of a run's stages calls `lock_run` first, so two transitions of
    one run serialise and each plans from a current picture of the run.
    """

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn

    async def insert_run(
        self, *, pipeline: str, key: str, input_json: str, input_hash: str, graph: dict[str, Any]
    ) -> int | None:
        """A new run's id, or None when the key is taken (the caller reads that run)."""
        rows = await rows_of(
            self._conn,
            "insert_run",
            {
                "pipeline": pipeline,
                "key": key,
                "input": Jsonb(input_json, dumps=str),
                "input_hash": input_hash,
                "graph": Jsonb(graph),
            },
        )
        return rows[0]["id"] if rows else None

    async def lock_run(self, run_id: int, *, skip_locked: bool = False) -> RunRow | None:
        """The run, locked until the transaction ends (None: no such run, or it is
        locked by another transaction and ``skip_locked`` says not to wait)."""
        name = "try_lock_run" if skip_locked else "lock_run"
        rows = await rows_of(self._conn, name, {"id": run_id})
        return from_row(RunRow, rows[0]) if rows else None

    async def stages(self, run_id: int) -> list[StageRow]:
        rows = await rows_of(self._conn, "run_stages", {"run_id": run_id})
        return [from_row(StageRow, row) for row in rows]

    async def apply(self, t: Transition) -> tuple[bool, bool]:
        """(the stage was open for this job, the transition was written)."""
        new = t.new
        rows = await rows_of(
            self._conn,
            "apply_transition",
            {
                "mode": t.mode,
                "run_id": t.run_id,
                "stage_id": t.stage_id,
                "stage_name": t.stage_name,
                "job_id": t.job_id,
                "token": t.token,
                "owner": t.owner,
                "expect_state": t.expect_state,
                "job_state": t.job_state,
                "result": as_jsonb(t.result_json),
                "error": None if t.error is None else Jsonb(t.error),
                "stage_state": t.stage_state,
                "decision": t.decision,
                "context": as_jsonb(t.context_json),
                "run_state": t.run_state,
                "run_result": as_jsonb(t.run_result_json),
                "run_error": None if t.run_error is None else Jsonb(t.run_error),
                "stop_open": t.stop_open,
                "names": [n.name for n in new],
                "rounds": [n.round for n in new],
                "kinds": [n.kind for n in new],
                "states": [n.state for n in new],
                "arrived": [Jsonb(list(n.arrived)) for n in new],
                "tools": [n.tool for n in new],
                "payloads": [n.payload_json for n in new],
                "payload_hashes": [n.payload_hash for n in new],
                "max_attempts": [n.max_attempts for n in new],
                "priorities": [n.priority for n in new],
            },
        )
        return bool(rows[0]["owned"]), bool(rows[0]["applied"])

    async def fail_exhausted_leases(self, limit: int) -> list[int]:
        rows = await rows_of(self._conn, "fail_exhausted_leases", {"limit": limit})
        return [row["id"] for row in rows]

    async def runs_to_rescue(self, limit: int, resend_after_ms: int) -> list[int]:
        rows = await rows_of(
            self._conn, "runs_to_rescue", {"limit": limit, "resend_after_ms": resend_after_ms}
        )
        return [row["id"] for row in rows]

    async def retry_job(self, job_id: int) -> bool:
        """Queue a failed job again with one more attempt (an outbox delivery re-sent)."""
        return bool(await rows_of(self._conn, "retry_job", {"id": job_id}))


typed_methods(RunTransaction)  # each statement's error is typed inside the caller's block


class RunStatements(StoreBase):
    """Runs and their stages, read and moved on."""

    # -- pipelines -------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def transaction(self, timeout: float) -> AsyncIterator[RunTransaction]:
        """One transaction in which no statement may run longer than ``timeout`` seconds.
        A database error, in the caller's statements or at commit, is its tenure error."""
        with typed_errors():
            async with self._pool.connection() as conn, conn.transaction():
                await rows_of(conn, "set_local_timeout", {"ms": max(1, round(timeout * 1000))})
                yield RunTransaction(conn)

    async def get_run(self, run_id: int) -> RunRow | None:
        rows = await self._fetch("get_run", {"id": run_id})
        return from_row(RunRow, rows[0]) if rows else None

    async def run_by_key(self, key: str) -> RunRow | None:
        rows = await self._fetch("run_by_key", {"key": key})
        return from_row(RunRow, rows[0]) if rows else None

    async def run_stages(self, run_id: int) -> list[StageRow]:
        rows = await self._fetch("run_stages", {"run_id": run_id})
        return [from_row(StageRow, row) for row in rows]

    async def jobs_by_ids(self, ids: Sequence[int]) -> list[Job]:
        rows = await self._fetch("jobs_by_ids", {"ids": list(ids)})
        return [Job.from_row(row) for row in rows]
