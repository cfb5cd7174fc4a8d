"""The store: the one seam between tenure and its own database.

`Store` is every group of statements over one connection pool, each group a
module of its own along the SQL files it runs (jobs, waitpoints, maintenance,
the read model, runs, workers, steps); `LeaseConnection` is the heartbeat thread's own synchronous
connection, kept apart on purpose so that a blocked event loop cannot stop
heartbeats; `Listener` is the LISTEN connection. Typed parameters go in and
frozen rows come out (`tenure._store._rows`); every database error becomes a
tenure error (a StoreError with its verdict) here and nowhere else.
"""

from __future__ import annotations

from ._jobs import JobStatements
from ._maintenance import MaintenanceStatements
from ._reads import ReadStatements
from ._runs import RunStatements
from ._steps import StepStatements
from ._waitpoints import WaitpointStatements
from ._workers import WorkerStatements


class Store(
    JobStatements,
    WaitpointStatements,
    StepStatements,
    MaintenanceStatements,
    ReadStatements,
    RunStatements,
    WorkerStatements,
):
    """Async access to tenure's tables through a small connection pool (see `StoreBase`)."""
