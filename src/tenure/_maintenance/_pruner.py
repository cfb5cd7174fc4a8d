"""The job pruner: deletes finished jobs once they are older than the retention period.

A queue that keeps every finished row forever makes every later look at it
slower and its backups larger. Terminal jobs (succeeded, failed, cancelled)
whose ``finished_at`` is past ``retention`` are deleted in bounded batches,
oldest first, through the ``tenure_jobs_finished`` partial index, each batch
its own short transaction under a statement timeout, rows taken ``FOR UPDATE
SKIP LOCKED`` so that the pruners of several workers share the work instead
of waiting on each other. Queued and running jobs are never touched. The
journal keeps its own retention (`tenure._observe._pruner`), and periodic
slots stay decided after their jobs are gone (``tenure_schedules``).

Same shape as every maintenance service: a frozen config validated eagerly
(``retention=None`` turns pruning off), idempotent start/stop, `run_once()`
for tests, and logs only when it deleted something.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .._errors import PolicyError
from .._log import log_event
from .._store._store import Store
from ._looper import Looper, check_ranges

logger = logging.getLogger("tenure.job_pruner")

DAY = 24 * 3600.0
MAX_BATCHES = 100  # per sweep; whatever is left waits for the next one


@dataclass(frozen=True, slots=True)
class JobPrunerConfig:
    """``retention``: seconds a finished job is kept (default 7 days; None keeps them
    forever); ``interval``: seconds between sweeps; ``batch``: rows per DELETE;
    ``statement_timeout``: seconds one DELETE may take before the server stops it."""

    retention: float | None = 7 * DAY
    interval: float = 60.0
    batch: int = 1000
    statement_timeout: float = 10.0

    def __post_init__(self) -> None:
        check_ranges(
            "job pruner",
            (
                ("retention", self.retention, 1.0, 3650 * DAY),
                ("interval", self.interval, 0.05, DAY),
                ("batch", self.batch, 1, 100_000),
                ("statement_timeout", self.statement_timeout, 0.1, 600.0),
            ),
            optional="retention",
        )
        if isinstance(self.batch, float):
            raise PolicyError(f"job pruner batch must be an integer, got {self.batch!r}")


class JobPruner(Looper):
    """One worker's job pruner (see the module docstring)."""

    name = "tenure-job-pruner"
    failed_event = "job_prune_failed"
    logger = logger

    def __init__(self, store: Store, config: JobPrunerConfig | None = None) -> None:
        self._store = store
        self.config = config or JobPrunerConfig()

    @property
    def enabled(self) -> bool:
        return self.config.retention is not None

    def pause(self) -> float:
        return self.config.interval

    async def run_once(self) -> int:
        """One sweep: batches until one comes back short; returns how many jobs it deleted."""
        retention = self.config.retention
        if retention is None:
            return 0
        deleted = 0
        for _ in range(MAX_BATCHES):
            n = await self._store.prune_jobs(
                round(retention * 1000),
                self.config.batch,
                round(self.config.statement_timeout * 1000),
            )
            deleted += n
            if n < self.config.batch:
                break
        if deleted:
            log_event(logger, "jobs_pruned", rows=deleted, retention=retention)
        return deleted
