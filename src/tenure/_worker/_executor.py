"""Runs one tool call and turns what happened into an outcome to commit.

Async tools run on the event loop and are stopped with ``task.cancel()``;
plain functions run in a thread and are asked to stop through
``ctx.cancelled`` (a thread cannot be killed; its late result is discarded and
the fenced commit would refuse it anyway). The time limit guards quality and
is independent of the lease: heartbeats never keep a stuck call alive past it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import heapq
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from .._errors import (
    LeaseLost,
    OutcomeUnknown,
    OwnershipError,
    OwnershipUnknown,
    PayloadError,
    PermanentError,
    RetryableError,
    StaleFence,
)
from .._log import log_event
from .._payload import MAX_PAYLOAD_BYTES, MAX_RESULT_BYTES, encode
from .._pipeline._model import Verdict
from .._registry import ToolSpec
from .._states import StopReason
from .._store import ClaimedJob, Finish, OpenWaitpoint
from .._waitpoint import Suspend, token_hash
from ._context import Context

logger = logging.getLogger("tenure.worker")


class TimeLimitExceeded(Exception):
    """A tool ran past its time limit (a threaded one is left to notice ctx.cancelled)."""


@dataclass(frozen=True, slots=True)
class Abandoned:
    """Nothing may be written for this call: its lease is gone or its job was cancelled.

    ``outcome`` is what the call would have committed (succeeded, queued, failed) when
    the tool returned or raised anyway — a late result or error the worker discarded —
    and None when it was stopped before it did. ``running``: the thread of a plain
    function that was asked to stop and has not returned yet, as the future its result
    will reach (done once it has); None when nothing of the call runs any more.
    """

    reason: str
    outcome: str | None = None
    running: asyncio.Future[Any] | None = None


@dataclass(frozen=True, slots=True)
class Stopped:
    """Why the worker stopped a call: ``lease_lost``, ``cancelled`` or ``shutdown``."""

    reason: StopReason


def _deliver(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], call: Callable[[], Any]
) -> None:
    """Thread body: run the call, hand the outcome to the loop (if it still runs)."""
    try:
        result = call()
    except BaseException as exc:  # handed over, not swallowed
        if not isinstance(exc, Exception | Suspend):  # SystemExit must not stop the worker
            exc = RuntimeError(f"the tool raised {type(exc).__name__}")
        outcome: Callable[[], None] = functools.partial(_set_exception, future, exc)
    else:
        outcome = functools.partial(_set_result, future, result)
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
        loop.call_soon_threadsafe(outcome)


def _set_result(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


def _discard(ctx: Context, started: float, future: asyncio.Future[Any]) -> None:
    """A stopped thread's late result or error is nobody's now: journal that one came
    (kind, token, attempt, never its content), so the operator sees that this attempt
    produced an outcome that was thrown away."""
    if future.cancelled():
        return
    outcome = "failed" if future.exception() is not None else "succeeded"
    log_event(
        logger,
        "result_discarded",
        job=ctx.job_id,
        token=ctx.token,
        attempt=ctx.attempt,
        tool=ctx.tool,
        worker=ctx.worker,
        reason=ctx.ownership if ctx.ownership != "owned" else "time_limit",
        outcome=outcome,
        duration=round(time.monotonic() - started, 3),
    )


class TimeLimits:
    """The time limits of running async calls, on one timer for all of them.

    ``asyncio.timeout`` costs a Timeout, a TimerHandle and a heap entry per call
    (about 7 µs here, a tenth of a busy worker's time per no-op job). This keeps
    one heap of (deadline, job id) and one armed timer for the earliest deadline;
    a finished call only leaves the register, and its heap entry is dropped when
    its deadline comes up or when stale entries outnumber live ones.
    """

    def __init__(self) -> None:
        self._live: dict[int, tuple[float, asyncio.Task[Any]]] = {}
        self._heap: list[tuple[float, int]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._expired: set[int] = set()  # calls cancelled by their limit, until discarded

    def add(self, job_id: int, seconds: float) -> None:
        """Cancel the calling task if it still runs ``seconds`` from now."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        deadline = loop.time() + seconds
        self._live[job_id] = (deadline, task)
        heapq.heappush(self._heap, (deadline, job_id))
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._live):
            self._heap = [(d, j) for j, (d, _) in self._live.items()]
            heapq.heapify(self._heap)
        if self._timer is None or deadline < self._timer_at:
            self._arm(loop, deadline)

    def discard(self, job_id: int) -> bool:
        """Forget the call's limit; True if the limit had cancelled it."""
        self._live.pop(job_id, None)
        if job_id in self._expired:
            self._expired.discard(job_id)
            return True
        return False

    def _arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(deadline, self._fire)
        self._timer_at = deadline

    def _fire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, job_id = heapq.heappop(heap)
            entry = self._live.get(job_id)
            if entry is not None and entry[0] == deadline:
                del self._live[job_id]
                self._expired.add(job_id)
                entry[1].cancel()
        if heap:
            self._arm(loop, heap[0][0])


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def safe_text(value: object, limit: int = 2000) -> str:
    """``str(value)`` as text PostgreSQL can store, whatever ``value`` does.

    A tool's exception is the tool's: its ``__str__`` may raise, and its message may hold
    a NUL (jsonb refuses it) or a lone surrogate (not UTF-8). Either would make the fenced
    commit fail on every attempt and lose the real error; so the text is cut, NULs become
    U+FFFD and unencodable characters become "?" here, before anything is written.
    """
    try:
        text = str(value)
    except BaseException:  # a broken __str__ (even one raising SystemExit) must not win
        text = f"<{type(value).__name__}: str() raised>"
    text = text[:limit].replace("\x00", "\ufffd")
    return text.encode("utf-8", "replace").decode("utf-8")


def _error(code: str, exc: BaseException | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code}
    if exc is not None:
        error["type"] = safe_text(type(exc).__name__, 200)
        error["message"] = safe_text(exc)
    return error


class Executor:
    """Runs calls; plain functions each get a daemon thread of their own.

    Daemon threads, not a pool: a tool that ignores ``ctx.cancelled`` must not
    keep a stopping worker process alive, nor hold a pool slot that the next
    claimed call would queue behind while its lease is being extended.
    Abandoned threads that are still running are counted in `stuck`, and the
    worker claims that much less.
    """

    def __init__(self) -> None:
        self._abandoned: set[threading.Thread] = set()
        self._limits = TimeLimits()
        self._threads: dict[int, asyncio.Future[Any]] = {}  # job id → its thread's result

    @property
    def stuck(self) -> int:
        """Threads of stopped calls that have not returned yet."""
        self._abandoned = {t for t in self._abandoned if t.is_alive()}
        return len(self._abandoned)

    async def run(
        self, spec: ToolSpec, ctx: Context, job: ClaimedJob, stop: dict[int, Stopped]
    ) -> Finish | Abandoned:
        """Run the tool and say what to commit, or why nothing may be written (and, for a
        plain function's thread still running, what tells when it returns)."""
        try:
            outcome = await self._run(spec, ctx, job, stop)
        finally:
            thread = self._threads.pop(job.id, None)
        if isinstance(outcome, Abandoned) and thread is not None and not thread.done():
            return replace(outcome, running=thread)
        return outcome

    async def _run(
        self, spec: ToolSpec, ctx: Context, job: ClaimedJob, stop: dict[int, Stopped]
    ) -> Finish | Abandoned:
        timed_out = False
        try:
            args, kwargs = spec.contract.call_arguments(job.payload)
        except PayloadError as exc:  # the tool's signature changed since the call was queued
            return self._failure(spec, job, "bad_payload", exc, retryable=False)
        try:
            if spec.is_async:
                self._limits.add(job.id, spec.policy.time_limit)
                try:
                    value = await spec.fn(ctx, *args, **kwargs)
                finally:
                    timed_out = self._limits.discard(job.id)
                    if timed_out:
                        _uncancel()  # the limit's cancel is handled here, not by our caller
            else:
                value = await self._in_thread(spec, ctx, args, kwargs)
        except TimeLimitExceeded as exc:
            return self._failure(spec, job, "time_limit", exc, retryable=True)
        except asyncio.CancelledError:
            stopped = stop.get(job.id)
            if stopped is None and not timed_out:
                raise
            ctx._request_stop()
            if stopped is None:
                exceeded = TimeLimitExceeded(
                    f"{spec.name} ran past its time limit of {spec.policy.time_limit:g} s"
                )
                return self._failure(spec, job, "time_limit", exceeded, retryable=True)
            if stopped.reason == "shutdown":
                return Finish(
                    job.id, job.token, "queued", refund_attempt=True, error=_error("shutdown")
                )
            return Abandoned(stopped.reason)
        except Suspend as suspended:
            return self._unless_ended(ctx, self._suspension(job, suspended))
        except Exception as exc:
            outcome = self._classify(spec, ctx, job, exc)
            return self._unless_ended(ctx, outcome)
        except BaseException as exc:
            # SystemExit, KeyboardInterrupt or GeneratorExit raised by the tool's own code
            # (cancellation was handled above): a failure of this call, never of the worker.
            # Left to propagate, it would stop the event loop and hang the whole process.
            failure = RuntimeError(f"the tool raised {type(exc).__name__}")
            return self._unless_ended(
                ctx, self._failure(spec, job, "error", failure, retryable=True)
            )
        return self._unless_ended(ctx, self._result(spec, job, value))

    def _result(self, spec: ToolSpec, job: ClaimedJob, value: Any) -> Finish:
        """The success to commit, or a bad_result failure for a value that cannot be stored
        (whatever goes wrong while turning it into JSON: the work is done, the answer is
        not storable, and retrying would only do the work again)."""
        try:
            if isinstance(value, Verdict):
                value = value.as_result()  # a gate's verdict is stored as plain JSON
            else:
                value = spec.contract.dump_result(value)  # through the return annotation
            text = encode(value, "result", MAX_RESULT_BYTES)
        except Exception as exc:
            return self._failure(spec, job, "bad_result", exc, retryable=False)
        return Finish(job.id, job.token, "succeeded", result_json=text)

    @staticmethod
    def _suspension(job: ClaimedJob, suspended: Suspend) -> Finish:
        """The commit that moves the job to the waiting state at its waitpoint."""
        wp = suspended.waitpoint
        return Finish(
            job.id,
            job.token,
            "waiting",
            waitpoint=OpenWaitpoint(
                name=wp.name,
                token_hash=token_hash(wp.token),
                timeout_ms=round(wp.timeout * 1000),
                on_timeout=wp.on_timeout,
                request_json=suspended.request_json,
                answered_by=wp.answered_by,
                answer_schema_json=None
                if wp.answer_schema is None
                else encode(wp.answer_schema, "answer schema", MAX_PAYLOAD_BYTES),
                kind=wp.kind,
                waiting_on=wp.children,
            ),
        )

    @staticmethod
    def _unless_ended(ctx: Context, outcome: Finish | None) -> Finish | Abandoned:
        """A call that ended after the database refused its owner (its job cancelled, an
        extension matching zero rows) has no outcome to commit: whatever it produced is
        discarded here, deterministically, rather than sent to a fenced commit that a
        race may or may not get to refuse first. Past a merely local deadline, the
        fenced commit still decides."""
        status = ctx.ownership
        if outcome is None:  # the tool stopped itself (LeaseLost, JobCancelled, StaleFence)
            return Abandoned(status if status != "owned" else "superseded")
        if ctx._ownership.refused:
            return Abandoned(status, outcome.state)
        return outcome

    async def _in_thread(
        self, spec: ToolSpec, ctx: Context, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._threads[ctx.job_id] = future
        call = functools.partial(contextvars.copy_context().run, spec.fn, ctx, *args, **kwargs)
        started = time.monotonic()
        thread = threading.Thread(
            target=_deliver,
            args=(loop, future, call),
            name=f"tenure-tool-{ctx.job_id}",
            daemon=True,
        )
        thread.start()
        try:
            done, _ = await asyncio.wait({future}, timeout=spec.policy.time_limit)
        except BaseException:
            self._abandon(ctx, future, thread, started)
            raise
        if not done:
            self._abandon(ctx, future, thread, started)
            raise TimeLimitExceeded(
                f"{spec.name} ran past its time limit of {spec.policy.time_limit:g} s"
            )
        return future.result()

    def _abandon(
        self, ctx: Context, future: asyncio.Future[Any], thread: threading.Thread, started: float
    ) -> None:
        ctx._request_stop()
        future.add_done_callback(functools.partial(_discard, ctx, started))
        if thread.is_alive():
            self._abandoned.add(thread)

    def _classify(
        self, spec: ToolSpec, ctx: Context, job: ClaimedJob, exc: Exception
    ) -> Finish | None:
        if isinstance(exc, OwnershipError):
            if isinstance(exc, OwnershipUnknown) and ctx.ownership in ("owned", "unknown"):
                # The tool stopped itself; if the lease still holds, a fenced retry lands.
                return self._failure(spec, job, "ownership_unknown", exc, retryable=True)
            return None  # lost or cancelled: whoever owns the job now decides
        if isinstance(exc, LeaseLost | StaleFence):
            return None  # a newer owner exists; whatever we would write is stale
        if isinstance(exc, PermanentError) or isinstance(exc, spec.policy.retry.permanent):
            return self._failure(spec, job, "permanent", exc, retryable=False)
        if isinstance(exc, OutcomeUnknown):
            return self._failure(spec, job, "outcome_unknown", exc, retryable=True)
        if isinstance(exc, RetryableError):
            return self._failure(spec, job, "retryable", exc, retryable=True)
        return self._failure(spec, job, "error", exc, retryable=True)

    def _failure(
        self, spec: ToolSpec, job: ClaimedJob, code: str, exc: BaseException, *, retryable: bool
    ) -> Finish:
        error = _error(code, exc)
        if retryable and job.attempt < job.max_attempts:
            delay = spec.policy.retry.delay(job.attempt)
            return Finish(job.id, job.token, "queued", error=error, delay_ms=round(delay * 1000))
        if retryable:
            error["exhausted"] = True
        return Finish(job.id, job.token, "failed", error=error)
