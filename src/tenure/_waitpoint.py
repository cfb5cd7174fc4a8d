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

A retry (`App.retry`) of a job whose waitpoint closed without an answer (timed
out, or cancelled while it waited) asks it again: the waitpoint is pending, and
the suspension opens it again under the same token with a fresh deadline. An
answer stays an answer across retries.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ._errors import PolicyError
from ._payload import MAX_PAYLOAD_BYTES, encode
from ._states import OnTimeout

MIN_TIMEOUT = 1.0
MAX_TIMEOUT = 365 * 24 * 3600.0
NAME_MAX = 100
TOKEN_PREFIX = "wp_"  # noqa: S105 - a prefix that says what a token is, not a secret


@dataclass(frozen=True, slots=True)
class Waitpoint:
    """One named wait of one job, as the tool sees it.

    ``token`` is the capability that answers it (hand it to whoever answers:
    `App.complete_waitpoint`, or the dashboard's open ``POST /waitpoints/{token}``).
    ``state`` is ``pending`` until it was answered (``answer`` holds the answer)
    or its deadline passed (``timed_out``) and the job was called again.
    """

    name: str
    token: str
    timeout: float
    on_timeout: OnTimeout
    state: Literal["pending", "answered", "timed_out"] = "pending"
    answer: Any = None

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
    """Raised by `Context.suspend` to end the attempt in the waiting state.

    A BaseException, so that a tool's own ``except Exception`` cannot swallow it.
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
) -> Waitpoint:
    """The waitpoint ``name`` of a job, answered or timed out if ``seen`` says so."""
    name = check_name(name)
    if on_timeout not in ("resume", "fail"):
        raise PolicyError(f"on_timeout must be 'resume' or 'fail', got {on_timeout!r}")
    token = derive_token(secret, job_id, name)
    outcome = (seen or {}).get(name)
    if outcome is None:
        return Waitpoint(name, token, check_timeout(timeout), on_timeout)
    if outcome.get("timed_out"):
        return Waitpoint(name, token, timeout, on_timeout, "timed_out")
    return Waitpoint(name, token, timeout, on_timeout, "answered", outcome.get("answer"))


def request_json(request: Any) -> str | None:
    """What a suspension asks, as stored JSON (None for nothing)."""
    return None if request is None else encode(request, "waitpoint request", MAX_PAYLOAD_BYTES)


def answer_json(answer: Any) -> str:
    """An answer as stored JSON; PayloadError for one that is not JSON or too large."""
    return encode(answer, "answer", MAX_PAYLOAD_BYTES)
