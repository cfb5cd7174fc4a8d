"""The statistics keeper: runs ANALYZE on tenure_jobs when a burst has made the planner's
picture of it wrong, instead of waiting for autovacuum.

The claim takes the first jobs of the queued index in order. The planner picks
that ordered scan only if it believes many rows are queued; with statistics
from an empty or mostly finished table it expects a handful, and sorts every
queued row on each claim instead: 20,000 freshly queued jobs made each claim of
100 cost 15 ms rather than 0.5 ms, and a worker drain twice the database CPU
per job. Autovacuum corrects that only on its next round (``autovacuum_naptime``,
a minute by default), which for a burst of a million jobs is a minute of
claims that each sort a million rows.

A bulk enqueue (`Store.enqueue_many`) that outnumbers the table analyzes it in
its own transaction, so its jobs arrive with statistics that know them. Bursts
made of many small enqueues are this keeper's: every worker looks, once per
``interval``, at one catalog row: the live rows now against the rows the last
ANALYZE counted. (Such a burst builds up over seconds anyway; a look on every
NOTIFY would put a catalog query next to the claim the NOTIFY wakes.) Never
analyzed and at least ``min_rows``, or ``growth`` times as many, and one
worker at a time (an advisory lock; the others skip) runs ANALYZE under a
statement timeout. Rows merely changed are autovacuum's business: a busy
queue updates every row twice, which says nothing about how many are queued.
A role that does not own the table cannot analyze it: PostgreSQL skips it
with a warning, and autovacuum remains the only remedy.

Same shape as every maintenance service: a frozen config validated eagerly,
idempotent start/stop, `run_once()` for tests.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from .._log import log_event
from .._store import JobsStatistics, Store
from ._service import Service, check_ranges

logger = logging.getLogger("tenure.statistics")


@dataclass(frozen=True, slots=True)
class StatisticsConfig:
    """``interval``: seconds between looks (None turns the keeper off); ``min_rows``:
    smaller tables are left to autovacuum; ``growth``: live rows now / rows at the last
    ANALYZE that call for a new one; ``statement_timeout``: seconds ANALYZE may take
    (lock waits included)."""

    interval: float | None = 1.0
    min_rows: int = 1000
    growth: float = 2.0
    statement_timeout: float = 30.0

    def __post_init__(self) -> None:
        check_ranges(
            "statistics",
            (
                ("interval", self.interval, 0.05, 3600.0),
                ("min_rows", self.min_rows, 1, 10**12),
                ("growth", self.growth, 1.1, 1000.0),
                ("statement_timeout", self.statement_timeout, 0.1, 3600.0),
            ),
            optional="interval",
        )

    def stale(self, seen: JobsStatistics) -> bool:
        """Whether what `Store.jobs_statistics` saw calls for an ANALYZE."""
        live, analyzed = seen["live_rows"], seen["analyzed_rows"]
        if live < self.min_rows:
            return False
        return analyzed < 0 or live >= self.growth * max(analyzed, self.min_rows)


class StatisticsKeeper(Service):
    """One worker's statistics keeper (see the module docstring)."""

    name = "statistics"
    jitter = 0.2  # twenty workers started together must not sweep in the same second
    logger = logger

    def __init__(self, store: Store, config: StatisticsConfig | None = None) -> None:
        self._store = store
        self.config = config or StatisticsConfig()

    @property
    def enabled(self) -> bool:
        return self.config.interval is not None

    def pause(self) -> float:
        return self.config.interval or 0.0

    async def run_once(self) -> bool:
        """One look; True if this worker ran ANALYZE."""
        seen = await self._store.jobs_statistics()
        if not self.config.stale(seen):
            return False
        started = time.monotonic()
        timeout_ms = round(self.config.statement_timeout * 1000)
        # False also behind a long lock (autovacuum's own pass): the next look decides.
        analyzed = await self._store.analyze_jobs(timeout_ms)
        if analyzed:
            log_event(
                logger,
                "statistics_refreshed",
                live_rows=int(seen["live_rows"]),
                analyzed_rows=max(-1, int(seen["analyzed_rows"])),
                duration=round(time.monotonic() - started, 3),
            )
        return analyzed
