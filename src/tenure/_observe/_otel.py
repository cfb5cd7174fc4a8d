"""The OpenTelemetry tracer behind ``tenure.otel``: spans for the protocol's steps.

One trace per job: the producer's ``tenure.enqueue`` span goes into the job's row as a
W3C carrier (``trace_context``), and each attempt continues it from wherever it runs::

    tenure.enqueue                  producer      PRODUCER
    └── tenure.claim                worker        CONSUMER, one per attempt (token, attempt)
        ├── tenure.call             worker        the tool call, current while it runs
        │   ├── tenure.fence        receiver      SERVER, through FencedAuth's traceparent
        │   └── tenure.heartbeat_lost  worker     from the last confirmation to the loss
        └── tenure.commit           worker        the fenced commit and its verdict

Attributes carry what the journal carries — ids, token, attempt, tool, worker, outcome
and codes — never a payload, a result or an error message; exceptions are not recorded
on spans (their messages are the tool's words), only their class as the status.

Trace contexts from outside (a job's row, a request's headers) are validated here: a
``traceparent`` of version 00, at most 512 printable characters of ``tracestate``.
Anything else is ignored — the job runs in a trace of its own, the request is served —
and never an error for anyone.
"""

from __future__ import annotations

import contextvars
import re
import threading
import time
from collections.abc import (
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
)
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from .._errors import ConfigError
from .._intercept import Carrier, Interceptor, add_process, remove_process
from .._job import Enqueued, Job
from .._log import Event, attach
from .._store import ClaimedJob, Finish, NewJob
from .._version import __version__

if TYPE_CHECKING:
    from .._intercept import Insert, InsertMany

R = TypeVar("R")

ENQUEUE = "tenure.enqueue"
CLAIM = "tenure.claim"
CALL = "tenure.call"
COMMIT = "tenure.commit"
HEARTBEAT_LOST = "tenure.heartbeat_lost"
FENCE = "tenure.fence"

# What the heartbeat thread reports as events (tenure.telemetry); the rest are hooks.
EVENT_KINDS = frozenset({"heartbeat_lost", "heartbeat_withheld", "ownership_unknown"})

MAX_TRACESTATE = 512  # characters; W3C asks propagators to keep at least this much
MAX_TRACESTATE_MEMBERS = 32
MAX_ATTEMPTS = 100_000  # attempts followed at once (a worker runs at most 10,000)
_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE = re.compile(r"[\x20-\x7e]*")
_W3C = TraceContextTextMapPropagator()
_ROOT = Context()  # the parent of a span that starts a trace of its own
_ERROR_OUTCOMES = frozenset({"failed", "retried", "abandoned", "interrupted"})

# The span of the fenced request being served (FenceMiddleware reports its verdict into it).
_fence_span: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "tenure_fence_span", default=None
)


def carrier_of(value: object) -> Carrier | None:
    """``value`` as a W3C carrier if it is a valid one (tracestate dropped when it is not),
    else None: what a row or a request says is checked before OpenTelemetry sees it."""
    if not isinstance(value, dict):
        return None
    parent = value.get("traceparent")
    if not isinstance(parent, str) or not _TRACEPARENT.fullmatch(parent):
        return None
    carrier = {"traceparent": parent}
    state = value.get("tracestate")
    if (
        isinstance(state, str)
        and 0 < len(state) <= MAX_TRACESTATE
        and state.count(",") < MAX_TRACESTATE_MEMBERS
        and _TRACESTATE.fullmatch(state)
    ):
        carrier["tracestate"] = state
    return carrier


def parent_of(value: object) -> Context | None:
    """The context a row's (or a request's) trace context continues, or None."""
    carrier = carrier_of(value)
    if carrier is None:
        return None
    context = _W3C.extract(carrier)
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


def header_carrier(headers: Iterable[tuple[bytes, bytes]]) -> Carrier | None:
    """traceparent and tracestate from ASGI headers; a repeated traceparent is no parent."""
    parents: list[bytes] = []
    states: list[bytes] = []
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"traceparent":
            parents.append(value)
        elif lowered == b"tracestate":
            states.append(value)
    if len(parents) != 1 or len(parents[0]) > 64:
        return None
    given = {"traceparent": parents[0].decode("latin-1")}
    if states and sum(len(s) + 1 for s in states) <= MAX_TRACESTATE + 1:
        given["tracestate"] = b",".join(states).decode("latin-1")
    return carrier_of(given)


def _injected() -> Carrier | None:
    """The current span's context as a carrier (tracestate capped), None without a span."""
    carrier: Carrier = {}
    _W3C.inject(carrier)
    return carrier_of(carrier)


def _epoch_ns(monotonic: float) -> int:
    """A moment of this process's monotonic clock on the wall clock OpenTelemetry uses."""
    return time.time_ns() - round((time.monotonic() - monotonic) * 1e9)


def _call_outcome(outcome: object) -> tuple[str, str | None]:
    """The journal's word for what an attempt's call produced (a `Finish`, or the
    worker's ``Abandoned``, which has a ``reason``), and its code."""
    if not isinstance(outcome, Finish):
        return "abandoned", getattr(outcome, "reason", None)
    given = (outcome.error or {}).get("code")
    code = None if given is None else str(given)
    if outcome.state == "queued":
        return ("released" if outcome.refund_attempt else "retried"), code
    if outcome.state == "waiting":
        return "suspended", None
    return outcome.state, code


def _settle(span: Span, outcome: str, code: str | None) -> None:
    span.set_attribute("tenure.outcome", outcome)
    if code is not None:
        span.set_attribute("tenure.code", code)
    if outcome in _ERROR_OUTCOMES:
        span.set_status(Status(StatusCode.ERROR, code or outcome))


@dataclass(slots=True)
class _Attempt:
    """One attempt this process runs: the claim's context, and the call's span once it runs."""

    context: Context
    call: Span | None = None


class OtelTracer(Interceptor):
    """The tracing interceptor (`tenure._intercept.Interceptor`) on an OpenTelemetry
    tracer provider."""

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("tenure", __version__, tracer_provider=provider)
        self._attempts: dict[tuple[int, int], _Attempt] = {}

    @staticmethod
    def _job_attributes(job: ClaimedJob, worker: str) -> dict[str, AttributeValue]:
        """Who holds which job under which token: the five every worker span carries (the
        SDK checks each attribute of each span, so there are no more than needed)."""
        return {
            "tenure.job.id": job.id,
            "tenure.tool": job.tool,
            "tenure.job.token": job.token,
            "tenure.job.attempt": job.attempt,
            "tenure.worker": worker,
        }

    def _span(
        self,
        name: str,
        kind: SpanKind,
        attributes: Mapping[str, AttributeValue],
        context: Context | None = None,
    ) -> AbstractContextManager[Span]:
        """A span made current for the block: its exceptions are marked by class only."""
        return self._tracer.start_as_current_span(
            name,
            context=context,
            kind=kind,
            attributes=attributes,
            record_exception=False,  # a message (and a traceback's locals) may hold payload
            set_status_on_exception=False,
        )

    # -- producers ---------------------------------------------------------------------

    @contextmanager
    def _producing(self, tool: str, count: int) -> Iterator[tuple[Span, Carrier | None]]:
        attributes: dict[str, AttributeValue] = {"tenure.tool": tool}
        if count != 1:
            attributes["tenure.jobs.count"] = count
        with self._span(ENQUEUE, SpanKind.PRODUCER, attributes) as span:
            try:
                yield span, _injected()
            except BaseException as exc:  # refused (a conflict, a quota) or never answered
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise

    async def enqueue(self, job: NewJob, proceed: Insert) -> Job:
        with self._producing(job.tool, 1) as (span, carrier):
            found = await proceed(replace(job, trace_context=carrier))
            span.set_attributes({"tenure.job.id": found.id, "tenure.job.created": found.created})
            return found

    async def enqueue_many(
        self, jobs: Sequence[NewJob], carrier: Carrier | None, proceed: InsertMany
    ) -> list[Enqueued]:
        if not jobs:
            return await proceed(jobs, carrier)
        with self._producing(jobs[0].tool, len(jobs)) as (span, injected):
            done = await proceed(jobs, injected)
            span.set_attribute("tenure.jobs.created", sum(e.created for e in done))
            return done

    # -- workers -----------------------------------------------------------------------

    def claimed(self, job: ClaimedJob, worker: str) -> None:
        attributes = self._job_attributes(job, worker)
        if job.previous_token is not None:
            attributes["tenure.job.previous_token"] = job.previous_token
        parent = parent_of(job.trace_context)
        if parent is None and job.trace_context is not None:
            attributes["tenure.trace_context.ignored"] = True
        span = self._tracer.start_span(
            CLAIM,
            context=parent or _ROOT,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            start_time=_epoch_ns(job.sent_at),
        )
        span.end()
        if len(self._attempts) >= MAX_ATTEMPTS:  # an attempt whose call never ran, long ago
            self._attempts.pop(next(iter(self._attempts)), None)
        self._attempts[(job.id, job.token)] = _Attempt(trace.set_span_in_context(span))

    async def call(self, job: ClaimedJob, worker: str, proceed: Callable[[], Awaitable[R]]) -> R:
        key = (job.id, job.token)
        attempt = self._attempts.get(key)
        context = _ROOT if attempt is None else attempt.context
        attributes = self._job_attributes(job, worker)
        with self._span(CALL, SpanKind.INTERNAL, attributes, context) as span:
            if attempt is not None:
                attempt.call = span
            try:
                outcome = await proceed()
            except BaseException as exc:  # the worker is going down hard: no commit follows
                self._attempts.pop(key, None)
                _settle(span, "interrupted", type(exc).__name__)
                raise
            name, code = _call_outcome(outcome)
            _settle(span, name, code)
            if name == "abandoned":
                self._attempts.pop(key, None)
            return outcome

    async def commit(
        self, job: ClaimedJob, worker: str, finish: Finish, proceed: Callable[[], Awaitable[bool]]
    ) -> bool:
        key = (job.id, job.token)
        attempt = self._attempts.get(key)
        context = _ROOT if attempt is None else attempt.context
        outcome, code = _call_outcome(finish)
        attributes = self._job_attributes(job, worker)
        attributes["tenure.outcome"] = outcome
        if code is not None:
            attributes["tenure.code"] = code
        try:
            with self._span(COMMIT, SpanKind.CLIENT, attributes, context) as span:
                try:
                    accepted = await proceed()
                except BaseException as exc:
                    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                    raise
                span.set_attribute("tenure.commit.accepted", accepted)
                if not accepted:
                    span.set_status(Status(StatusCode.ERROR, "result_rejected"))
                return accepted
        finally:
            self._attempts.pop(key, None)

    def on_event(self, event: Event) -> None:
        """A heartbeat's news about an attempt this process runs (a telemetry handler)."""
        if event.job is None or event.token is None:
            return
        attempt = self._attempts.get((event.job, event.token))
        if attempt is None:
            return
        reason = str(event.fields.get("reason", event.kind))
        if event.kind != "heartbeat_lost":
            if attempt.call is not None:
                attempt.call.add_event(f"tenure.{event.kind}", {"tenure.reason": reason})
            return
        since = event.fields.get("since_confirmed", 0.0)
        now = time.time_ns()
        parent = attempt.context
        if attempt.call is not None:
            parent = trace.set_span_in_context(attempt.call, parent)
        attributes: dict[str, AttributeValue] = {"tenure.reason": reason}
        for name, value in (
            ("tenure.job.id", event.job),
            ("tenure.job.token", event.token),
            ("tenure.job.attempt", event.attempt),
            ("tenure.tool", event.tool),
            ("tenure.worker", event.worker),
        ):
            if value is not None:
                attributes[name] = value
        span = self._tracer.start_span(
            HEARTBEAT_LOST,
            context=parent,
            attributes=attributes,
            start_time=now - round(float(since) * 1e9),
        )
        span.set_status(Status(StatusCode.ERROR, reason))
        span.end(end_time=now)

    # -- the fence: sender and receiver --------------------------------------------------

    def outgoing_headers(self) -> Carrier:
        return _injected() or {}

    async def fence_request(
        self, scope: MutableMapping[str, Any], proceed: Callable[[], Awaitable[None]]
    ) -> None:
        context = None  # an ASGI instrumentation's server span, when there is one
        if not trace.get_current_span().get_span_context().is_valid:
            context = parent_of(header_carrier(scope.get("headers", ())))
        attributes = {"http.request.method": str(scope.get("method", ""))}
        with self._span(FENCE, SpanKind.SERVER, attributes, context) as span:
            reset = _fence_span.set(span)
            try:
                await proceed()
            except BaseException as exc:
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise
            finally:
                _fence_span.reset(reset)

    def fence_decided(
        self, outcome: str, status: int, fence_scope: str | None, token: int | None
    ) -> None:
        span = _fence_span.get()
        if span is None:
            return
        span.set_attribute("tenure.fence.outcome", outcome)
        span.set_attribute("http.response.status_code", status)
        if fence_scope is not None and token is not None:
            span.set_attribute("tenure.fence.scope", fence_scope)
            span.set_attribute("tenure.fence.token", token)
        if outcome == "aborted":
            span.set_status(Status(StatusCode.ERROR, outcome))


# -- turning it on and off (tenure.otel) ---------------------------------------------------

_lock = threading.Lock()
_installed: tuple[OtelTracer, Callable[[], None]] | None = None  # the tracer, its detach


def instrument(*, tracer_provider: trace.TracerProvider | None = None) -> None:
    """Trace tenure's work in this process from now on (calling it again replaces the
    provider): the tracer becomes one of the process's interceptors, at the end of every
    App's, worker's and fence's chain. ``tracer_provider`` defaults to OpenTelemetry's
    global one, looked up when each span starts, so it may be set after this call."""
    global _installed
    if tracer_provider is not None and not isinstance(tracer_provider, trace.TracerProvider):
        raise ConfigError(
            "tracer_provider must be an opentelemetry.trace.TracerProvider, got "
            f"{type(tracer_provider).__name__}"
        )
    tracer = OtelTracer(tracer_provider)
    with _lock:
        _remove()
        add_process(tracer)
        _installed = tracer, attach(tracer.on_event, kinds=EVENT_KINDS)


def uninstrument() -> None:
    """Stop tracing: the chains are as if `instrument` had never been called."""
    with _lock:
        _remove()


def _remove() -> None:
    global _installed
    if _installed is not None:
        tracer, detach = _installed
        _installed = None
        remove_process(tracer)
        detach()


def is_instrumented() -> bool:
    """Whether `instrument` is in effect in this process."""
    return _installed is not None
