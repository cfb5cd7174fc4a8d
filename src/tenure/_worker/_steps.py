"""A job's fenced steps, as one attempt sees them: what earlier attempts recorded (read once,
when the first step asks) and the checkpoints this attempt writes under its token.

A tool that uses ``ctx.step`` is written to be called again from the top: after a crash, a
takeover by another worker, or a suspension (``ctx.sleep``, ``ctx.wait_for``, a waitpoint).
Each step it already completed returns its recorded result without running again; the
first step not recorded runs, and its result is recorded with the same predicate as a
commit (owner + token + running + live lease). Zero rows there is the lease-lost path: the
result is never recorded, the attempt stops, and whoever owns the job now runs the step
again under the same side-effect key (``tool-job:{job}:{step}``).

The statements run on the worker's event loop and its store; a threaded tool's
``ctx.step_sync`` hands them to the loop (`run`) and waits, and runs the step's own
function in its own thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any, TypeVar

from .._errors import LeaseLost, PayloadError, PolicyError
from .._job import Job
from .._log import log_event
from .._payload import MAX_RESULT_BYTES, encode
from .._store import NewJob, NewStep, Store
from ._ownership import Ownership

logger = logging.getLogger("tenure.worker")

T = TypeVar("T")
# ToolRegistry.new_job: (tool, payload, key, priority, delay, concurrency key, tenant) → NewJob.
NewJobMaker = Callable[..., NewJob]
MAX_STEP_BYTES = MAX_RESULT_BYTES
MAX_DETAIL_BYTES = 2048


def step_detail(detail: Any, name: str) -> dict[str, Any]:
    """The content-free detail a step shows watchers, checked: a small JSON object."""
    if detail is None:
        return {}
    if not isinstance(detail, dict):
        raise PayloadError(f"step {name!r}: detail must be a dict, got {type(detail).__name__}")
    encode(detail, f"step {name!r} detail", MAX_DETAIL_BYTES)
    return detail


class Steps:
    """The worker's side of every job's steps: its store, its name, its event loop, and how
    its registry turns a tool call into a job (checked against the tool's signature and policy)."""

    __slots__ = ("loop", "new_job", "owner", "store")

    def __init__(
        self,
        store: Store,
        owner: str,
        loop: asyncio.AbstractEventLoop,
        new_job: NewJobMaker | None = None,
    ) -> None:
        self.store = store
        self.owner = owner
        self.loop = loop
        self.new_job = new_job

    def checkpoints(self, job_id: int, token: int, ownership: Ownership) -> Checkpoints:
        return Checkpoints(self, job_id, token, ownership)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the worker's loop from a tool's thread and wait for it."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise PolicyError("the *_sync steps are for threaded tools; an async tool awaits")
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result()


class Checkpoints:
    """One attempt's steps: the recorded ones by name (loaded once) and the writes."""

    def __init__(self, steps: Steps, job_id: int, token: int, ownership: Ownership) -> None:
        self._steps = steps
        self.job_id = job_id
        self.token = token
        self._ownership = ownership
        self._recorded: dict[str, Any] | None = None
        self._loading: asyncio.Future[dict[str, Any]] | None = None

    @property
    def steps(self) -> Steps:
        return self._steps

    async def recorded(self) -> dict[str, Any]:
        """What earlier attempts recorded, read from the database on first use."""
        if self._recorded is not None:
            return self._recorded
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_future()
            try:
                found = await self._steps.store.job_steps(self.job_id)
            except BaseException as exc:
                loading, self._loading = self._loading, None
                loading.set_exception(exc)
                loading.exception()  # retrieved: concurrent steps get it, nobody else must
                raise
            self._recorded = found
            self._loading.set_result(found)
            return found
        return await asyncio.shield(self._loading)

    async def lookup(self, name: str) -> tuple[bool, Any]:
        recorded = await self.recorded()
        if name in recorded:
            return True, recorded[name]
        return False, None

    async def start(self, name: str, child: NewJob) -> int:
        """Queue a child job and record the step that started it (one fenced transaction):
        the child's id. LeaseLost when the job is no longer this attempt's."""
        step = NewStep(
            job_id=self.job_id,
            token=self.token,
            name=name,
            result_json="null",
            duration_ms=0,  # a start takes one statement; the child's own row says the rest
            kind="start",
            detail={"tool": child.tool},
        )
        verdict, child_id = await self._steps.store.start_child(self._steps.owner, child, step)
        if verdict == "refused":
            self._refused(name)
        await self.recorded()
        assert self._recorded is not None
        self._recorded[name] = child_id
        return int(child_id)

    async def children(self, ids: list[int]) -> dict[int, Job]:
        """This job's children among ``ids``, as their rows stand now."""
        return await self._steps.store.child_outcomes(self.job_id, ids)

    def _refused(self, name: str) -> None:
        self._ownership.mark_lost("zero_rows")
        log_event(
            logger,
            "step_rejected",
            level=logging.WARNING,
            job=self.job_id,
            token=self.token,
            worker=self._steps.owner,
            step=name,
        )
        raise LeaseLost(f"step {name!r} was not recorded: the lease is lost (zero rows)")

    async def record(
        self,
        name: str,
        value: Any,
        seconds: float,
        kind: str = "step",
        detail: Callable[[Any], Any] | dict[str, Any] | None = None,
    ) -> Any:
        """Record the step's result under this attempt's token; the JSON value a replay
        will return. PayloadError for a result that is not JSON or too large (nothing is
        recorded); LeaseLost when the database refused the write (zero rows)."""
        text = encode(value, f"step {name!r} result", MAX_STEP_BYTES)
        result = json.loads(text)
        shown = step_detail(detail(result) if callable(detail) else detail, name)
        step = NewStep(
            job_id=self.job_id,
            token=self.token,
            name=name,
            result_json=text,
            duration_ms=max(0, round(seconds * 1000)),
            kind=kind,
            detail=shown,
        )
        # Shielded: a step that ran is offered to the database even if the call is being
        # stopped meanwhile (a lost lease, a shutdown); the fenced statement decides.
        return await asyncio.shield(self._write(step, result))

    async def _write(self, step: NewStep, result: Any) -> Any:
        verdict, first = await self._steps.store.record_step(self._steps.owner, step)
        if verdict == "refused":
            self._refused(step.name)
        if verdict == "replayed":
            result = first
        assert self._recorded is not None
        self._recorded[step.name] = result
        return result


JOB_TIMES = ("lease_until", "heartbeat_at", "run_after", "created_at", "updated_at", "finished_at")
RECORDED_JOB_FIELDS = (
    "id",
    "tool",
    "state",
    "idempotency_key",
    "attempt",
    "max_attempts",
    "token",
    "owner",
    "priority",
    "error",
    "tenant",
    "result",
    *JOB_TIMES,
)


def job_record(job: Job) -> dict[str, Any]:
    """A child's final row as a wait's checkpoint holds it: JSON, never its payload."""
    record: dict[str, Any] = {}
    for name in RECORDED_JOB_FIELDS:
        value = getattr(job, name)
        record[name] = value.isoformat() if isinstance(value, datetime) else value
    return record


def job_of_record(record: dict[str, Any]) -> Job:
    """The `Job` a wait's checkpoint describes (payload None, as it was never recorded)."""
    fields: dict[str, Any] = {name: record.get(name) for name in RECORDED_JOB_FIELDS}
    for name in JOB_TIMES:
        if fields[name] is not None:
            fields[name] = datetime.fromisoformat(fields[name])
    return Job(**fields, payload=None)
