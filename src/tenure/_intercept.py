"""Interceptors: what wraps tenure's steps — enqueue, claim, call, commit, and a fenced
request on both ends — in one chain (Temporal's interceptors).

An `Interceptor` overrides the steps it cares about; each wrapping method is handed
``proceed``, the rest of the chain down to the step itself, and returns what ``proceed``
returned: an interceptor observes (a span, a metric), it never changes what tenure does.
The base class passes everything straight on.

A chain is configured where the step runs: ``App(interceptors=[...])`` for its enqueues
and its workers' claims, calls and commits, ``FenceMiddleware(interceptors=[...])`` for a
receiver, ``FencedAuth(..., interceptors=[...])`` for a sender. `tenure.otel.instrument()`
adds its tracer to the process's own interceptors, which every chain ends with (so
instrumenting a process covers Apps made before). With no interceptor at all, every step
costs a call and an identity check, and nothing else.

This module sits low (it imports nothing of tenure but types), so the worker, the App
and the fence all import it without running back up.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ._job import Enqueued, Job
    from ._store import ClaimedJob, Finish, NewJob

    # What a chain ends in: the store's inserts.
    Insert = Callable[[NewJob], Awaitable[Job]]
    InsertMany = Callable[[Sequence[NewJob], "Carrier | None"], Awaitable[list[Enqueued]]]

__all__ = ["Carrier", "Chain", "Interceptor", "Interceptors", "add_process", "remove_process"]

Carrier = dict[str, str]
R = TypeVar("R")


class Interceptor:
    """One link of the chain; override the steps to observe, call ``proceed`` once."""

    async def enqueue(self, job: NewJob, proceed: Insert) -> Job:
        """Queue one job (``proceed`` may be given a changed copy: a trace context)."""
        return await proceed(job)

    async def enqueue_many(
        self, jobs: Sequence[NewJob], carrier: Carrier | None, proceed: InsertMany
    ) -> list[Enqueued]:
        """Queue a batch; ``carrier`` is the trace context every row keeps."""
        return await proceed(jobs, carrier)

    def claimed(self, job: ClaimedJob, worker: str) -> None:
        """A claim returned ``job`` (an attempt begins); nothing to wrap."""

    async def call(self, job: ClaimedJob, worker: str, proceed: Callable[[], Awaitable[R]]) -> R:
        """Run the tool call: its outcome is a `Finish`, or the call was abandoned."""
        return await proceed()

    async def commit(
        self, job: ClaimedJob, worker: str, finish: Finish, proceed: Callable[[], Awaitable[bool]]
    ) -> bool:
        """The fenced commit of ``finish``; returns the database's verdict."""
        return await proceed()

    def outgoing_headers(self) -> Carrier:
        """Headers a fenced request carries besides the fence's (a ``traceparent``)."""
        return {}

    async def fence_request(
        self, scope: MutableMapping[str, Any], proceed: Callable[[], Awaitable[None]]
    ) -> None:
        """Serve one fenced request (a receiver's `FenceMiddleware`)."""
        await proceed()

    def fence_decided(
        self, outcome: str, status: int, fence_scope: str | None, token: int | None
    ) -> None:
        """The receiver's verdict on the request being served."""


class Chain:
    """Interceptors in order, the first outermost (never empty: an owner without any has
    no chain, and its steps run as they are)."""

    __slots__ = ("interceptors",)

    def __init__(self, interceptors: Iterable[Interceptor]) -> None:
        self.interceptors = tuple(interceptors)

    async def enqueue(self, job: NewJob, proceed: Insert) -> Job:
        for link in reversed(self.interceptors):
            proceed = functools.partial(link.enqueue, proceed=proceed)
        return await proceed(job)

    async def enqueue_many(self, jobs: Sequence[NewJob], proceed: InsertMany) -> list[Enqueued]:
        for link in reversed(self.interceptors):
            proceed = functools.partial(link.enqueue_many, proceed=proceed)
        return await proceed(jobs, None)

    def claimed(self, job: ClaimedJob, worker: str) -> None:
        for link in self.interceptors:
            link.claimed(job, worker)

    async def call(self, job: ClaimedJob, worker: str, proceed: Callable[[], Awaitable[R]]) -> R:
        for link in reversed(self.interceptors):
            proceed = functools.partial(link.call, job, worker, proceed)
        return await proceed()

    async def commit(
        self, job: ClaimedJob, worker: str, finish: Finish, proceed: Callable[[], Awaitable[bool]]
    ) -> bool:
        for link in reversed(self.interceptors):
            proceed = functools.partial(link.commit, job, worker, finish, proceed)
        return await proceed()

    def outgoing_headers(self) -> Carrier:
        headers: Carrier = {}
        for link in self.interceptors:
            headers.update(link.outgoing_headers())
        return headers

    async def fence_request(
        self, scope: MutableMapping[str, Any], proceed: Callable[[], Awaitable[None]]
    ) -> None:
        for link in reversed(self.interceptors):
            proceed = functools.partial(link.fence_request, scope, proceed)
        await proceed()

    def fence_decided(
        self, outcome: str, status: int, fence_scope: str | None, token: int | None
    ) -> None:
        for link in self.interceptors:
            link.fence_decided(outcome, status, fence_scope, token)


# The process's own interceptors (tenure.otel's tracer): the tail of every chain.
_process: tuple[Interceptor, ...] = ()
_lock = threading.Lock()


def add_process(interceptor: Interceptor) -> None:
    """Add ``interceptor`` to every chain of this process, from now on."""
    global _process
    with _lock:
        _process = (*_process, interceptor)


def remove_process(interceptor: Interceptor) -> None:
    """Take ``interceptor`` out of every chain of this process (if it is in)."""
    global _process
    with _lock:
        _process = tuple(i for i in _process if i is not interceptor)


def process_interceptors() -> tuple[Interceptor, ...]:
    return _process


class Interceptors:
    """The chain of one App, worker or fence end: its own interceptors, then the
    process's. `chain()` is rebuilt only when the process's change (one identity check),
    and None when there is no interceptor at all: a step's caller then skips it."""

    __slots__ = ("_chain", "_own", "_seen")

    def __init__(self, own: Iterable[Interceptor] = ()) -> None:
        self._own = tuple(own)
        for link in self._own:
            if not isinstance(link, Interceptor):
                raise TypeError(f"an interceptor must subclass Interceptor, got {link!r}")
        self._seen: tuple[Interceptor, ...] = ()
        self._chain = Chain(self._own) if self._own else None

    @property
    def own(self) -> tuple[Interceptor, ...]:
        return self._own

    def chain(self) -> Chain | None:
        process = _process
        if process is not self._seen:
            self._seen = process
            links = self._own + process
            self._chain = Chain(links) if links else None
        return self._chain
