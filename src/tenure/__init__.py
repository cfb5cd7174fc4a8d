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
    IdempotencyConflict,
    JobCancelled,
    JobFailed,
    JobNotFound,
    LeaseLost,
    OutcomeUnknown,
    OwnershipError,
    OwnershipUnknown,
    PayloadError,
    PermanentError,
    PolicyError,
    ResultRejected,
    RetryableError,
    StaleFence,
    TenureError,
    ToolError,
    UnknownTool,
    WaitTimeout,
)
from ._job import Job
from ._policy import LeasePolicy, RetryPolicy, ToolPolicy
from ._worker._worker import Worker

__version__ = "0.1.0"

__all__ = [
    "App",
    "ConfigError",
    "Conflict",
    "Context",
    "IdempotencyConflict",
    "Job",
    "JobCancelled",
    "JobFailed",
    "JobNotFound",
    "LeaseLost",
    "LeasePolicy",
    "OutcomeUnknown",
    "OwnershipError",
    "OwnershipUnknown",
    "PayloadError",
    "PermanentError",
    "PolicyError",
    "ResultRejected",
    "RetryPolicy",
    "RetryableError",
    "StaleFence",
    "TenureError",
    "ToolError",
    "ToolPolicy",
    "UnknownTool",
    "WaitTimeout",
    "Worker",
]
