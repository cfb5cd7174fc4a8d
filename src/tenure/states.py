"""The states a job, run, stage or waitpoint can be in, as types to annotate your code with.

``Job.state`` is a `JobState`, ``Run.state`` a `RunState`, ``RunStage.state`` a
`StageState`, ``Context.ownership`` an `OwnershipState`, ``Waitpoint.answered_by`` an
`Answerer`. The schema's CHECK
constraints allow exactly these values (a test reads them back).
"""

from ._states import (
    TERMINAL_STATES,
    Answerer,
    EndState,
    JobState,
    OnTimeout,
    OwnershipState,
    RunState,
    StageState,
    WaitpointState,
    has_ended,
)

__all__ = [
    "TERMINAL_STATES",
    "Answerer",
    "EndState",
    "JobState",
    "OnTimeout",
    "OwnershipState",
    "RunState",
    "StageState",
    "WaitpointState",
    "has_ended",
]
