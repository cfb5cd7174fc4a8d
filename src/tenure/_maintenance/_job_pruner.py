"""The job pruner: deletes finished jobs once their own retention has passed.

A queue that keeps every finished row forever makes every later look at it
slower and its backups larger. But a job's row is also its idempotency key's
memory: once it is gone, the same key runs the call again. So retention is
per job (``enqueue(retain=...)``, else the tool's, else the app's), stamped as
``prune_after`` by the statement that ends the job, and a pruner never applies
its own idea of "old" to anyone's jobs. It deletes only jobs of the tools its
worker runs (``scope="tools"``, the default), or of every application sharing
the database when told so (``scope="all"``).

Expired jobs go in bounded batches through the ``tenure_jobs_prune`` index, tool
by tool in ``prune_after`` order (so a round reads expired jobs only, however many
are running or still retained), each batch its own short transaction under a
statement timeout, rows taken ``FOR UPDATE SKIP LOCKED`` so that the pruners of
several workers share the work. Queued and running jobs are never touched. The journal keeps its own
retention (`tenure._maintenance._journal_pruner`), and periodic slots stay decided after
their jobs are gone (``tenure_schedules``).

Same shape as every maintenance service: a frozen config validated eagerly,
idempotent start/stop, `run_once()` for tests, and logs only when it deleted
something.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .._errors import PolicyError
from .._log import log_event
from .._store import Store
from ._service import Service, check_sweeps, sweep

logger = logging.getLogger("tenure.job_pruner")

DAY = 24 * 3600.0
MAX_BATCHES = 100  # per sweep; whatever is left waits for the next one


PruneScope = Literal["tools", "all"]


@dataclass(frozen=True, slots=True)
class JobPrunerConfig:
    """``enabled``: whether this worker prunes at all; ``scope``: ``"tools"`` prunes only
    the jobs of the worker's own tools, ``"all"`` every application's; ``interval``:
    seconds between sweeps; ``batch``: rows per DELETE; ``statement_timeout``: seconds one
    DELETE may take before the server stops it. How long a job is kept is not set here:
    it is the job's own retention."""

    enabled: bool = True
    scope: PruneScope = "tools"
    interval: float = 60.0
    batch: int = 1000
    statement_timeout: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise PolicyError(f"job pruner enabled must be True or False, got {self.enabled!r}")
        if self.scope not in ("tools", "all"):
            raise PolicyError(f"job pruner scope must be 'tools' or 'all', got {self.scope!r}")
        check_sweeps("job pruner", self.interval, self.batch, self.statement_timeout)


class JobPruner(Service):
    """One worker's job pruner (see the module docstring)."""

    name = "job_pruner"
    jitter = 0.2  # twenty workers started together must not sweep in the same second
    logger = logger

    def __init__(
        self, store: Store, tools: Sequence[str], config: JobPrunerConfig | None = None
    ) -> None:
        self._store = store
        self.config = config or JobPrunerConfig()
        self._tools = None if self.config.scope == "all" else sorted(tools)

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def pause(self) -> float:
        return self.config.interval

    async def run_once(self) -> int:
        """One sweep: batches until one comes back short; returns how many jobs it deleted."""
        if not self.config.enabled:
            return 0
        timeout_ms = round(self.config.statement_timeout * 1000)
        deleted = await sweep(
            lambda: self._store.prune_jobs(self._tools, self.config.batch, timeout_ms),
            self.config.batch,
            MAX_BATCHES,
        )
        if deleted:
            log_event(logger, "jobs_pruned", rows=deleted, scope=self.config.scope)
        return deleted
