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

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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

    ``lax``: the model's trivial slips converted first (`App.coerce_arguments`). Raises
    PayloadError (arguments outside the tool's signature; nothing queued), JobFailed,
    JobCancelled, or Deferred once ``defer_after`` seconds passed.
    """
    if lax:
        arguments = app.coerce_arguments(tool, arguments)
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
