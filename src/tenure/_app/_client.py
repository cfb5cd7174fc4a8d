"""The App's client: enqueue calls, read them, wait for and watch them, cancel them,
answer their waitpoints, and run pipelines. Every front end answers a waitpoint here."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from .._errors import (
    Conflict,
    JobAlreadyEnded,
    JobCancelled,
    JobFailed,
    JobNotFound,
    PayloadError,
    PolicyError,
    RunFailed,
    WaitTimeout,
)
from .._job import Enqueued, Job
from .._pipeline._engine import Transitions
from .._pipeline._model import Pipeline, Run, Verdict, run_key
from .._pipeline._plan import plan_pipeline
from .._registry import check_tenant
from .._run_watch import RunEvent, follow_run
from .._signature import load_result
from .._waiting import Deadline, reread
from .._waitpoint import answer_json, token_hash
from .._waitpoint import check_name as check_waitpoint_name

if TYPE_CHECKING:
    from ._connection import Connection
    from ._registry import Registry

R = TypeVar("R")

MAX_WAIT = 7 * 24 * 3600.0
MAX_TOKEN = 200


class Client:
    """Enqueue, get, wait, watch, cancel and answer: what a producer does (`tenure.App` is one)."""

    def __init__(self, registry: Registry, connection: Connection) -> None:
        self._registry = registry
        self._connection = connection
        self._secret: bytes | None = None  # the database's secret, read once (derived_key)

    async def enqueue(
        self,
        tool: str,
        payload: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        priority: int | None = None,
        delay: float = 0.0,
        concurrency_key: str | None = None,
        tenant: str | None = None,
        retain: float | None = None,
    ) -> Job:
        """Queue a call. A repeated key returns the existing job (``job.created`` is False);
        the same key with a different tool or payload raises IdempotencyConflict. Keys are
        unique per tenant: another tenant's job under the same key is never returned.

        ``priority`` defaults to the tool's. ``concurrency_key`` (e.g. ``"user:42"``)
        puts the call under the limit `limit` declared for that key; the limit itself
        always comes from the app, never from the caller. ``tenant`` (e.g. ``"acme"``)
        puts the call in that tenant's share of the line: workers take the queued jobs
        of all tenants in turn, and `quota` may cap how many each has queued.
        ``retain`` (seconds) keeps the job that long once it ended (default: the tool's,
        else the app's); while it is kept, its key returns it instead of running again.
        """
        new = self._registry.new_job(
            tool, payload, idempotency_key, priority, delay, concurrency_key, tenant, retain
        )
        store = await self._connection.store()
        chain = self._registry.interceptors.chain()
        if chain is None:
            return await store.enqueue(new)
        return await chain.enqueue(new, store.enqueue)

    async def enqueue_many(
        self,
        tool: str,
        payloads: Sequence[dict[str, Any]],
        *,
        idempotency_keys: Sequence[str] | None = None,
        priority: int | None = None,
        tenant: str | None = None,
        retain: float | None = None,
    ) -> list[Enqueued]:
        """Queue many calls of one tool for one tenant in one transaction; returns each
        call's job id, key and whether it was created, in order. A repeated key returns
        its existing job; a key that names another call raises IdempotencyConflict, and
        over the tenant's quota (counting every call given, repeated keys included)
        QuotaExceeded: then nothing of the batch is queued."""
        if idempotency_keys is not None and len(idempotency_keys) != len(payloads):
            raise PayloadError("idempotency_keys must be as long as payloads")
        keys: Sequence[str | None] = idempotency_keys or [None] * len(payloads)
        jobs = [
            self._registry.new_job(tool, p, k, priority, 0.0, tenant=tenant, retain=retain)
            for p, k in zip(payloads, keys, strict=True)
        ]
        store = await self._connection.store()
        chain = self._registry.interceptors.chain()
        if chain is None:
            return await store.enqueue_many(jobs)
        return await chain.enqueue_many(jobs, store.enqueue_many)

    async def get(
        self, job_id: int | None = None, *, key: str | None = None, tenant: str | None = None
    ) -> Job:
        """The job with this id, or with this idempotency ``key`` of ``tenant`` (keys are
        unique per tenant). Given a tenant, a job of another tenant is not found."""
        store = await self._connection.store()
        if (job_id is None) == (key is None):
            raise PolicyError("give a job id or key=..., exactly one")
        if key is not None:
            return await store.job_by_key(key, "" if tenant is None else check_tenant(tenant))
        assert job_id is not None
        job = await store.get_job(job_id)
        if tenant is not None and job.tenant != check_tenant(tenant):
            raise JobNotFound(f"no job {job_id}")
        return job

    @overload
    async def wait(
        self,
        job_id: int | None = None,
        *,
        key: str | None = None,
        tenant: str | None = None,
        timeout: float | None = None,
        result_type: None = None,
    ) -> Any: ...

    @overload
    async def wait(
        self,
        job_id: int | None = None,
        *,
        key: str | None = None,
        tenant: str | None = None,
        timeout: float | None = None,
        result_type: type[R],
    ) -> R: ...

    async def wait(
        self,
        job_id: int | None = None,
        *,
        key: str | None = None,
        tenant: str | None = None,
        timeout: float | None = None,
        result_type: Any = None,
    ) -> Any:
        """The job's result once it succeeded: its JSON form, or with ``result_type`` (a
        pydantic model, a dataclass, ``list[Report]``, ...) that object. JobFailed if it
        failed (with ``.code`` and ``.attempts``), JobCancelled if it was cancelled.

        Returns within milliseconds of the commit: the commit notifies in its own
        transaction (polling every ``poll_interval`` only where notifications cannot
        arrive). ``timeout`` None (the default) waits as long as the job takes: how long
        it may run is bounded by its tool's time limit and attempts, not by the waiter;
        give a timeout to bound how long it may also sit in the queue (WaitTimeout).
        """
        deadline = Deadline.after(timeout)
        store = await self._connection.store()
        job = await reread(functools.partial(self.get, job_id, key=key, tenant=tenant), deadline)
        async for _ in (await self._connection.waiters()).follow([job.id], deadline):
            pass
        return self._outcome(
            await reread(functools.partial(store.get_job, job.id), deadline), result_type
        )

    @staticmethod
    def _outcome(job: Job, result_type: Any = None) -> Any:
        if job.state == "cancelled":
            raise JobCancelled(f"job {job.id} was cancelled", job)
        if job.state != "succeeded":
            code = (job.error or {}).get("code", job.state)
            raise JobFailed(f"job {job.id} ended {job.state} ({code})", job)
        return job.result if result_type is None else load_result(job.result, result_type)

    async def as_completed(
        self, job_ids: Sequence[int], *, timeout: float | None = None
    ) -> AsyncIterator[Job]:
        """Each job, as it ends (succeeded, failed or cancelled), in the order they end;
        WaitTimeout if some have not ended within ``timeout`` seconds."""
        deadline = Deadline.after(timeout)
        store = await self._connection.store()
        ids = list(dict.fromkeys(job_ids))
        async for status in (await self._connection.waiters()).follow(ids, deadline):
            yield await reread(functools.partial(store.get_job, status.id), deadline)

    async def wait_many(self, job_ids: Sequence[int], *, timeout: float | None = None) -> list[Job]:
        """Every job once all have ended, in the order given (look at each one's state,
        result and error: a failure does not interrupt the others)."""
        ended = {job.id: job async for job in self.as_completed(job_ids, timeout=timeout)}
        return [ended[job_id] for job_id in job_ids]

    async def watch(
        self,
        job_id: int | None = None,
        *,
        key: str | None = None,
        tenant: str | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[Job]:
        """The job now, then again each time its state or progress changes (pushed by the
        database), ending with the job in its final state."""
        deadline = Deadline.after(timeout)
        store = await self._connection.store()
        job = await reread(functools.partial(self.get, job_id, key=key, tenant=tenant), deadline)
        follow = (await self._connection.waiters()).follow([job.id], deadline, progress=True)
        last: tuple[str, Any] | None = None
        async for _ in follow:
            now = await reread(functools.partial(store.get_job, job.id), deadline)
            if (now.state, now.progress) != last:  # the row may be ahead of the status read
                last = (now.state, now.progress)
                yield now

    async def watch_run(
        self, job_id: int, *, timeout: float | None = None
    ) -> AsyncIterator[RunEvent]:
        """A durable run's events (`RunEvent`), from its start until it ended: each model
        step with the usage the model reported, each tool call started and finished, its
        progress, each wait (a person's approval, a timer, its tools) and its output.
        Pushed by the database, like `watch`; WaitTimeout past ``timeout`` seconds."""
        store = await self._connection.store()
        waiters = await self._connection.waiters()
        async for event in follow_run(store, waiters, job_id, Deadline.after(timeout)):
            yield event

    async def cancel(
        self,
        job_id: int,
        *,
        until: Literal["cancelled", "stopped"] = "cancelled",
        timeout: float | None = None,
    ) -> Job:
        """Cancel a queued, running or waiting job and return it. A running call is told at
        once (the cancel notifies its worker in the same transaction, and a worker whose
        LISTEN connection was away reads its calls again when it is back): an async tool
        gets CancelledError, a threaded one sees ``ctx.cancelled``, and ``ctx.ensure_owned()``
        raises JobCancelled. JobAlreadyEnded (a Conflict) if it had already ended: nothing
        changed, and the error carries the job.

        With ``until="cancelled"`` (the default) it returns once the job is cancelled in
        the database; the call may still be finishing a step (a few milliseconds with its
        worker connected). With ``until="stopped"`` it returns only once the call is over:
        its worker reported that the tool's task ended (or its thread returned), or the
        lease the call held when it was cancelled ran out on the database's clock (by
        then the worker's own deadline had passed, so ``ensure_owned()`` refuses every
        step). ``timeout`` bounds that wait (WaitTimeout; the job stays cancelled).
        """
        if until not in ("cancelled", "stopped"):
            raise PolicyError(f'until must be "cancelled" or "stopped", got {until!r}')
        deadline = Deadline.after(timeout)
        store = await self._connection.store()
        cancelled = await store.cancel(job_id)
        if cancelled is None:
            job = await store.get_job(job_id)
            raise JobAlreadyEnded(f"job {job_id} already ended {job.state}; nothing changed", job)
        if until == "stopped" and cancelled.held_until is not None:
            waiters = await self._connection.waiters()
            await waiters.until_stopped(cancelled.job, cancelled.held_until, deadline)
        return cancelled.job

    async def answer_waitpoint(
        self,
        token: str | None = None,
        answer: Any = None,
        *,
        job_id: int | None = None,
        name: str | None = None,
        tenant: str = "",
    ) -> Job:
        """Answer a waitpoint: the answer (any JSON) reaches the tool, which is called again.
        Returns the job as the answer left it: queued again.

        By its ``token`` (``app.answer_waitpoint(token, answer)``): whoever holds the
        token a suspended call handed out (a person, a service, the dashboard's
        ``POST /waitpoints/{token}``). Or as the job's caller, by ``job_id`` and ``name``
        (``app.answer_waitpoint(answer=..., job_id=7, name="confirm", tenant=...)``): only
        a waitpoint the tool declared ``answered_by="caller"`` (`Context.waitpoint`), and
        only for a job of ``tenant`` (the MCP server answers for its callers this way).

        Accepted once, while the waitpoint is open, its deadline (the database's clock)
        not passed and its job waits there: a second, late or unknown answer, or a
        caller's answer to a waitpoint meant for whoever holds its token, raises Conflict
        and writes nothing.
        """
        store = await self._connection.store()
        if token is not None:
            if job_id is not None or name is not None:
                raise PolicyError("answer a waitpoint by its token or by job_id and name, not both")
            if not isinstance(token, str) or not 1 <= len(token) <= MAX_TOKEN:
                raise Conflict("no open waitpoint has this token")
            job = await store.complete_waitpoint(token_hash(token), answer_json(answer))
            if job is None:
                raise Conflict("no open waitpoint has this token (answered, timed out or unknown)")
            return job
        if name is None or job_id is None:
            raise PolicyError("answer a waitpoint by its token, or by job_id and name")
        name = check_waitpoint_name(name)
        if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id < 2**63:
            raise Conflict(f"no job {job_id!r}")
        job = await store.answer_caller_waitpoint(
            job_id, name, check_tenant(tenant) if tenant else "", answer_json(answer)
        )
        if job is None:
            raise Conflict(
                f"job {job_id} has no open waitpoint {name!r} its caller may answer "
                "(answered, timed out, unknown, or for whoever holds its token)"
            )
        return job

    async def derived_key(self, purpose: str) -> bytes:
        """A 32-byte key for ``purpose`` (e.g. ``"mcp-task"``), the same in every process on
        this database and different for every purpose: HMAC-SHA256 of the purpose under
        the secret the database keeps for tenure (migration 0008). For ids that must be
        unguessable and stable across replicas and restarts, such as MCP task ids."""
        if not isinstance(purpose, str) or not purpose or not purpose.isprintable():
            raise PolicyError("purpose must be printable text")
        secret = self._secret
        if secret is None:
            secret = self._secret = await (await self._connection.store()).waitpoint_secret()
        return hmac.new(secret, f"tenure-key\0{purpose}".encode(), hashlib.sha256).digest()

    async def start_run(
        self,
        pipeline: str | Pipeline,
        input: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Run:
        """Start a run; the run and its first stages' jobs are written in one transaction.

        ``input`` is the run's first context: each stage's tool is called with the
        entries it declares, and a stage's dict result is merged in for the stages
        after it. A repeated key returns the existing run (``run.created`` is False);
        the same key with another pipeline or input raises IdempotencyConflict.
        """
        if isinstance(pipeline, str):
            found = self._registry.pipelines.get(pipeline)
            if found is None:
                known = ", ".join(sorted(self._registry.pipelines)) or "none"
                raise PolicyError(f"unknown pipeline {pipeline!r} (declared: {known})")
            pipeline = found
        transitions = Transitions(await self._connection.store())
        run_id, created = await transitions.start(pipeline, input, run_key(idempotency_key))
        run = await transitions.get(run_id)
        return run if created else replace(run, created=False)

    async def get_run(self, run_id: int) -> Run:
        """The run with every stage execution and its job (RunNotFound if there is none)."""
        return await Transitions(await self._connection.store()).get(run_id)

    async def wait_run(self, run_id: int, timeout: float = 60.0) -> Run:
        """The run once it succeeded; RunFailed if it failed or was cancelled."""

        async def probe() -> tuple[bool, Any]:
            row = await (await self._connection.store()).get_run(run_id)
            if row is None or row.state == "running":
                return False, "running" if row else "missing"
            run = await self.get_run(run_id)
            if run.state != "succeeded":
                code = (run.error or {}).get("code", run.state)
                raise RunFailed(f"run {run_id} ended {run.state} ({code})", run)
            return True, run

        result: Run = await _poll(probe, timeout, f"run {run_id}")
        return result

    async def record_verdict(self, run_id: int, stage: str, token: int, verdict: Verdict) -> Run:
        """Record a gate's verdict from outside a worker (e.g. a gate service's callback).

        ``token`` is the fencing token of the gate's job (``ctx.token`` in the tool that
        handed the review out). The verdict is accepted only while that job still holds
        the open stage; a late or duplicate verdict raises Conflict (an HTTP surface
        answers 409) and writes nothing. Accepted, the job ends with the verdict and the
        next stages are queued in the same transaction; the tool still waiting in the
        worker loses its lease and stops.
        """
        transitions = Transitions(await self._connection.store())
        await transitions.record_verdict(run_id, stage, token, verdict)
        return await transitions.get(run_id)

    async def dispatch_plan(
        self, plan: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> Run:
        """Run a plan a model proposed — ``[{"tool": ..., "arguments": {...}}, ...]`` — in order.

        Every step is checked against the registered tools first: an unknown tool,
        arguments its signature does not take, or a ``time_limit`` above its cap is
        reported (all steps' problems at once) as PlanRejected, and nothing is queued.
        Keys, leases, attempts and backoff come from tenure and the tools' policies.
        """
        pipeline = plan_pipeline(plan, self._registry.tools)
        return await self.start_run(
            pipeline, {"plan": [dict(step) for step in plan]}, idempotency_key=idempotency_key
        )


async def _poll(probe: Callable[[], Awaitable[tuple[bool, Any]]], timeout: float, what: str) -> Any:
    """Ask ``probe`` until it says done (returning its value), backing off to 0.25 s.

    While not done, the probe's value is the state shown in the WaitTimeout message.
    """
    if not 0 <= timeout <= MAX_WAIT:
        raise PolicyError(f"timeout must be in [0, {MAX_WAIT:g}] s")
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        done, value = await probe()
        if done:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(f"{what} is still {value} after {timeout:g} s")
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, 0.25)
