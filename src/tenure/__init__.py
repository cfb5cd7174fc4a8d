"""tenure: long tool calls under leases on PostgreSQL.

Heartbeats keep a live call's lease, fencing tokens stop an owner that woke up
too late, idempotency keys stop the duplicate side effect, and the rescuer
resumes whatever a crash left behind.
"""

from ._app import App
from ._context import Context
from ._errors import (
    ConfigError,
    Conflict,
    ConnectionLost,
    IdempotencyConflict,
    InvalidSearch,
    JobAlreadyEnded,
    JobCancelled,
    JobFailed,
    JobNotFound,
    LeaseLost,
    OutcomeUnknown,
    OwnershipError,
    OwnershipUnknown,
    PayloadError,
    PermanentError,
    PlanRejected,
    PolicyError,
    QuotaExceeded,
    ResultRejected,
    RetryableError,
    RunFailed,
    RunNotFound,
    StaleFence,
    StoreError,
    TenureError,
    ToolError,
    UnknownTool,
    WaitTimeout,
)
from ._job import Enqueued, Job
from ._maintenance._job_pruner import JobPrunerConfig
from ._maintenance._journal_pruner import JournalPrunerConfig
from ._maintenance._rescuer import RescuerConfig
from ._maintenance._scheduler import Schedule, SchedulerConfig
from ._maintenance._statistics import StatisticsConfig
from ._maintenance._worker_pruner import WorkerPrunerConfig
from ._pipeline._model import Pipeline, Run, RunStage, Stage, Verdict
from ._policy import LeasePolicy, RetryPolicy, ToolPolicy
from ._run_watch import RunEvent
from ._search import JobPage
from ._version import __version__ as __version__
from ._waitpoint import Suspend, Waitpoint
from ._worker._worker import Worker

__all__ = [
    "App",
    "ConfigError",
    "Conflict",
    "ConnectionLost",
    "Context",
    "Enqueued",
    "IdempotencyConflict",
    "InvalidSearch",
    "Job",
    "JobAlreadyEnded",
    "JobCancelled",
    "JobFailed",
    "JobNotFound",
    "JobPage",
    "JobPrunerConfig",
    "JournalPrunerConfig",
    "LeaseLost",
    "LeasePolicy",
    "OutcomeUnknown",
    "OwnershipError",
    "OwnershipUnknown",
    "PayloadError",
    "PermanentError",
    "Pipeline",
    "PlanRejected",
    "PolicyError",
    "QuotaExceeded",
    "RescuerConfig",
    "ResultRejected",
    "RetryPolicy",
    "RetryableError",
    "Run",
    "RunEvent",
    "RunFailed",
    "RunNotFound",
    "RunStage",
    "Schedule",
    "SchedulerConfig",
    "Stage",
    "StaleFence",
    "StatisticsConfig",
    "StoreError",
    "Suspend",
    "TenureError",
    "ToolError",
    "ToolPolicy",
    "UnknownTool",
    "Verdict",
    "WaitTimeout",
    "Waitpoint",
    "Worker",
    "WorkerPrunerConfig",
]
