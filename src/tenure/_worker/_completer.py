"""Fenced commits, batched: whatever outcomes are waiting go out in one statement.

There is no artificial delay: while one statement is in flight, new outcomes
queue up and form the next batch, so batches grow exactly when the database
is the bottleneck. Each row is still guarded by owner + token + state + lease.

A commit the database refused (zero rows) is a *rejected result*: journaled,
never published. A statement that raised is judged by the store's verdict on
its error (`tenure._store.store_error`, one table):

- ``uncertain`` (no answer came): tried again while the lease may still hold, and
  a refusal after such a retry is checked against the row (the first try may
  have landed);
- ``retry`` (rolled back: a deadlock, a lock or statement timeout): tried again
  while the lease may still hold;
- ``fail`` (a constraint, a value the database cannot store, a missing privilege):
  sending it again cannot help, so it is never retried. A batch is split and each
  outcome committed alone; the one refused is committed instead as a failure that
  names the error's class (``bad_result`` for data, ``commit_refused`` otherwise),
  which ends the job and is journaled like any failure.

A pipeline stage's final outcome takes another road: its commit is one
transaction with the run's transition (see tenure._pipeline._engine), one per
stage, run alongside the batch; retries and releases of stage jobs stay in the
batch, since they change nothing about the run.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, Self

from .._errors import DataRejected, StoreError, TenureError
from .._log import log_event
from .._maintenance._supervisor import Signal
from .._store import ClaimedJob, Finish, Store, store_error
from ._ownership import Ownership

logger = logging.getLogger("tenure.completer")

MAX_BATCH = 500
COMMIT_TIMEOUT = 10.0
RETRY_PAUSE = 0.2


class StageCommitter(Protocol):
    """Commits a stage job's outcome with its run's transition (tenure's Transitions)."""

    def owns(self, job: ClaimedJob) -> bool: ...

    async def commit(self, owner: str, job: ClaimedJob, finish: Finish) -> bool | None: ...


@dataclass(eq=False, slots=True)
class _Pending:
    job: ClaimedJob
    finish: Finish
    ownership: Ownership
    done: asyncio.Future[bool]
    uncertain: bool = False  # a try got no answer: it may have landed
    refused: bool = False  # the database refused its outcome; now it commits a failure


class Completer:
    """The supervisor's ``completer`` component: one task commits batch after batch;
    ``signal`` fires after each batch."""

    name = "completer"

    def __init__(
        self,
        store: Store,
        owner: str,
        on_result: Callable[[str], None],
        stages: StageCommitter | None = None,
    ) -> None:
        self._store = store
        self._owner = owner
        self._stages = stages
        self._on_result = on_result
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.signal = Signal()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="tenure-completer")

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def commit(self, job: ClaimedJob, finish: Finish, ownership: Ownership) -> bool:
        """Queue one fenced outcome and wait for the database's verdict on it."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        ownership.committing = True
        self._queue.put_nowait(_Pending(job, finish, ownership, done))
        return await done

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            await self._flush(batch)
            self.signal.fire()

    async def _flush(self, batch: list[_Pending]) -> None:
        waiting = [p for p in batch if p.finish.state == "waiting"]
        staged = [p for p in batch if p.finish.state != "waiting" and self._is_stage(p)]
        plain = [p for p in batch if p.finish.state != "waiting" and not self._is_stage(p)]
        calls = [self._commit([p], functools.partial(self._suspend, p)) for p in waiting]
        calls += [self._commit([p], functools.partial(self._commit_stage, p)) for p in staged]
        if plain:
            calls.append(self._commit(plain, functools.partial(self._finish_many, plain)))
        await asyncio.gather(*calls)

    async def _suspend(self, pending: _Pending) -> dict[int, bool]:
        return {pending.job.id: await self._store.suspend(self._owner, pending.finish)}

    async def _finish_many(self, group: list[_Pending]) -> dict[int, bool]:
        return await self._store.finish_many(self._owner, [p.finish for p in group])

    def _is_stage(self, pending: _Pending) -> bool:
        return (
            self._stages is not None
            and pending.finish.state != "queued"
            and self._stages.owns(pending.job)
        )

    async def _commit_stage(self, pending: _Pending) -> dict[int, bool]:
        assert self._stages is not None
        try:
            accepted = await self._stages.commit(self._owner, pending.job, pending.finish)
        except Exception as exc:
            if store_error(exc) is not None:
                raise  # a database error: `_commit` acts on its verdict
            # A bug must not stop every later commit; the lease brings the job back.
            logger.exception("stage transition of job %d failed", pending.job.id)
            accepted = False
        if accepted is None:  # no stage after all: an ordinary fenced commit
            return await self._store.finish_many(self._owner, [pending.finish])
        return {pending.job.id: accepted}

    async def _commit(
        self, group: list[_Pending], call: Callable[[], Awaitable[dict[int, bool]]]
    ) -> None:
        started = time.monotonic()
        try:
            async with asyncio.timeout(COMMIT_TIMEOUT):  # not wait_for: it may swallow a cancel
                verdicts = await call()
        except Exception as exc:
            error = store_error(exc)
            if isinstance(error, StoreError) and error.verdict != "fail":
                await self._again(group, error)
            else:
                await self._refused(group, exc, error)
            return
        log_event(
            logger,
            "commit_answered",
            level=logging.DEBUG,
            worker=self._owner,
            jobs=len(group),
            duration=round(time.monotonic() - started, 6),
        )
        for pending in group:
            await self._settle(pending, verdicts.get(pending.job.id, False))

    async def _again(self, group: list[_Pending], error: StoreError) -> None:
        """No answer (uncertain) or rolled back (retry): the same outcome again, after a
        pause, while the lease may still hold; past it, the outcome is settled as refused
        (after checking whether an unanswered try landed)."""
        for pending in group:
            pending.uncertain = pending.uncertain or error.verdict == "uncertain"
            if pending.ownership.remaining() > 0:
                log_event(
                    logger,
                    "commit_uncertain" if error.verdict == "uncertain" else "commit_retried",
                    job=pending.job,
                    worker=self._owner,
                    error=type(error).__name__,
                    sqlstate=error.sqlstate,
                )
                asyncio.get_running_loop().call_later(RETRY_PAUSE, self._queue.put_nowait, pending)
            else:
                await self._settle(pending, False)

    async def _refused(
        self, group: list[_Pending], exc: Exception, error: TenureError | None
    ) -> None:
        """The database refused the statement and sending it again cannot help (a ``fail``
        verdict: a constraint, a value it cannot store, a missing privilege; or no
        database error at all, a bug): a verdict on that row alone, never on the batch,
        and never a reason to retry the same statement until the lease runs out.

        A batch is split and each outcome committed on its own; a single outcome the
        database refuses is committed instead as a failure that names the database's
        error class only (``bad_result`` for a value it cannot store, ``commit_refused``
        otherwise), so the job ends, journaled, instead of looping.
        """
        if len(group) > 1:
            await asyncio.gather(
                *(self._commit([p], functools.partial(self._finish_many, [p])) for p in group)
            )
            return
        (pending,) = group
        finish = pending.finish
        if pending.refused:  # even the plain failure was refused
            await self._settle(pending, False)
            return
        if error is None:  # not a database error: a bug, which the log must show
            logger.error("commit of job %d raised", pending.job.id, exc_info=exc)
        cause = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ else exc
        sqlstate = error.sqlstate if isinstance(error, StoreError) else None
        constraint = error.constraint if isinstance(error, StoreError) else None
        code = "bad_result" if isinstance(error, DataRejected) else "commit_refused"
        pending.refused = True
        pending.finish = Finish(
            finish.job_id,
            finish.token,
            "failed",
            error={
                "code": code,
                "type": type(cause).__name__,
                "message": f"the database refused this outcome ({finish.state}): "
                + (str(error) if error is not None else "the commit raised"),
                **({"sqlstate": sqlstate} if sqlstate else {}),
                **({"constraint": constraint} if constraint else {}),
            },
        )
        log_event(
            logger,
            "commit_refused",
            level=logging.WARNING,
            job=pending.job,
            worker=self._owner,
            outcome=finish.state,
            code=code,
            error=type(cause).__name__,
            sqlstate=sqlstate,
        )
        retry = (
            functools.partial(self._commit_stage, pending)
            if self._is_stage(pending)
            else functools.partial(self._finish_many, group)
        )
        await self._commit(group, retry)

    async def _settle(self, pending: _Pending, accepted: bool) -> None:
        if not accepted and pending.uncertain:
            accepted = await self._landed_earlier(pending)
        kind = pending.finish.state if accepted else "result_rejected"
        if not accepted:
            pending.ownership.committing = False
            log_event(
                logger,
                "result_rejected",
                job=pending.job,
                worker=self._owner,
                level=logging.WARNING,
                outcome=pending.finish.state,
            )
            try:
                await self._store.record_event(
                    "result_rejected",
                    job_id=pending.job.id,
                    token=pending.job.token,
                    attempt=pending.job.attempt,
                    worker=self._owner,
                    tool=pending.job.tool,
                    detail={"outcome": pending.finish.state},
                )
            except StoreError:
                pass  # the log line carries it
        self._on_result(kind)
        if not pending.done.done():
            pending.done.set_result(accepted)

    async def _landed_earlier(self, pending: _Pending) -> bool:
        try:
            row = await self._store.get_job(pending.job.id)
        except Exception:
            return False
        return row.token == pending.job.token and row.state == pending.finish.state
