"""Every error tenure raises, in one tree.

    TenureError
    ├── ConfigError            bad DSN, bad settings, missing server binaries
    ├── PolicyError            a lease/retry policy that breaks a rule (L > R·H + J, caps)
    │   └── PlanRejected       a model's plan with steps outside the tools and their caps
    ├── PayloadError           payload or result not JSON, too large or too deep
    ├── UnknownTool            enqueue or run of a tool nobody registered
    ├── JobNotFound
    ├── InvalidSearch          a job search with an unknown state, a bad cursor, text too long
    ├── RunNotFound            no pipeline run with that id
    ├── IdempotencyConflict    the same idempotency key with a different tool or payload
    ├── QuotaExceeded          the tenant already has its quota of queued jobs
    ├── WaitTimeout            wait() ran out of time; the job goes on
    ├── JobFailed              wait() on a job that ended failed
    ├── RunFailed              wait_run() on a run that ended failed or cancelled
    ├── Conflict               a verdict/transition from a stage that no longer owns the run
    │   └── JobAlreadyEnded    cancel() of a job that had already ended
    ├── OwnershipError         raised inside a tool: stop before the next irreversible step
    │   ├── LeaseLost          the database said zero rows, or the local deadline passed
    │   ├── OwnershipUnknown   the database did not answer; the lease may or may not hold
    │   └── JobCancelled       an operator cancelled the job (wait() raises it too)
    ├── ResultRejected         the fenced commit matched zero rows: a newer owner exists
    ├── StaleFence             a receiver saw a token lower than the highest it accepted
    ├── StoreError             a statement the database refused or never answered; ``verdict``
    │   │                      says what to do: retry, fail or uncertain (the store's table)
    │   ├── DatabaseUnavailable  no answer: the connection broke or the server went away
    │   │   └── ConnectionLost   the link broke before a read answered (waiters retry it)
    │   ├── DatabaseBusy         rolled back by contention or limits; may pass if sent again
    │   ├── ConstraintViolation  a unique, check or foreign-key constraint refused the row
    │   ├── DataRejected         a value the database cannot store (class 22, a size limit)
    │   ├── PermissionDenied     the database role lacks a privilege the statement needs
    │   ├── SchemaMismatch       a table, column or function this tenure expects is missing
    │   └── StatementFailed      any other refusal
    └── ToolError              raised by tools to say how a failure should be treated
        ├── RetryableError     try again after backoff while attempts remain
        ├── PermanentError     fail now; retrying cannot help
        └── OutcomeUnknown     the request may have been applied; retry with the same key

The three ownership meanings are never merged: LeaseLost (zero rows),
OwnershipUnknown (no answer) and OutcomeUnknown (the tool's receiver did not
answer) each call for a different reaction.

A StoreError's verdict comes from one table in the store (``_store/_errors.py``,
by SQLSTATE, class and psycopg type): ``retry`` (the statement was rolled back
and may pass if sent again), ``fail`` (sending it again cannot help) or
``uncertain`` (no answer came: it may or may not have been applied, so read
before repeating it). A constraint violation is never uncertain. Whatever reaches
tenure's database raises these, never psycopg's own: psycopg's error is the
``__cause__`` and its SQLSTATE the error's ``sqlstate``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ._job import Job


class TenureError(Exception):
    """Base of every error tenure raises on purpose."""


class ConfigError(TenureError):
    """Settings that cannot work: a malformed DSN, a missing binary, a bad option."""


class PolicyError(TenureError):
    """A policy that breaks a rule; the message names the numbers and the fix."""


class PayloadError(TenureError):
    """A payload or result that is not JSON, too large, nested too deeply, or that does
    not fit the tool's signature; ``problems`` lists each problem on its own (the path
    to the value and what is wrong with it), so a caller, or a model, can fix all of
    them at once."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems: tuple[str, ...] = tuple(problems)


class UnknownTool(TenureError):
    """No tool of that name is registered."""


class JobNotFound(TenureError):
    """No job with that id exists (or it was pruned)."""


class InvalidSearch(TenureError):
    """A job search that cannot be run as asked: an unknown state, a cursor this search did
    not hand out, a reversed time range, a filter longer than any stored value can be or
    holding text no stored value can (a NUL). Nothing was read."""


class RunNotFound(TenureError):
    """No pipeline run with that id (or key) exists."""


class IdempotencyConflict(TenureError):
    """The key is already taken by a job with a different tool or payload."""


class QuotaExceeded(TenureError):
    """The enqueue would take its tenant past its quota of queued jobs; nothing was queued.

    Back off and try again: the tenant's queued jobs leave the queue as workers take them.
    """


class WaitTimeout(TenureError):
    """wait() gave up; the job itself is not affected."""


class JobFailed(TenureError):
    """wait() found the job failed: ``job`` is its final row, ``code`` its error code
    (``error``, ``permanent``, ``time_limit``, ``lease_expired``, ``bad_result``, ...) and
    ``attempts`` how many attempts it used."""

    def __init__(self, message: str, job: Job) -> None:
        super().__init__(message)
        self.job: Job = job
        self.code: str = str((job.error or {}).get("code", job.state))
        self.attempts: int = job.attempt

    @property
    def told(self) -> str | None:
        """The tool's own words to its caller, when it classified the failure itself (see
        `told_message`); None otherwise."""
        return told_message(self.job.error)


class RunFailed(TenureError):
    """wait_run() found the run failed or cancelled; `run` carries it, stages and all."""

    def __init__(self, message: str, run: object) -> None:
        super().__init__(message)
        self.run = run


class PlanRejected(PolicyError):
    """A plan (a model's list of tool calls) was refused before anything was queued.

    ``problems`` lists every step's problem, not just the first, so the model (or
    the person reading its output) can fix the whole plan in one go.
    """

    def __init__(self, problems: list[str]) -> None:
        super().__init__(
            f"plan rejected, nothing was queued ({len(problems)} problem"
            + ("s" if len(problems) != 1 else "")
            + "):\n  "
            + "\n  ".join(problems)
        )
        self.problems = tuple(problems)


class Conflict(TenureError):
    """A transition from a party that no longer owns it (HTTP surfaces map it to 409)."""


class JobAlreadyEnded(Conflict):
    """cancel() found the job already ended; ``job`` is its final row, unchanged."""

    def __init__(self, message: str, job: Job) -> None:
        super().__init__(message)
        self.job: Job = job


class OwnershipError(TenureError):
    """The worker may not take another irreversible step for this job."""


class LeaseLost(OwnershipError):
    """The database refused the extension (zero rows) or the local deadline passed."""


class OwnershipUnknown(OwnershipError):
    """The database did not confirm the lease in time; it may still hold, or not."""


class JobCancelled(OwnershipError):
    """The job was cancelled. Inside a tool: stop before the next irreversible step. From
    wait(): the job ended cancelled, and ``job`` is its final row."""

    def __init__(self, message: str, job: Job | None = None) -> None:
        super().__init__(message)
        self.job: Job | None = job


class ResultRejected(TenureError):
    """The fenced commit matched zero rows; the result was journaled, never published."""


class StaleFence(TenureError):
    """A receiver already accepted a higher fencing token for this scope."""

    def __init__(self, scope: str, token: int, highest: int) -> None:
        super().__init__(
            f"stale fencing token {token} for scope {scope!r}: token {highest} was already accepted"
        )
        self.scope = scope
        self.token = token
        self.highest = highest


ErrorVerdict = Literal["retry", "fail", "uncertain"]
"""What to do about a database error: send the statement again (it was rolled back), give
up (sending it again cannot help), or find out first (no answer: it may have been applied)."""


class StoreError(TenureError):
    """A statement the database refused or never answered.

    ``verdict``: ``retry``, ``fail`` or ``uncertain`` (see the module docstring).
    ``sqlstate``: the database's code, when it gave one; ``constraint``: the constraint
    that refused the row, for a ConstraintViolation. The message names the error's class,
    never the values the statement carried; the database's own error is the ``__cause__``.
    """

    verdict: ErrorVerdict = "fail"

    def __init__(
        self,
        message: str,
        *,
        verdict: ErrorVerdict | None = None,
        sqlstate: str | None = None,
        constraint: str | None = None,
    ) -> None:
        super().__init__(message)
        if verdict is not None:
            self.verdict = verdict
        self.sqlstate = sqlstate
        self.constraint = constraint


class DatabaseUnavailable(StoreError):
    """No answer: the connection broke, timed out or the server shut down mid-statement."""

    verdict: ErrorVerdict = "uncertain"


class ConnectionLost(DatabaseUnavailable):
    """The connection to the database broke before the statement answered: the server
    restarted or shut down, the network cut the link, or no connection could be had.
    A read may simply be tried again (`App.wait` and `App.watch` do, for a while); for a
    write, whether it happened is unknown until the row is read (verdict ``uncertain``),
    unless no connection was had at all, so nothing was sent (verdict ``retry``)."""


class DatabaseBusy(StoreError):
    """The statement was rolled back (a deadlock, a serialization failure, a lock or
    statement timeout, too many connections): sending it again may pass."""

    verdict: ErrorVerdict = "retry"


class ConstraintViolation(StoreError):
    """A unique, check, not-null or foreign-key constraint refused the row."""


class DataRejected(StoreError):
    """A value the database cannot store: bad text (a NUL), a number out of range, too large."""


class PermissionDenied(StoreError):
    """The database role lacks a privilege the statement needs (docs: operations/roles)."""


class SchemaMismatch(StoreError):
    """A table, column or function this version of tenure expects is not there: migrate."""


class StatementFailed(StoreError):
    """Any other refusal by the database."""


class ToolError(TenureError):
    """Raised by a tool to say how its failure must be treated."""

    code = "tool_error"


class RetryableError(ToolError):
    """Transient failure: retry after backoff while attempts remain."""

    code = "retryable"


class PermanentError(ToolError):
    """Failure that retrying cannot fix (bad input, refused by the receiver)."""

    code = "permanent"


class OutcomeUnknown(ToolError):
    """The side effect may or may not have happened; retry with the same idempotency key."""

    code = "outcome_unknown"


# Failures a tool classified itself (PermanentError, RetryableError, OutcomeUnknown, or a
# type its policy declares permanent): their messages are the tool's words to its caller.
# An unclassified exception's text stays on the job's row for the operator.
CLASSIFIED_CODES = frozenset({"permanent", "retryable", "outcome_unknown"})
MAX_TOLD = 2000  # characters of a classified failure's message a caller is told


def told_message(error: Mapping[str, Any] | None) -> str | None:
    """What a caller (an MCP client, a framework's model) may be told of a job's error: the
    message of a failure the tool classified itself, at most `MAX_TOLD` characters; None
    for any other (an unclassified exception's text may hold a receiver's answer or a
    customer's data, and stays with the operator)."""
    if not error or error.get("code") not in CLASSIFIED_CODES:
        return None
    message = error.get("message")
    return message[:MAX_TOLD] if isinstance(message, str) and message else None


def one_line(exc: BaseException) -> str:
    """An exception as one line: its first non-empty line, else its type's name."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__
