"""The worker pruner: deletes registry rows of workers not seen for a horizon.

A worker that was SIGKILLed, lost its machine or was scaled away never marks its row
stopped; it goes silent (readers see that after three of its keep-alive periods) and
stays on the dashboard for a while, because "who went silent at 02:00, and what did it
hold" is exactly what an operator asks. After ``horizon`` without a sign of life (or
after a clean stop), the row goes. Same shape as every maintenance service: a frozen
config validated eagerly, idempotent start/stop, `run_once()` for tests, bounded
batches under a statement timeout, shared across workers with ``SKIP LOCKED``, and a
log line only when it deleted something.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .._log import log_event
from .._store import Store
from ._service import Service, check_sweeps, sweep

logger = logging.getLogger("tenure.worker_pruner")

DAY = 24 * 3600.0
MAX_BATCHES = 100  # per sweep; whatever is left waits for the next one


@dataclass(frozen=True, slots=True)
class WorkerPrunerConfig:
    """``horizon``: seconds a worker may go unseen (silent, or stopped) before its row is
    deleted (default one day); ``interval``: seconds between sweeps; ``batch``: rows per
    DELETE; ``statement_timeout``: seconds one DELETE may take."""

    horizon: float = DAY
    interval: float = 300.0
    batch: int = 1000
    statement_timeout: float = 10.0

    def __post_init__(self) -> None:
        check_sweeps(
            "worker pruner",
            self.interval,
            self.batch,
            self.statement_timeout,
            ("horizon", self.horizon, 0.1, 365 * DAY),
        )


class WorkerPruner(Service):
    """One worker's pruner of the workers registry (see the module docstring)."""

    name = "worker_pruner"
    logger = logger
    jitter = 0.1

    def __init__(self, store: Store, config: WorkerPrunerConfig | None = None) -> None:
        self._store = store
        self.config = config or WorkerPrunerConfig()

    def pause(self) -> float:
        return self.config.interval

    async def run_once(self) -> int:
        """One sweep: batches until one comes back short; returns how many rows it deleted."""
        horizon_ms = round(self.config.horizon * 1000)
        timeout_ms = round(self.config.statement_timeout * 1000)
        deleted = await sweep(
            lambda: self._store.prune_workers(horizon_ms, self.config.batch, timeout_ms),
            self.config.batch,
            MAX_BATCHES,
        )
        if deleted:
            log_event(logger, "workers_pruned", rows=deleted, horizon=self.config.horizon)
        return deleted
