"""Every state a job, run, stage or waitpoint can be in, as types.

The schema's CHECK constraints hold the same lists; `tests/integration/store/test_states.py`
reads them back from a migrated database so the two cannot drift.
"""

from __future__ import annotations

from typing import Literal, TypeGuard

JobState = Literal["queued", "running", "waiting", "succeeded", "failed", "cancelled"]
"""``waiting``: suspended at a waitpoint, holding no lease and no worker slot."""

FinishState = Literal["succeeded", "failed", "queued", "waiting"]
"""What one fenced commit moves a running job to (``queued``: a retry or a release)."""

RunState = Literal["running", "succeeded", "failed", "cancelled"]

StageState = Literal["waiting", "open", "succeeded", "failed", "cancelled"]
"""``waiting``: a join that has not heard from every branch yet."""

StageKind = Literal["stage", "outbox"]

WaitpointState = Literal["open", "answered", "timed_out", "cancelled"]

OnTimeout = Literal["resume", "fail"]
"""What a waitpoint nobody answered in time does: resume the call with a timeout, or fail
the job."""

Answerer = Literal["holder", "caller", "nobody"]
"""Who may answer a waitpoint: whoever holds its token (a person, a service: the default),
or the job's caller too (an MCP client, asked by elicitation); ``nobody`` for a durable
sleep or a wait for child jobs (`Context.sleep`, `Context.wait_for`), which only their
deadline or their children end. A tool declares one of the first two."""

TransitionMode = Literal["none", "commit", "adopt"]
"""What decides a pipeline transition: nothing (a start or re-dispatch), the stage's job
committing under its token, or adopting a job that already ended."""

OwnershipState = Literal["owned", "unknown", "lost", "cancelled"]
"""What a worker knows of its lease: confirmed, unconfirmed (no new irreversible step),
lost (zero rows, or the local deadline passed), or cancelled by an operator."""

StopReason = Literal["lease_lost", "cancelled", "shutdown"]
"""Why a worker stopped a call before it returned."""

EndState = Literal["succeeded", "failed", "cancelled"]
"""How a job ended; it never leaves these."""

TERMINAL_STATES: frozenset[JobState] = frozenset({"succeeded", "failed", "cancelled"})


def has_ended(state: str | None) -> TypeGuard[EndState]:
    """Whether a job in ``state`` has ended (and ``state`` is an EndState to the checker)."""
    return state in TERMINAL_STATES


__all__ = [
    "TERMINAL_STATES",
    "Answerer",
    "EndState",
    "FinishState",
    "JobState",
    "OnTimeout",
    "OwnershipState",
    "RunState",
    "StageKind",
    "StageState",
    "StopReason",
    "TransitionMode",
    "WaitpointState",
    "has_ended",
]
