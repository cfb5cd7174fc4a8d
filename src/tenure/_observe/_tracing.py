"""The seam tracing plugs into: `current` is None until ``tenure.otel.instrument()``.

Every hook site (enqueue, the worker's claim, call and commit, FencedAuth, FenceMiddleware)
reads `current` once and, when it is None, goes on exactly as before: one global load per
job, no call, no import. This module imports nothing from OpenTelemetry; the tracer that
does (``tenure._observe._otel``) is loaded only by ``tenure.otel``, which the core never
imports. Heartbeat losses reach the tracer as events (``tenure.telemetry.attach``), not
through a hook here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .._job import Enqueued, Job
    from .._store import ClaimedJob, Finish, NewJob
    from .._worker._executor import Abandoned

Carrier = dict[str, str]


class Tracer(Protocol):
    """What the hook sites ask of a tracer. Each wrapper awaits the work it is handed and
    returns its result unchanged: tracing never changes what tenure does."""

    async def enqueue(self, job: NewJob, insert: Callable[[NewJob], Awaitable[Job]]) -> Job:
        """Queue ``job`` in a producer span whose context the row keeps."""
        ...

    async def enqueue_many(
        self,
        jobs: Sequence[NewJob],
        insert: Callable[[Sequence[NewJob], Carrier | None], Awaitable[list[Enqueued]]],
    ) -> list[Enqueued]:
        """Queue a batch in one producer span; every row keeps its context."""
        ...

    def claimed(self, job: ClaimedJob, worker: str) -> None:
        """A claim returned ``job``: the attempt's span, in the row's trace."""
        ...

    async def call(
        self, job: ClaimedJob, worker: str, run: Awaitable[Finish | Abandoned]
    ) -> Finish | Abandoned:
        """Run the tool call with its span current (the tool's own spans nest under it)."""
        ...

    async def commit(
        self, job: ClaimedJob, worker: str, finish: Finish, commit: Awaitable[bool]
    ) -> bool:
        """The fenced commit of the attempt's outcome, and the database's verdict."""
        ...

    def outgoing_headers(self) -> Carrier:
        """traceparent (and tracestate) of the current span, for a fenced request."""
        ...

    async def fence_request(self, scope: MutableMapping[str, Any], run: Awaitable[None]) -> None:
        """Serve one fenced request in a server span continuing the sender's trace."""
        ...

    def fence_decided(
        self, outcome: str, status: int, fence_scope: str | None, token: int | None
    ) -> None:
        """The receiver's verdict on the request being served."""
        ...


current: Tracer | None = None


def install(tracer: Tracer | None) -> None:
    """Set (or, with None, remove) the process's tracer."""
    global current
    current = tracer
