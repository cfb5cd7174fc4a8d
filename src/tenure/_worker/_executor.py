"""Runs one tool call and turns what happened into an outcome to commit.

Async tools run on the event loop and are stopped with ``task.cancel()``;
plain functions run in a thread and are asked to stop through
``ctx.cancelled`` (a thread cannot be killed; its late result is discarded and
the fenced commit would refuse it anyway). The time limit guards quality and
is independent of the lease: heartbeats never keep a stuck call alive past it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .._context import Context
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
from .._payload import MAX_RESULT_BYTES, encode
from .._pipeline._model import Verdict
from .._registry import ToolSpec
from .._store._store import ClaimedJob, Finish


class TimeLimitExceeded(Exception):
    """A threaded tool ran past its time limit (the thread is left to notice ctx.cancelled)."""


@dataclass(frozen=True, slots=True)
class Stopped:
    """Why the worker stopped a call: ``lease_lost``, ``cancelled`` or ``shutdown``."""

    reason: str


def _discard(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _error(code: str, exc: BaseException | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code}
    if exc is not None:
        error["type"] = type(exc).__name__
        error["message"] = str(exc)[:2000]
    return error


class Executor:
    def __init__(self, threads: int) -> None:
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tenure-tool")

    def shutdown(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def run(
        self, spec: ToolSpec, ctx: Context, job: ClaimedJob, stop: dict[int, Stopped]
    ) -> Finish | None:
        """Run the tool; None means write nothing (the lease is gone or the job cancelled)."""
        limit = asyncio.timeout(spec.policy.time_limit)
        try:
            if spec.is_async:
                async with limit:
                    value = await spec.fn(ctx, **job.payload)
            else:
                value = await self._in_thread(spec, ctx, job.payload)
        except TimeLimitExceeded as exc:
            return self._failure(spec, job, "time_limit", exc, retryable=True)
        except asyncio.CancelledError:
            stopped = stop.get(job.id)
            if stopped is None:
                raise
            ctx._request_stop()
            if stopped.reason == "shutdown":
                return Finish(
                    job.id, job.token, "queued", refund_attempt=True, error=_error("shutdown")
                )
            return None
        except Exception as exc:
            if isinstance(exc, TimeoutError) and limit.expired():
                ctx._request_stop()
                return self._failure(spec, job, "time_limit", exc, retryable=True)
            return self._classify(spec, ctx, job, exc)
        if isinstance(value, Verdict):
            value = value.as_result()  # a gate's verdict is stored as plain JSON
        try:
            text = encode(value, "result", MAX_RESULT_BYTES)
        except PayloadError as exc:
            return self._failure(spec, job, "bad_result", exc, retryable=False)
        return Finish(job.id, job.token, "succeeded", result_json=text)

    async def _in_thread(self, spec: ToolSpec, ctx: Context, payload: dict[str, Any]) -> Any:
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, spec.fn, ctx, **payload)
        future = loop.run_in_executor(self._threads, call)
        try:
            done, _ = await asyncio.wait({future}, timeout=spec.policy.time_limit)
        except BaseException:
            ctx._request_stop()
            future.add_done_callback(_discard)  # the late result or error is nobody's now
            raise
        if not done:
            ctx._request_stop()
            future.add_done_callback(_discard)
            raise TimeLimitExceeded(
                f"{spec.name} ran past its time limit of {spec.policy.time_limit:g} s"
            )
        return future.result()

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
