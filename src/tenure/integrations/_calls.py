"""What every agent-framework adapter does with one tool call, framework-free.

A model's tool call becomes one job whose idempotency key is built from the
conversation and the model's tool-call id (`call_key`): a restarted agent that
replays the same call finds the job it started instead of running the tool again.
`run_call` queues it and waits, at most ``defer_after`` seconds when given; past
that it raises `Deferred` so the adapter can end the run with the call pending.

What a model is told when a call fails (`failure`) is the tool's name, the job's
error code and its attempts, and the message of a failure the tool classified
itself (``PermanentError("customer 7 is closed")``: the tool's words to its
caller, as an MCP client gets them); never an unclassified exception's text,
which may hold a receiver's answer or a customer's data, and never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import tenure

from .._app import MAX_KEY_LENGTH, App
from .._errors import (
    JobCancelled,
    JobFailed,
    PayloadError,
    PolicyError,
    UnknownTool,
    WaitTimeout,
)
from .._job import Job

MAX_DEFER = 24 * 3600.0
MAX_ID_LENGTH = 200  # conversation and call ids kept readable in keys up to this length


def call_key(framework: str, conversation: str | None, call_id: str | None) -> str:
    """``{framework}:{conversation}:{call_id}``; an id that is long or not printable is
    replaced by its SHA-256, so any id gives a valid key and equal ids give equal keys."""
    if not call_id:
        raise PolicyError(f"{framework}: the tool call has no id; a job key needs one")
    if not conversation:
        raise PolicyError(f"{framework}: the run has no conversation id; a job key needs one")
    parts = [framework]
    for text in (conversation, call_id):
        if len(text) <= MAX_ID_LENGTH and text.isprintable() and ":" not in text:
            parts.append(text)
        else:
            parts.append(
                "sha256-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            )
    key = ":".join(parts)
    assert len(key) <= MAX_KEY_LENGTH
    return key


def offered(app: App, tools: Sequence[str] | None) -> list[str]:
    """The names of the app's tools to offer a model: ``tools`` (checked), else all."""
    names = sorted(app.tools) if tools is None else list(dict.fromkeys(tools))
    for name in names:
        if name not in app.tools:
            known = ", ".join(sorted(app.tools)) or "none"
            raise UnknownTool(f"unknown tool {name!r} (registered: {known})")
    return names


def check_defer_after(value: Any) -> float | None:
    """None (wait as long as the job takes) or seconds in [0, MAX_DEFER]."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_DEFER:
        raise PolicyError(
            f"defer_after must be None or seconds in [0, {MAX_DEFER:g}], got {value!r}"
        )
    return float(value)


class Deferred(Exception):
    """The call's job did not end within ``defer_after``: the run should end with it pending."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"job {job.id} is still {job.state}")
        self.job = job


@dataclass(frozen=True, slots=True)
class Failure:
    """What the model may be told about a call that did not produce a result.

    ``retry``: True when calling again may help (the framework's retry), False when
    it cannot (a permanent failure, a cancel): the framework's terminal tool error.
    """

    message: str
    retry: bool


async def run_call(
    app: App,
    tool: str,
    arguments: dict[str, Any],
    *,
    key: str,
    tenant: str | None,
    defer_after: float | None,
    lax: bool = False,
) -> Any:
    """Queue the call (or find the job its key already names) and return its result.

    ``lax``: the model's trivial slips converted first (`App.registry.coerce_arguments`). Raises
    PayloadError (arguments outside the tool's signature; nothing queued), JobFailed,
    JobCancelled, or Deferred once ``defer_after`` seconds passed.
    """
    if lax:
        arguments = app.registry.coerce_arguments(tool, arguments)
    job = await app.enqueue(tool, arguments, idempotency_key=key, tenant=tenant)
    try:
        return await app.wait(job.id, timeout=defer_after)
    except WaitTimeout:
        raise Deferred(await app.get(job.id)) from None


async def settle(app: App, key: str, tenant: str | None, timeout: float | None) -> Any:
    """The result of the job under ``key``, once it ended (for a call that was deferred)."""
    return await app.wait(key=key, tenant=tenant, timeout=timeout)


def failure(tool: str, error: PayloadError | JobFailed | JobCancelled) -> Failure:
    """The model's view of a call that failed: the code and attempts, and the message of a
    failure the tool classified itself (``PermanentError``, ...: its words to its caller,
    as an MCP client is told them); never an unclassified exception's text."""
    if isinstance(error, PayloadError):
        # The problems describe the model's own arguments against the schema it was shown.
        problems = "\n".join(f"- {p}" for p in error.problems) or f"- {error}"
        return Failure(f"The arguments for {tool} do not fit its schema:\n{problems}", True)
    if isinstance(error, JobCancelled):
        return Failure(f"The call of {tool} was cancelled; do not call it again for this.", False)
    attempts = f"{error.attempts} attempt" + ("s" if error.attempts != 1 else "")
    told = error.told
    said = f" It said: {told}" if told is not None else ""
    if error.code == "permanent":
        return Failure(
            f"The call of {tool} failed permanently (error code: permanent, {attempts}); "
            f"calling it again with the same arguments cannot succeed.{said}",
            False,
        )
    return Failure(f"The call of {tool} failed (error code: {error.code}, {attempts}).{said}", True)


@dataclass(eq=False)
class DurableRun:
    """One attempt of one durable agent run (`TenureDurability`, `TenureRunner`): its job's
    `Context`, the names its units were given so far, and its tool calls in flight.

    A tool call is a child job of the run, keyed by the run and the call's position
    (`child_call`); one whose child has not ended must end the attempt, but first the
    calls beside it finish or park too (`park`), so their steps are recorded rather than
    cut off and run again, and the attempt waits for all the parked children at once.
    """

    ctx: tenure.Context
    seen: Counter[str] = field(default_factory=Counter)
    busy: int = 0  # tool calls in flight
    parked: list[int] = field(default_factory=list)  # children of the calls that must wait
    parked_calls: int = 0
    _changed: asyncio.Event | None = None

    def index(self, base: str) -> int:
        """How many units named ``base`` this attempt met before: the next one's index."""
        n = self.seen[base]
        self.seen[base] = n + 1
        return n

    @contextlib.contextmanager
    def tool_call(self) -> Iterator[None]:
        """Count a tool call in flight while the block runs."""
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1
            self._notify()

    async def child_call(self, tool: str, arguments: dict[str, Any], position: str) -> tenure.Job:
        """The call as a child job named ``position`` (keyed ``tool-job:{run}:{position}``),
        once it ended; PayloadError (nothing queued) for arguments outside its signature."""
        with self.tool_call():
            child = await self.ctx.enqueue(tool, arguments, name=position)
            try:
                (done,) = await self.ctx.wait_for(child, name=f"{position}.wait")
            except tenure.Suspend as suspended:
                await self.park(suspended)
        return done

    async def park(self, suspended: tenure.Suspend) -> NoReturn:
        """End the attempt waiting for this call's children and those of every call beside it
        that must wait too, once none of them is still running: one suspension for the whole
        response, resumed when its last child ended."""
        self.parked.extend(suspended.waitpoint.children)
        self.parked_calls += 1
        self._notify()
        while self.busy > self.parked_calls:
            if self._changed is None:
                self._changed = asyncio.Event()
            self._changed.clear()
            await self._changed.wait()
        children = tuple(dict.fromkeys(self.parked))
        wait = dataclasses.replace(suspended.waitpoint, children=children)
        raise tenure.Suspend(wait, suspended.request_json)

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()


def ended(job: tenure.Job) -> JobFailed | JobCancelled:
    """The error a child job's end is, for `failure`."""
    if job.state == "cancelled":
        return JobCancelled(f"job {job.id} was cancelled", job)
    return JobFailed(f"job {job.id} ended {job.state}", job)


class RunStarter:
    """How any process starts a durable agent run: a job of the run's tool (``tool``, set by
    the engine once it knows the agent) on ``app``, one per key."""

    app: tenure.App
    tool: str | None

    async def start(
        self, prompt: str, *, key: str | None = None, tenant: str | None = None
    ) -> tenure.Job:
        """Start a run of the agent on ``prompt`` (a job; any worker runs it). A repeated
        ``key`` returns the run it started, never a second one."""
        if self.tool is None:
            raise tenure.PolicyError("attach the engine to an agent before starting runs")
        return await self.app.enqueue(
            self.tool, {"prompt": prompt}, idempotency_key=key, tenant=tenant
        )

    async def run(
        self,
        prompt: str,
        *,
        key: str | None = None,
        tenant: str | None = None,
        timeout: float | None = None,
        output_type: Any = None,
    ) -> Any:
        """`start` the run and wait for its output (JSON, or ``output_type`` loaded from it);
        JobFailed if the run failed."""
        job = await self.start(prompt, key=key, tenant=tenant)
        return await self.app.wait(job.id, timeout=timeout, result_type=output_type)
