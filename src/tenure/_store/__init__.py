"""The store: the only code that speaks SQL to tenure's own database.

Module map (data flows top to bottom):

    _errors       every database error as a tenure error with a verdict: one table (RULES)
    _connection   libpq options, the pool, deadlines, the named statements (queries/*.sql)
    _rows         typed parameters in, frozen rows out
    _base         StoreBase: one pool, one way to run a named statement
    _jobs         enqueue, claim, the fenced commit, operators' reads and actions
    _waitpoints   suspend, answer, expire
    _steps        fenced steps: a job's checkpoints, read and recorded under its token
    _maintenance  schedules, the job pruner, planner statistics
    _reads        the read model: what operators read (and the journal's insert, pruning)
    _runs         pipeline runs and the transaction that moves one on
    _workers      the workers registry: register, stop, prune, list
    _store        Store: all of the above over one pool
    _lease        LeaseConnection: the heartbeat thread's own connection
    _listener     Listener: the LISTEN connection
    _queries      the .sql files' parser: ``-- name:`` statements, loaded once
    _migrate      plain-SQL migrations (migrations/*.sql)

    queries/      every statement, named: jobs, waitpoints, steps, maintenance, observe,
                  pipeline, workers
    migrations/   0001_jobs.sql ...: the only way tenure's tables are made
    schema.sql    what the migrations add up to, for reading (a test keeps it equal)

Everything above the store imports from this package, never from its modules, and never
sees a psycopg error: every method of `Store`, `LeaseConnection`, `migrate`, `probe` and
`fresh_database` raises tenure's own (`tenure._errors`: a StoreError with its verdict, or
QuotaExceeded), the database's error kept as ``__cause__`` (see `_errors`).
"""

from ._connection import (
    CONNECT_OPTIONS,
    MAX_CLAIM,
    MAX_RECONNECT_DELAY,
    MIGRATIONS_PACKAGE,
    QUERIES,
    PromptReconnect,
    check_dsn,
    connect_options,
    fresh_database,
    known_migrations,
    migrate,
    prepared_statements,
    probe,
    server_address,
)
from ._errors import RULES, store_error
from ._lease import LeaseConnection
from ._listener import Listener
from ._rows import (
    AppliedMigration,
    Cancellation,
    ChildRow,
    ClaimedJob,
    EventQuery,
    Extension,
    Finish,
    HeldLease,
    JobDetail,
    JobsStatistics,
    JobStatus,
    JobWaitpoint,
    JournalCount,
    JournalEntry,
    JournalRow,
    NewJob,
    NewStage,
    NewStep,
    OpenWaitpoint,
    OpenWaitpointRow,
    OutcomeBucket,
    QueueArrivals,
    QueueDepth,
    QueueFlow,
    RunningSummary,
    RunRow,
    RunSummary,
    ServerInfo,
    SessionBeat,
    StageRow,
    StepRow,
    StopCheck,
    TableIndex,
    Transition,
    WaitingSummary,
    WorkerInfo,
    WorkerRegistration,
    WorkerStatus,
)
from ._runs import RunTransaction
from ._store import Store

__all__ = [
    "CONNECT_OPTIONS",
    "MAX_CLAIM",
    "MAX_RECONNECT_DELAY",
    "MIGRATIONS_PACKAGE",
    "QUERIES",
    "RULES",
    "AppliedMigration",
    "Cancellation",
    "ChildRow",
    "ClaimedJob",
    "EventQuery",
    "Extension",
    "Finish",
    "HeldLease",
    "JobDetail",
    "JobStatus",
    "JobWaitpoint",
    "JobsStatistics",
    "JournalCount",
    "JournalEntry",
    "JournalRow",
    "LeaseConnection",
    "Listener",
    "NewJob",
    "NewStage",
    "NewStep",
    "OpenWaitpoint",
    "OpenWaitpointRow",
    "OutcomeBucket",
    "PromptReconnect",
    "QueueArrivals",
    "QueueDepth",
    "QueueFlow",
    "RunRow",
    "RunSummary",
    "RunTransaction",
    "RunningSummary",
    "ServerInfo",
    "SessionBeat",
    "StageRow",
    "StepRow",
    "StopCheck",
    "Store",
    "TableIndex",
    "Transition",
    "WaitingSummary",
    "WorkerInfo",
    "WorkerRegistration",
    "WorkerStatus",
    "check_dsn",
    "connect_options",
    "fresh_database",
    "known_migrations",
    "migrate",
    "prepared_statements",
    "probe",
    "server_address",
    "store_error",
]
