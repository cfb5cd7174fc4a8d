"""Waitpoints: a call that waits for a person or a webhook without holding anything.

The programming model, plainly: a tool that suspends is called again when the
answer comes, from the top, by whichever worker claims it then. So a tool is
written to resume: it asks for its waitpoint by name, and on the first call
(``wp.pending``) hands the token out and suspends; on the call after the
answer (``wp.answered`` or ``wp.timed_out``) it goes on from there. Its side
effects keep the keys they had (``ctx.idempotency_key(op)`` is the job's,
across attempts and suspensions), so asking twice never notifies twice.

The token is derived, not drawn: HMAC-SHA256 of the job and the waitpoint's
name under a secret the database keeps (migration 0008). A call retried before
it managed to suspend hands out the very same token, and only its SHA-256 is
stored, so the table cannot be used to answer anything. The secret itself is
shown only to roles that may change jobs (migration 0014): reading every table
is not enough to make a token.

A retry (`App.admin.retry`) of a job whose waitpoint closed without an answer (timed
out, or cancelled while it waited) asks it again: the waitpoint is pending, and
the suspension opens it again under the same token with a fresh deadline. An
answer stays an answer across retries.

Who may answer is declared with the waitpoint (migration 0020): whoever holds
its token (``answered_by="holder"``, the default: a person, a service), or the
job's caller too (``"caller"``: an MCP client is asked, by elicitation). Only
the second may be answered without the token, and only by the caller of that
job (`App.answer_waitpoint`), so an agent is never the one to approve its own
"manager_approval". ``answer=Type`` declares the answer's type: its JSON Schema
is stored with the waitpoint (the form an MCP client is shown: `form_of`) and
the tool gets the answer as that type (``wp.answer``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import pydantic

from ._errors import PayloadError, PolicyError
from ._payload import MAX_PAYLOAD_BYTES, encode
from ._signature import json_adapter, load_result
from ._states import Answerer, OnTimeout

MIN_TIMEOUT = 1.0
MAX_TIMEOUT = 365 * 24 * 3600.0
NAME_MAX = 100
WaitKind = Literal["answer", "sleep", "children"]
TOKEN_PREFIX = "wp_"  # noqa: S105 - a prefix that says what a token is, not a secret
MAX_SCHEMA_BYTES = 64 * 1024  # of a declared answer type's JSON Schema
MAX_FORM_ANSWER_BYTES = 64 * 1024  # of an answer given through a form
FORM_FIELD = "answer"  # the one field of the form that asks for an answer that is no object
_FORM_TYPES = frozenset({"string", "number", "integer", "boolean"})
_FORM_KEYS = frozenset(
    {"type", "title", "description", "default", "enum", "format", "minLength", "maxLength",
     "minimum", "maximum", "items", "minItems", "maxItems"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Waitpoint:
    """One named wait of one job, as the tool sees it.

    ``token`` is the capability that answers it (hand it to whoever answers:
    `App.answer_waitpoint`, or the dashboard's open ``POST /waitpoints/{token}``).
    ``state`` is ``pending`` until it was answered (``answer`` holds the answer)
    or its deadline passed (``timed_out``) and the job was called again.
    """

    name: str
    token: str
    timeout: float
    on_timeout: OnTimeout
    state: Literal["pending", "answered", "timed_out"] = "pending"
    answer: Any = None
    answered_by: Answerer = "holder"
    answer_schema: dict[str, Any] | None = None  # of the declared answer type (None: any JSON)
    # 'answer' (a person, a webhook); 'sleep' and 'children' are made by ctx.sleep and
    # ctx.wait_for (answered_by 'nobody'): only the deadline, or the end of the child jobs in
    # ``children``, resumes it.
    kind: WaitKind = "answer"
    children: tuple[int, ...] = ()

    @property
    def pending(self) -> bool:
        return self.state == "pending"

    @property
    def answered(self) -> bool:
        return self.state == "answered"

    @property
    def timed_out(self) -> bool:
        return self.state == "timed_out"


class Suspend(BaseException):
    """Raised by `Context.suspend`, `Context.sleep` and `Context.wait_for` to end the attempt
    in the waiting state; the worker commits the wait when it reaches the tool's caller.

    A BaseException, so that a tool's own ``except Exception`` cannot swallow it; code that
    catches everything (a framework running the tool) must let it through.
    """

    def __init__(self, waitpoint: Waitpoint, request_json: str | None) -> None:
        super().__init__(f"suspended at waitpoint {waitpoint.name!r}")
        self.waitpoint = waitpoint
        self.request_json = request_json


def derive_token(secret: bytes, job_id: int, name: str) -> str:
    digest = hmac.new(secret, f"{job_id}\n{name}".encode(), hashlib.sha256).digest()
    return TOKEN_PREFIX + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def token_hash(token: str) -> str:
    """What the database stores and looks a token up by."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= NAME_MAX or not name.isprintable():
        raise PolicyError(f"a waitpoint name is 1-{NAME_MAX} printable characters, got {name!r}")
    return name


def check_timeout(timeout: Any) -> float:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or not MIN_TIMEOUT <= timeout <= MAX_TIMEOUT
    ):
        raise PolicyError(
            f"a waitpoint timeout is a number of seconds in [{MIN_TIMEOUT:g}, {MAX_TIMEOUT:g}], "
            f"got {timeout!r}"
        )
    return float(timeout)


def waitpoint(
    secret: bytes,
    job_id: int,
    seen: Mapping[str, Any] | None,
    name: str,
    timeout: float,
    on_timeout: OnTimeout,
    answer: Any = None,
    answered_by: Answerer = "holder",
) -> Waitpoint:
    """The waitpoint ``name`` of a job, answered or timed out if ``seen`` says so; an answer
    given as the declared ``answer`` type (PayloadError if it does not fit it)."""
    name = check_name(name)
    if on_timeout not in ("resume", "fail"):
        raise PolicyError(f"on_timeout must be 'resume' or 'fail', got {on_timeout!r}")
    if answered_by not in ("holder", "caller"):
        raise PolicyError(f"answered_by must be 'holder' or 'caller', got {answered_by!r}")
    if answer is None and answered_by == "caller":
        answer = str  # a caller is asked with a form: a line of text unless said otherwise
    schema = None if answer is None else answer_schema(name, answer)
    if answered_by == "caller" and form_of(schema) is None:
        raise PolicyError(
            f"waitpoint {name!r}: its caller is asked with a form, so its answer must be "
            "a string, number, boolean or enum, or an object of those (no nesting, no "
            f"optional unions); got {answer!r}"
        )
    token = derive_token(secret, job_id, name)
    outcome = (seen or {}).get(name)
    made = Waitpoint(
        name,
        token,
        check_timeout(timeout) if outcome is None else timeout,
        on_timeout,
        answered_by=answered_by,
        answer_schema=schema,
    )
    if outcome is None:
        return made
    if outcome.get("timed_out"):
        return replace(made, state="timed_out")
    given = outcome.get("answer")
    if answer is not None:
        try:
            given = load_result(given, answer)
        except pydantic.ValidationError as exc:
            raise PayloadError(
                f"the answer at waitpoint {name!r} does not fit its declared type "
                f"({exc.error_count()} problem(s))"
            ) from None
    return replace(made, state="answered", answer=given)


def answer_schema(name: str, answer: Any) -> dict[str, Any]:
    """The JSON Schema of a declared answer type; PolicyError for one that is no JSON."""
    schema = json_adapter(f"waitpoint {name!r}: its answer type", answer)[1]
    if len(encode(schema, "answer schema", MAX_PAYLOAD_BYTES)) > MAX_SCHEMA_BYTES:
        raise PolicyError(f"waitpoint {name!r}: its answer type's schema is too large")
    return schema


def _form_field(field: Any, defs: Mapping[str, Any]) -> dict[str, Any] | None:
    """One field of an elicitation form (MCP's primitive schemas), or None."""
    if not isinstance(field, dict):
        return None
    ref = field.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and len(field) == 1:
        field = defs.get(ref.removeprefix("#/$defs/"))
        if not isinstance(field, dict):
            return None
    kind = field.get("type")
    if kind == "array":
        items = _form_field(field.get("items"), defs)
        if items is None or items.get("type") != "string" or "enum" not in items:
            return None
    elif kind not in _FORM_TYPES or set(field) - _FORM_KEYS - {"$defs"}:
        return None
    return {k: v for k, v in field.items() if k in _FORM_KEYS}


def form_of(schema: Mapping[str, Any] | None) -> tuple[dict[str, Any], bool] | None:
    """The elicitation form that asks for an answer of ``schema`` (a flat object of
    strings, numbers, booleans and enums), and whether the answer is its one field
    `FORM_FIELD` (an answer that is no object); None when no form can ask for it."""
    if schema is None:
        return None
    defs = schema.get("$defs") or {}
    if schema.get("type") == "object" and isinstance(schema.get("properties"), dict):
        fields = {}
        for key, field in schema["properties"].items():
            fields[key] = _form_field(field, defs)
            if fields[key] is None:
                return None
        required = [k for k in schema.get("required", []) if k in fields]
        return {"type": "object", "properties": fields, "required": required}, False
    one = _form_field(schema, defs)
    if one is None:
        return None
    return {"type": "object", "properties": {FORM_FIELD: one}, "required": [FORM_FIELD]}, True


def _fits(value: Any, field: Mapping[str, Any]) -> bool:
    kind = field.get("type")
    if isinstance(value, bool) != (kind == "boolean"):
        return False
    if kind == "string":
        fits = isinstance(value, str)
    elif kind == "integer":
        fits = isinstance(value, int)
    elif kind == "number":
        fits = isinstance(value, int | float) and math.isfinite(value)
    elif kind == "array":
        items = field["items"]
        return isinstance(value, list) and all(_fits(v, items) for v in value)
    else:
        fits = kind == "boolean"
    return fits and ("enum" not in field or value in field["enum"])


def fit_form(form: Mapping[str, Any], wrapped: bool, content: Any) -> Any:
    """The answer a form's reply gives (its `FORM_FIELD` when ``wrapped``), or PayloadError
    saying what does not fit: an unknown or missing field, a value of another type or
    outside the enum, a NUL character, more than `MAX_FORM_ANSWER_BYTES`."""
    if not isinstance(content, dict):
        raise PayloadError("the reply holds no answer (an object of the form's fields)")
    fields = form["properties"]
    problems = [f"{k[:40]!r}: not a field of the form" for k in content if k not in fields]
    problems += [f"{k!r}: required" for k in form["required"] if content.get(k) is None]
    problems += [
        f"{k!r}: not a {fields[k].get('type')}" + (" of the choices" if "enum" in fields[k] else "")
        for k, v in content.items()
        if k in fields and v is not None and not _fits(v, fields[k])
    ]
    if problems:
        raise PayloadError("the answer does not fit the form: " + "; ".join(problems[:10]))
    answer = {k: v for k, v in content.items() if v is not None}
    encode(answer, "the answer", MAX_FORM_ANSWER_BYTES)
    return answer[FORM_FIELD] if wrapped else answer


def request_json(request: Any) -> str | None:
    """What a suspension asks, as stored JSON (None for nothing)."""
    return None if request is None else encode(request, "waitpoint request", MAX_PAYLOAD_BYTES)


def answer_json(answer: Any) -> str:
    """An answer as stored JSON; PayloadError for one that is not JSON or too large."""
    return encode(answer, "answer", MAX_PAYLOAD_BYTES)
