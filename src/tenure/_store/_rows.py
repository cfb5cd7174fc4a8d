"""What goes in and comes out of the store: typed parameters and frozen rows."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NotRequired, TypedDict

from psycopg.types.json import Jsonb

from .._job import Job
from .._states import (
    Answerer,
    EndState,
    FinishState,
    JobState,
    OnTimeout,
    RunState,
    StageKind,
    StageState,
    TransitionMode,
    WaitpointState,
)

WorkerStatus = Literal["alive", "silent", "stopped"]


@dataclass(frozen=True, slots=True)
class NewJob:
    tool: str
    key: str
    payload_json: str
    payload_hash: str
    max_attempts: int
    priority: int = 0
    delay_ms: int = 0
    payload_hmac: str | None = None  # keyed hash for the journal; None without a journal key
    concurrency_key: str | None = None  # jobs sharing a key run at most concurrency_limit at once
    concurrency_limit: int | None = None
    tenant: str = ""  # '' is the jobs no caller assigned to a tenant
    quota: int | None = None  # the tenant's queued-job quota; None: unlimited
    retain_ms: int = 7 * 24 * 3600 * 1000  # kept this long once it ended (the key's window)
    # The producer's span as a W3C carrier (traceparent, tracestate); set by tenure.otel only.
    trace_context: dict[str, str] | None = None
    parent_id: int | None = None  # the job that started this one with ctx.enqueue

    def params(self) -> dict[str, Any]:
        """The parameters of the `enqueue` statement."""
        return {
            "tool": self.tool,
            "key": self.key,
            "payload": Jsonb(self.payload_json, dumps=str),
            "payload_hash": self.payload_hash,
            "max_attempts": self.max_attempts,
            "priority": self.priority,
            "delay_ms": self.delay_ms,
            "payload_hmac": self.payload_hmac,
            "concurrency_key": self.concurrency_key,
            "concurrency_limit": self.concurrency_limit,
            "tenant": self.tenant,
            "quota": self.quota,
            "retain_ms": self.retain_ms,
            "trace_context": None if self.trace_context is None else Jsonb(self.trace_context),
            "parent_id": self.parent_id,
        }


# ClaimedJob and Finish are made for every job a worker runs; nothing assigns to them
# after construction, but they are not frozen: a frozen dataclass's __init__ sets each
# field through object.__setattr__, which cost ~2.5 µs per claimed job here.
@dataclass(slots=True, eq=False)
class ClaimedJob:
    """A freshly claimed job: the token, and the lease as the database set it."""

    id: int
    tool: str
    token: int
    attempt: int
    max_attempts: int
    payload: Any
    payload_hash: str
    idempotency_key: str
    lease_until: datetime
    db_now: datetime
    previous_owner: str | None
    previous_token: int | None
    payload_hmac: str | None = None
    run_after: datetime | None = None
    waitpoints: dict[str, Any] | None = None  # answered or timed out, by name
    trace_context: Any = None  # as the row holds it: read only by tenure.otel, which validates it
    tenant: str = ""  # its children (ctx.enqueue) are queued in the same tenant
    # The lease follows the claimer's session (migration 0023): the heartbeat's fast path
    # (beat_session) confirms it with the session, without a row of its own.
    session_lease: bool = False
    # When the claim statement was sent on its connection (this process's monotonic clock):
    # the lease's local clock starts here, never earlier (not while waiting for a connection).
    sent_at: float = 0.0

    @property
    def lease_remaining(self) -> float:
        return (self.lease_until - self.db_now).total_seconds()


@dataclass(slots=True)
class Finish:
    """One fenced outcome: `state` is succeeded, failed or queued (retry/release)."""

    job_id: int
    token: int
    state: FinishState
    result_json: str | None = None
    error: dict[str, Any] | None = None
    delay_ms: int = 0
    refund_attempt: bool = False
    progress_json: str | None = None  # the last progress report, if not written yet
    waitpoint: OpenWaitpoint | None = None  # state "waiting": where the call suspended


@dataclass(frozen=True, slots=True)
class OpenWaitpoint:
    """What a suspending call opens (see queries/waitpoints.sql, suspend_job)."""

    name: str
    token_hash: str
    timeout_ms: int
    on_timeout: str
    request_json: str | None
    answered_by: str = "holder"  # "caller" or "nobody" (a sleep, children): 0020, 0022
    answer_schema_json: str | None = None  # the declared answer type's JSON Schema
    kind: str = "answer"  # 'sleep': only its deadline; 'children': the jobs in waiting_on
    waiting_on: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class NewStep:
    """One step's checkpoint to record under its job's token (queries/steps.sql)."""

    job_id: int
    token: int
    name: str
    result_json: str
    duration_ms: int
    kind: str = "step"
    detail: dict[str, Any] | None = None


class StepRow(TypedDict):
    """A recorded step as a watcher sees it: never its result."""

    name: str
    kind: str
    token: int
    attempt: int
    duration_ms: int
    detail: dict[str, Any]
    recorded_at: datetime


class ChildRow(TypedDict):
    """A job a run started (ctx.enqueue), as a watcher sees it: never its payload or result."""

    id: int
    tool: str
    state: JobState
    attempt: int
    token: int
    owner: str | None
    created_at: datetime
    finished_at: datetime | None
    code: str | None


@dataclass(frozen=True, slots=True)
class JournalRow:
    """One event for the journal writer's batch. ``observed_at`` is when it was seen (this
    process's monotonic clock); the row is dated that long before the database's clock at
    the moment the batch is sent, however long the batch waited for a connection."""

    kind: str
    job_id: int | None
    token: int | None
    attempt: int | None
    worker: str | None
    tool: str | None
    code: str | None
    duration_ms: int | None
    detail: dict[str, Any]
    observed_at: float


@dataclass(frozen=True, slots=True)
class JobStatus:
    """The few columns a waiter reads each time it is told to look again."""

    id: int
    state: JobState
    attempt: int
    progress: dict[str, Any] | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Cancellation:
    """A job as its cancel left it, and ``held_until``: the lease its call held when it was
    cancelled (None if it was not running). The owner's conservative local deadline ends
    before that moment on the database's clock, so past it the owner starts nothing more."""

    job: Job
    held_until: datetime | None


@dataclass(frozen=True, slots=True)
class StopCheck:
    """Whether a cancelled call is known to have stopped (its owner said so, or refused its
    commit), and how many seconds its held lease had left when asked (negative: over)."""

    stopped: bool
    lease_left: float

    @property
    def settled(self) -> bool:
        return self.stopped or self.lease_left <= 0


@dataclass(frozen=True, slots=True)
class EventQuery:
    """Filters of `tenure events`; None means "any". ``reclaims`` adds job_claimed rows
    that took a job over from an expired lease."""

    kinds: tuple[str, ...] = ()
    reclaims: bool = False
    job_id: int | None = None
    tool: str | None = None
    worker: str | None = None
    since_ms: int | None = None
    since_at: datetime | None = None
    limit: int = 100


@dataclass(frozen=True, slots=True)
class SessionBeat:
    """The answer of a session beat: when the database moved the session's beat (None: the
    beat was refused), its clock at the answer, the leases it froze."""

    beat_at: datetime | None
    db_now: datetime
    frozen: list[int]
    sent_at: float = 0.0  # when the beat was sent (monotonic, connection in hand)

    @property
    def age(self) -> float:
        """Seconds between the beat and the answer (what every confirmed lease has spent)."""
        assert self.beat_at is not None
        return max(0.0, (self.db_now - self.beat_at).total_seconds())


@dataclass(frozen=True, slots=True)
class Extension:
    """One row of a heartbeat's answer: a new lease, or None for zero rows."""

    job_id: int
    lease_until: datetime | None
    db_now: datetime
    sent_at: float = 0.0  # when the extension was sent (monotonic, connection in hand)

    @property
    def remaining(self) -> float | None:
        if self.lease_until is None:
            return None
        return (self.lease_until - self.db_now).total_seconds()


# -- pipelines (see queries/pipeline.sql) ----------------------------------------


@dataclass(frozen=True, slots=True)
class RunRow:
    """One run as stored: its own copy of the graph, its context, where it stands."""

    id: int
    pipeline: str
    state: RunState
    idempotency_key: str
    input: Any
    input_hash: str
    graph: dict[str, Any]
    context: dict[str, Any]
    result: Any
    error: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class StageRow:
    """One stage execution (or outbox intent) and what its job says right now."""

    id: int
    run_id: int
    name: str
    round: int
    kind: StageKind
    state: StageState
    arrived: list[str]
    tool: str | None
    job_key: str | None
    payload: Any
    payload_hash: str | None
    max_attempts: int | None
    job_id: int | None
    decision: str | None
    created_at: datetime
    decided_at: datetime | None
    job_exists: bool
    job_state: JobState | None
    job_token: int | None
    job_result: Any
    job_error: dict[str, Any] | None
    job_finished_at: datetime | None
    db_now: datetime


@dataclass(frozen=True, slots=True)
class NewStage:
    """A stage execution a transition opens, or a join's row it waits at."""

    name: str
    round: int
    kind: StageKind = "stage"
    state: StageState = "open"
    arrived: tuple[str, ...] = ()
    tool: str | None = None
    payload_json: str | None = None
    payload_hash: str | None = None
    max_attempts: int | None = None
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Transition:
    """Everything one transition writes, in one statement (apply_transition).

    ``mode`` says what decides it: ``commit`` (the stage's job, fenced by
    ``owner`` + ``token``), ``adopt`` (a job that already ended in
    ``expect_state``) or ``none`` (nothing: a start or a re-dispatch).
    None in a run field means "unchanged".
    """

    run_id: int
    mode: TransitionMode = "none"
    stage_id: int | None = None
    stage_name: str | None = None
    job_id: int | None = None
    token: int | None = None
    owner: str | None = None
    expect_state: JobState | None = None
    job_state: EndState | None = None
    result_json: str | None = None
    error: dict[str, Any] | None = None
    stage_state: StageState | None = None
    decision: str | None = None
    context_json: str | None = None
    run_state: RunState | None = None
    run_result_json: str | None = None
    run_error: dict[str, Any] | None = None
    new: tuple[NewStage, ...] = ()
    stop_open: bool = False


def journal_params(rows: Sequence[JournalRow]) -> dict[str, Any]:
    """Call right before the statement is sent: each row's delay is measured from now."""
    now = time.monotonic()
    return {
        "kinds": [r.kind for r in rows],
        "job_ids": [r.job_id for r in rows],
        "tokens": [r.token for r in rows],
        "attempts": [r.attempt for r in rows],
        "workers": [r.worker for r in rows],
        "tools": [r.tool for r in rows],
        "codes": [r.code for r in rows],
        "durations_ms": [r.duration_ms for r in rows],
        "details": [Jsonb(r.detail) for r in rows],
        "delays_ms": [max(0, round((now - r.observed_at) * 1000)) for r in rows],
    }


# -- what operators read (queries/observe.sql): rows as the statements return them --------
# TypedDicts rather than dataclasses: these are read by name in tables, pages and gauges,
# and a TypedDict types each name without copying every row into another object.


class JournalEntry(TypedDict):
    """One journal row (``payload_hmac`` is absent from the dashboard's feed)."""

    id: int
    at: datetime
    kind: str
    job_id: int | None
    token: int | None
    attempt: int | None
    worker: str | None
    tool: str | None
    code: str | None
    duration_ms: int | None
    payload_hmac: NotRequired[str | None]
    detail: dict[str, Any]


class JobDetail(TypedDict):
    """A job as an operator may see it: never its payload, result or error message."""

    id: int
    tool: str
    state: JobState
    idempotency_key: str
    attempt: int
    max_attempts: int
    token: int
    owner: str | None
    lease_until: datetime | None
    heartbeat_at: datetime | None
    claimed_at: datetime | None
    run_after: datetime
    priority: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    code: str | None
    payload_hmac: str | None
    tenant: str
    progress: dict[str, Any] | None
    db_now: datetime


class HeldLease(TypedDict):
    id: int
    tool: str
    attempt: int
    max_attempts: int
    token: int
    owner: str
    claimed_at: datetime | None
    heartbeat_at: datetime | None
    lease_until: datetime
    db_now: datetime


class RunningSummary(TypedDict):
    tool: str
    running: int
    lease_remaining_min: float
    heartbeat_age_max: float


class QueueDepth(TypedDict):
    tool: str
    depth: int
    oldest_age: float | None
    capped: bool


class WaitingSummary(TypedDict):
    tool: str
    waiting: int
    oldest_age: float
    deadline_min: float


class OpenWaitpointRow(TypedDict):
    job_id: int
    name: str
    on_timeout: str
    created_at: datetime
    tool: str
    tenant: str
    seconds_left: float
    waited: float


class JobWaitpoint(TypedDict):
    name: str
    state: WaitpointState
    on_timeout: OnTimeout
    deadline: datetime
    request: Any
    created_at: datetime
    closed_at: datetime | None
    answered_by: Answerer  # "holder" (of its token), "caller" (the job's), or "nobody"
    answer_schema: dict[str, Any] | None  # the declared answer type's JSON Schema
    kind: str  # answer, sleep or children (0022)
    seconds_left: float


class OutcomeBucket(TypedDict):
    tool: str | None
    bucket: datetime
    succeeded: int
    failed: int
    retried: int
    lost: int


class JournalCount(TypedDict):
    kind: str
    tool: str | None
    n: int
    last_id: int


class RunSummary(TypedDict):
    run_id: int
    pipeline: str
    state: RunState
    updated_at: datetime
    stages: list[dict[str, Any]]
    start: Any  # the graph's start stages (a list), as the run stored it
    graph: list[dict[str, Any]] | None  # each stage's name, next and on; never arguments


class ServerInfo(TypedDict):
    version: str
    version_num: int
    database: str
    db_now: datetime


class AppliedMigration(TypedDict):
    version: int
    name: str
    applied_at: datetime


class TableIndex(TypedDict):
    table_name: str
    index_name: str
    table_rows: float


class JobsStatistics(TypedDict):
    analyzed_rows: float
    live_rows: float


@dataclass(frozen=True, slots=True)
class WorkerRegistration:
    """What a worker process says about itself at start (and again if its row was pruned)."""

    name: str
    host: str
    pid: int
    version: str
    tools: tuple[str, ...]
    concurrency: int
    keepalive_ms: int

    def params(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "tools": list(self.tools),
            "concurrency": self.concurrency,
            "keepalive_ms": self.keepalive_ms,
        }


class WorkerInfo(TypedDict):
    """A registered worker process as `App.admin.workers` returns it.

    ``status`` is ``alive``, ``silent`` (not seen for three of its keep-alive periods: dead,
    paused or cut off) or ``stopped`` (a clean shutdown). ``leases_held`` counts the running
    jobs it owns, ``leases_expired`` those of them whose lease ran out and that nobody has
    reclaimed yet; ``seen_ago`` is seconds since it was last seen, on the database's clock.
    """

    name: str
    host: str
    pid: int
    version: str
    tools: list[str]
    concurrency: int
    keepalive_ms: int
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None
    leases_held: int
    leases_expired: int
    status: WorkerStatus
    seen_ago: float


class QueueFlow(TypedDict):
    tool: str | None
    bucket: datetime
    running: int
    reclaimed: int
    succeeded: int
    failed: int
    tools: int  # how many tools had any in the window (only the busiest come back)


class QueueArrivals(TypedDict):
    tool: str
    bucket: datetime
    queued: int
    tools: int
