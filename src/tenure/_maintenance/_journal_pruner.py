"""The journal pruner: deletes journal rows past their retention, in bounded batches.

The journal must not become a second, forever-growing store; it holds no
payloads, but its ids and timings are still history an operator only needs
for so long. Same shape as every maintenance service (a `Service`): a frozen config with
defaults validated eagerly, idempotent start/stop, and `run_once()` for tests
and for ``tenure prune``. Each worker runs one; ``SKIP LOCKED`` lets several
share the work, and it logs only when it deleted something.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from .._errors import PolicyError
from .._log import log_event
from .._store import Store
from ._service import Service

logger = logging.getLogger("tenure.pruner")

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class JournalPrunerConfig:
    """``retention``: seconds a journal row is kept (default 14 days); ``interval``:
    seconds between sweeps; ``batch``: rows per DELETE (bounded, so no sweep holds
    locks on a large share of the journal); ``statement_timeout``: seconds one DELETE
    may take before the server stops it."""

    retention: float = 14 * DAY
    interval: float = 600.0
    batch: int = 5000
    statement_timeout: float = 10.0

    def __post_init__(self) -> None:
        if not 60 <= self.retention <= 3650 * DAY:
            raise PolicyError(
                f"journal retention={self.retention!r} s is outside [60 s, 3650 days]"
            )
        if not 0.05 <= self.interval <= DAY:
            raise PolicyError(f"pruner interval={self.interval!r} is outside [0.05, 86400] s")
        if not 1 <= self.batch <= 100_000:
            raise PolicyError(f"pruner batch={self.batch!r} is outside [1, 100000]")
        if not 0.1 <= self.statement_timeout <= 600:
            raise PolicyError(
                f"pruner statement_timeout={self.statement_timeout!r} is outside [0.1, 600] s"
            )

    @classmethod
    def from_options(cls, **options: Any) -> JournalPrunerConfig:
        """Build from keyword options; an unknown one gets "did you mean", not a TypeError."""
        known = [f.name for f in fields(cls)]
        for name in options:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
                raise PolicyError(f"unknown pruner option {name!r}{hint}")
        return cls(**options)


class JournalPruner(Service):
    """One worker's journal pruner; `run_once` is also what ``tenure prune`` runs."""

    name = "journal_pruner"
    jitter = 0.2  # twenty workers started together must not sweep in the same second
    logger = logger

    def __init__(self, store: Store, config: JournalPrunerConfig | None = None) -> None:
        self._store = store
        self.config = config or JournalPrunerConfig()

    def pause(self) -> float:
        return self.config.interval

    @property
    def retention_ms(self) -> int:
        return round(self.config.retention * 1000)

    async def run_once(self, on_batch: Callable[[int], None] | None = None) -> int:
        """One sweep: delete batches until one comes back short; returns rows deleted."""
        deleted = 0
        while True:
            n = await self._store.prune_events(
                self.retention_ms, self.config.batch, round(self.config.statement_timeout * 1000)
            )
            deleted += n
            if on_batch is not None:
                on_batch(n)
            if n < self.config.batch:
                break
        if deleted:
            log_event(logger, "events_pruned", rows=deleted, retention=self.config.retention)
        return deleted
