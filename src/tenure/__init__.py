"""tenure: long tool calls under leases on PostgreSQL.

Heartbeats keep a live call's lease, fencing tokens stop an owner that woke up
too late, idempotency keys stop the duplicate side effect, and the rescuer
resumes whatever a crash left behind.
"""

import inspect as _inspect
import typing as _typing

from ._app import App
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
from ._maintenance._scheduler import Schedule
from ._pipeline._model import Pipeline, Run, RunStage, Stage, Verdict
from ._policy import LeasePolicy, RetryPolicy, ToolPolicy
from ._run_watch import RunEvent
from ._search import JobPage
from ._version import __version__ as __version__
from ._waitpoint import Suspend, Waitpoint
from ._worker._context import Context
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
    "ResultRejected",
    "RetryPolicy",
    "RetryableError",
    "Run",
    "RunEvent",
    "RunFailed",
    "RunNotFound",
    "RunStage",
    "Schedule",
    "Stage",
    "StaleFence",
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
]


def _report_as_tenure(cls: type, module: str = __name__) -> None:
    """Make ``cls`` say it is ``tenure.<name>`` (reprs, docs, pickles name the public path;
    ``tenure.maintenance`` names its own the same way).

    Its own annotations are evaluated first, in the module that defines them: typing's
    `get_type_hints` (and dataclass and pydantic introspection) would otherwise look the
    private names up in ``tenure``'s namespace and fail."""
    own = _inspect.get_annotations(cls)
    if own:
        hints = _typing.get_type_hints(cls, include_extras=True)
        cls.__annotations__ = {name: hints[name] for name in own}
    cls.__module__ = module


for _value in [globals()[_name] for _name in __all__]:
    if isinstance(_value, type) and _value.__module__.startswith("tenure._"):
        _report_as_tenure(_value)
del _value
