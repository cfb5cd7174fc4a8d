"""Waitpoints over MCP: which ones the caller is asked, with what form, and its answer.

A tool declares who may answer each waitpoint where it makes it
(``ctx.waitpoint(name, answered_by=..., answer=Type)``), never the server:

- ``"holder"`` (the default): whoever the tool gave the token to, a person or a
  service. The MCP caller is told the call waits there and for whom, never asked and
  never shown the token or the request; nothing it sends can answer it (the only way
  in without the token, `App.answer_waitpoint`, refuses such a waitpoint in SQL);
- ``"caller"``: the job's caller is asked, by MCP elicitation, with a form built from
  the declared answer type (`tenure._waitpoint.form_of`), and its accepted reply,
  checked against that form (`fit_form`: types, enums, no NUL, at most 64 KiB), answers
  the waitpoint: the tool gets the typed answer. A reply that does not fit is refused
  with INVALID_PARAMS saying why, and the waitpoint stays open.

How the question travels depends on the wire (`_wire`): an ``elicitation/create``
request (2025-11-25), an ``input_required`` result (2026-07-28), or a task's
``inputRequests`` (the 2026-07-28 tasks extension). Each asks with `request_of` and
reads the reply with `answer`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ElicitRequest, ElicitRequestFormParams, ElicitResult

from .._app import App
from .._errors import Conflict, PayloadError
from .._job import Job
from .._waitpoint import fit_form, form_of
from ._caller import Caller

Waitpoint = Mapping[str, Any]  # a row of `App.admin.waitpoints`
KEY_PREFIX = "waitpoint:"  # an input request's key: the waitpoint's name after it
MAX_QUESTION = 2000  # characters of a waitpoint's request shown in the question


async def open_waitpoints(app: App, job: Job) -> list[Waitpoint]:
    """The job's open waitpoints (it waits at one at a time)."""
    if job.state != "waiting":
        return []
    found: list[Waitpoint] = [w for w in await app.admin.waitpoints(job.id) if w["state"] == "open"]
    return found


def for_caller(waitpoints: Sequence[Waitpoint]) -> list[Waitpoint]:
    """Those of ``waitpoints`` the caller may answer (and can be asked with a form)."""
    return [w for w in waitpoints if w["answered_by"] == "caller" and form_of(w["answer_schema"])]


def waiting_message(job: Job, waitpoints: Sequence[Waitpoint]) -> str:
    """What the caller is told of a job that waits: where, for whom, how long."""
    if not waitpoints:
        return "waiting for input"
    wp = waitpoints[0]
    left = f"{wp['seconds_left']:.0f} s left"
    if wp["answered_by"] == "caller":
        return f"waiting for your answer at waitpoint {wp['name']!r} ({left})"
    if wp["answered_by"] == "nobody":  # a durable sleep, or a wait for the job's children
        what = "its child jobs" if wp.get("kind") == "children" else "a timer"
        return f"waiting for {what} at {wp['name']!r} ({left}); nobody answers it"
    return (
        f"waiting at waitpoint {wp['name']!r} for whoever holds its token, a person or a "
        f"service, not for you ({left}); they answer with App.answer_waitpoint or the "
        "dashboard's POST /waitpoints/{token}"
    )


def request_of(job: Job, wp: Waitpoint, meta: dict[str, Any] | None = None) -> ElicitRequest:
    """The elicitation that asks the caller ``wp``'s question."""
    formed = form_of(wp["answer_schema"])
    assert formed is not None  # for_caller chose it
    question = f"{job.tool} asks you, its caller, at {wp['name']!r}"
    if wp["request"] is not None:
        question += f": {json.dumps(wp['request'], ensure_ascii=False)[:MAX_QUESTION]}"
    params = ElicitRequestFormParams(
        message=question,
        requested_schema=formed[0],
        _meta=meta,  # type: ignore[arg-type]  # RequestParamsMeta is a TypedDict
    )
    return ElicitRequest(params=params)


def input_key(wp: Waitpoint) -> str:
    """The key of ``wp``'s input request: unique over the job's life (a name asks once)."""
    return KEY_PREFIX + str(wp["name"])


async def answer(
    app: App, caller: Caller, job: Job, waitpoints: Sequence[Waitpoint], name: str, reply: Any
) -> bool:
    """Answer ``name`` (one of ``waitpoints``, the caller's) with an elicitation's ``reply``;
    False when the caller declined or dismissed it, or it was answered meanwhile. MCPError
    (INVALID_PARAMS) for a reply that does not fit the form: nothing is written."""
    if not isinstance(reply, ElicitResult):
        try:
            reply = ElicitResult.model_validate(reply)
        except ValueError:
            raise MCPError(
                INVALID_PARAMS, f"the reply for {name[:100]!r} is not an elicitation result"
            ) from None
    wp = next((w for w in for_caller(waitpoints) if w["name"] == name), None)
    if wp is None or reply.action != "accept":
        return False
    formed = form_of(wp["answer_schema"])
    assert formed is not None
    try:
        given = fit_form(formed[0], formed[1], reply.content)
        await app.answer_waitpoint(answer=given, job_id=job.id, name=name, tenant=caller.tenant)
    except PayloadError as exc:
        raise MCPError(INVALID_PARAMS, f"answer at waitpoint {name!r} refused: {exc}") from None
    except Conflict:  # answered elsewhere meanwhile, or it timed out
        return False
    return True
