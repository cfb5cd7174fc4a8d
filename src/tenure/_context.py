"""The Context handed to a tool: who it is, under which token, and may it act now."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, Unpack

from ._errors import ConfigError, PayloadError, PolicyError
from ._states import Answerer, OnTimeout, OwnershipState
from ._waitpoint import Suspend, Waitpoint
from ._waitpoint import request_json as waitpoint_request
from ._waitpoint import waitpoint as make_waitpoint
from ._worker._ownership import Ownership

if TYPE_CHECKING:
    from .fence import FencedAuth
    from .fence._signing import SentRequest


class Context:
    """A tool's view of its own job.

    ``idempotency_key(op)`` is stable across attempts and workers — a repeated
    request after a timeout must carry the same key, never a fresh one.
    ``ensure_owned()`` is the check to make right before every irreversible
    step; `fence_headers()` and `http_auth()` carry the key and the fencing
    token to the receiver, which is the only place a stale owner can still be
    stopped once its request is on the wire.
    """

    def __init__(
        self,
        *,
        job_id: int,
        tool: str,
        token: int,
        attempt: int,
        max_attempts: int,
        worker: str,
        ownership: Ownership,
        safety_margin: float,
        signing_key: bytes | None = None,
        progress: Callable[[str], None] | None = None,
        waitpoint_secret: bytes | None = None,
        waitpoints: Mapping[str, Any] | None = None,
    ) -> None:
        self.job_id = job_id
        self.tool = tool
        self.token = token
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.worker = worker
        self._ownership = ownership
        self._margin = safety_margin
        self._signing_key = signing_key
        self._cancel = False  # set by the worker's thread, read by the tool's: a plain flag
        self._progress = progress
        self._waitpoint_secret = waitpoint_secret
        self._waitpoints = waitpoints  # answered or timed out, by name (from the job's row)

    def __repr__(self) -> str:
        return (
            f"Context(job_id={self.job_id}, tool={self.tool!r}, token={self.token}, "
            f"attempt={self.attempt}/{self.max_attempts})"
        )

    @property
    def fence_scope(self) -> str:
        return f"tool-job:{self.job_id}"

    def idempotency_key(self, operation: str) -> str:
        """The stable key of one side effect of this job: ``tool-job:{job}:{operation}``."""
        if not operation or not operation.isprintable() or ":" in operation or len(operation) > 100:
            raise ValueError(
                f"operation must be 1-100 printable characters without ':', got {operation!r}"
            )
        return f"{self.fence_scope}:{operation}"

    def fence_headers(self, operation: str, **request: Unpack[SentRequest]) -> dict[str, str]:
        """Idempotency-Key, X-Execution-Fence, X-Fence-Scope (and a signature if keyed).

        With a signing key the signature covers the request too, so ``method``,
        ``path`` (the URL as sent) and ``body`` (the exact bytes) are required;
        ``http_auth(op)`` reads them from the request for you.
        """
        from .fence import fence_headers

        key = self.idempotency_key(operation)
        return fence_headers(self.fence_scope, self.token, key, self._signing_key, **request)

    def http_auth(self, operation: str) -> FencedAuth:
        """An httpx auth that adds the fence headers and checks ownership before sending."""
        from .fence import FencedAuth

        return FencedAuth(self, operation)

    @property
    def lease_remaining(self) -> float:
        """Seconds of confirmed lease left on this worker's monotonic clock."""
        return self._ownership.remaining()

    @property
    def ownership(self) -> OwnershipState:
        """``owned``, ``unknown``, ``lost`` or ``cancelled``."""
        return self._ownership.status

    @property
    def cancelled(self) -> bool:
        """True once the tool should stop: lease lost, job cancelled, time limit or shutdown.

        Threaded tools poll this (async tools are cancelled with CancelledError).
        """
        return self._cancel or self._ownership.status in ("lost", "cancelled")

    def report_progress(
        self, done: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Say how far the call got: ``done`` of ``total`` (units are yours), and a short
        ``message`` (at most 1,000 characters).

        Callable from async and threaded tools alike; it never waits for the database.
        Reports are coalesced: the worker writes the latest one, fenced by this call's
        owner and token like a heartbeat, at most a few times a second for all of its
        calls, so calling this in a tight loop is fine. A stale owner's report is refused.
        Whoever waits sees it in ``job.progress`` and through ``app.watch(job_id)``. The
        message is your own text: it stays on the job's row and never enters the journal.
        """
        if self._progress is None:
            return
        self._progress(progress_json(done, total, message))

    def waitpoint(
        self,
        name: str,
        *,
        timeout: float = 24 * 3600.0,
        on_timeout: OnTimeout = "resume",
        answer: Any = None,
        answered_by: Answerer = "holder",
    ) -> Waitpoint:
        """This call's waitpoint ``name``: pending (hand ``wp.token`` out, then
        `suspend`), or, when the call was resumed, ``answered`` (``wp.answer``) or
        ``timed_out``. The token is the same on every attempt. ``timeout`` (seconds,
        1 s to a year) is how long it may stay open (an answer after it is refused);
        then the job is resumed with ``wp.timed_out`` (``on_timeout="resume"``) or
        fails (``"fail"``). After a retry (`App.retry`), a waitpoint that closed
        without an answer is pending again, and suspending opens it again.

        ``answer`` declares the answer's type (a TypedDict, a pydantic model, a
        dataclass, ``bool``, a ``Literal``...): ``wp.answer`` is then that type, and an
        answer that does not fit it raises PayloadError here. ``answered_by`` says who may
        answer: ``"holder"`` (the default), only whoever holds ``wp.token``, a person or a
        service; ``"caller"``, the job's caller too, without the token (over MCP its
        client is asked, by elicitation, with a form built from ``answer``, which must
        then be a flat object of strings, numbers, booleans and enums, or one of those;
        default ``str``). Never declare ``"caller"`` for a decision the calling agent
        must not take itself: an approval, a sign-off."""
        if self._waitpoint_secret is None:
            raise ConfigError("this context has no waitpoint secret (not run by a worker)")
        return make_waitpoint(
            self._waitpoint_secret,
            self.job_id,
            self._waitpoints,
            name,
            timeout,
            on_timeout,
            answer,
            answered_by,
        )

    def suspend(self, waitpoint: Waitpoint, *, request: Any = None) -> NoReturn:
        """End this attempt waiting at ``waitpoint``: no lease, no heartbeat, no worker
        slot while it waits; the attempt is not counted. The job is called again when
        the waitpoint is answered or times out. ``request`` (JSON) says what is asked,
        for whoever answers (shown on the job; never journaled). Raises; nothing after
        it runs."""
        if not waitpoint.pending:
            raise PolicyError(
                f"waitpoint {waitpoint.name!r} was already {waitpoint.state}; "
                "wait again under a new name"
            )
        raise Suspend(waitpoint, waitpoint_request(request))

    def ensure_owned(self, margin: float | None = None) -> None:
        """Raise LeaseLost, OwnershipUnknown or JobCancelled unless an irreversible step
        may start now: the lease is confirmed and at least ``margin`` seconds of it remain
        (default: the tool's safety margin)."""
        self._ownership.ensure(self._margin if margin is None else margin)

    def _request_stop(self) -> None:
        self._cancel = True


MAX_PROGRESS_MESSAGE = 1000


def progress_json(done: float, total: float | None, message: str | None) -> str:
    """The JSON of one progress report; PayloadError for values that are not one."""
    for name, value in (("done", done), ("total", total)):
        if value is None and name == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
            raise PayloadError(f"progress {name} must be a finite number, got {_shown(value)}")
        if value < 0:
            raise PayloadError(f"progress {name} must not be negative, got {_shown(value)}")
    if message is not None:
        if not isinstance(message, str):
            raise PayloadError(f"progress message must be text, got {type(message).__name__}")
        if len(message) > MAX_PROGRESS_MESSAGE:
            raise PayloadError(
                f"progress message is {len(message)} characters; the limit is "
                f"{MAX_PROGRESS_MESSAGE}"
            )
        message = message.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    return json.dumps({"done": done, "total": total, "message": message}, allow_nan=False)


def _finite(value: float) -> bool:
    """Whether ``value`` is a number a float can hold: an int past the float range
    (10**400) is refused like infinity, instead of raising OverflowError."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _shown(value: object) -> str:
    """A bad value for an error message: a huge int by its size (its repr would be
    thousands of digits, or raise ValueError past Python's conversion limit)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
