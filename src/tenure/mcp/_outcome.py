"""What an MCP caller is told about its call: tenure's job states as MCP results, in one place.

The plain path answers ``tools/call`` once the job has ended:

=========== ==============================================================
job state   ``CallToolResult``
=========== ==============================================================
succeeded   the result as text (JSON unless a string) and as
            ``structuredContent``: for a typed result, the object its
            tool's ``outputSchema`` describes (a result that is no object
            is its ``result``); for an untyped one, a JSON object itself
failed      ``isError``: the error code, the attempts used and, for a
            failure the tool classified itself (``PermanentError``,
            ``RetryableError``, ``OutcomeUnknown`` or a type its policy
            declares permanent), its message; never a stack trace, and
            never an unclassified exception's text (that stays on the
            job's row for the operator: ``tenure jobs show``)
cancelled   ``isError`` with code ``cancelled``
=========== ==============================================================

Calls refused before anything was queued are tool errors too (the model can
fix them): ``invalid_arguments`` lists every problem, ``idempotency_conflict``
and ``quota_exceeded`` say what to change. Every result carries
``_meta["tenure/job"]``: the job's id, whether this call created it, its state,
attempts and the scope of its key (`job_meta`).

A task-augmented call (`_tasks`) answers ``tasks/result`` with the same
``CallToolResult``; job states become task statuses there.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mcp_types import CallToolResult, TextContent

from .._app import App
from .._errors import PayloadError, told_message
from .._job import Job

META_KEY = "tenure/job"


def _result(
    text: str,
    *,
    error: bool,
    structured: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=error,
        _meta=meta,
    )


def job_meta(job: Job, *, created: bool, scope: str | None = None) -> dict[str, Any]:
    """``_meta["tenure/job"]``: the job's id, whether this call created it, its state and
    attempts, and the scope its key and task live in (``principal``, ``session``: this
    connection only, or ``request``: nothing can find it again; see `_caller`)."""
    about: dict[str, Any] = {
        "id": job.id,
        "created": created,
        "state": job.state,
        "attempts": job.attempt,
    }
    if scope is not None:
        about["scope"] = scope
    return {META_KEY: about}


def job_result(app: App, job: Job, *, created: bool, scope: str | None = None) -> CallToolResult:
    """The result of a job that has ended (see the table above)."""
    meta = job_meta(job, created=created, scope=scope)
    if job.state == "succeeded":
        value = job.result
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        structured = app.registry.structured_result(job.tool, value)
        return _result(text, error=False, structured=structured, meta=meta)
    error = job.error or {}
    code = str(error.get("code", job.state)) if job.state == "failed" else "cancelled"
    detail: dict[str, Any] = {"code": code, "attempts": job.attempt}
    text = f"{job.tool} {job.state} ({code}) after {job.attempt} attempt(s)"
    message = told_message(error) if job.state == "failed" else None
    if message is not None:
        detail["message"] = message
        text += f": {message}"
    return _result(text, error=True, structured={"error": detail}, meta=meta)


def refused(code: str, text: str, problems: Sequence[str] = ()) -> CallToolResult:
    """A call refused before anything was queued: nothing was written."""
    detail: dict[str, Any] = {"code": code}
    if problems:
        detail["problems"] = list(problems)
    return _result(text, error=True, structured={"error": detail})


def invalid_arguments(tool: str, exc: PayloadError) -> CallToolResult:
    """Arguments that do not fit the tool's signature: every problem, so all get fixed at once."""
    problems = exc.problems or (str(exc),)
    text = f"invalid arguments for {tool}:\n" + "\n".join(f"- {p}" for p in problems)
    return refused("invalid_arguments", text, problems)
