"""The rescuer: resumes whatever a crash left behind, judged from state, never from age.

It runs when a worker starts and then every ``interval`` (jittered), in every
worker. Each sweep works in bounded batches and short transactions (one for a
batch of leases, one per run), every statement under ``statement_timeout``:

- A lease that expired on the job's last allowed attempt: the job becomes
  ``failed`` with reason ``lease_expired`` (the claim must never take it).
- A run whose open stage has no live job — the job ended outside a transition
  (the lease above, an operator's cancel, a commit by an older worker) or
  vanished (pruned, deleted by hand) — is moved on from what the job says, or
  its stage is dispatched again under the same key. A running run with no
  open stage at all is started again from its first stages if it never had
  any, and failed otherwise.
- An outbox delivery that failed (every attempt used up) is sent again, the
  same job under the same idempotency key, once it has rested ``resend_after``.
- A waitpoint past its deadline (a person who never answered, a durable sleep that is
  over, a wait for child jobs that took too long) resumes or fails its job.
- Every ``children_sweep`` seconds, the backstop of ``ctx.wait_for``: an open wait for
  child jobs none of which is still going (each child's end answers it in its own
  transaction; this catches a child that never ended, deleted by hand) resumes its job.

Expired leases with attempts left are deliberately not touched: the claim
statement takes them directly (expired first) and journals each take-over as a
reclaim (``job_claimed`` with ``reclaimed_from``/``previous_token``). Putting
them back in the queue first would erase who held them and count one rescue
twice. Heartbeats make a "stale after N minutes" guess unnecessary: a dead
owner is found within one lease.

Why no leased "rescuer job": two replicas must never rescue the same row, and
what guarantees that here is that every row is taken ``FOR UPDATE SKIP
LOCKED`` and changed only while its state still calls for it. Concurrent
rescuers split the rows between them; a later one finds nothing left to do. A
lease on the sweep itself would not add to that (a rescuer paused past its
lease would wake up and carry on, the very stale owner tenure exists to stop)
and would cost a journal row per tick. A rescuer paused inside its
transaction is cut off by the server (``idle_in_transaction_session_timeout``,
set with the statement timeout), which releases its locks.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .._log import log_event
from .._pipeline._engine import Transitions
from .._store import Store
from ._service import Service, check_ranges

logger = logging.getLogger("tenure.rescuer")

MAX_BATCHES = 100  # per sweep; whatever is left waits for the next one


@dataclass(frozen=True, slots=True)
class RescuerConfig:
    """How often and how much the rescuer works; validated when created."""

    interval: float = 1.0
    batch: int = 1000
    run_batch: int = 100
    statement_timeout: float = 5.0
    resend_after: float = 30.0
    children_sweep: float = 30.0

    def __post_init__(self) -> None:
        check_ranges(
            "rescuer",
            (
                ("interval", self.interval, 0.05, 3600),
                ("batch", self.batch, 1, 100_000),
                ("run_batch", self.run_batch, 1, 10_000),
                ("statement_timeout", self.statement_timeout, 0.1, 600),
                ("resend_after", self.resend_after, 0, 7 * 24 * 3600),
                ("children_sweep", self.children_sweep, 0.05, 24 * 3600),
            ),
        )


@dataclass(frozen=True, slots=True)
class RescueReport:
    """What one sweep did; every number counts rows it changed, each exactly once."""

    failed: tuple[int, ...] = ()  # jobs failed with lease_expired
    redispatched: int = 0  # stages whose vanished job was dispatched again
    adopted: int = 0  # stages moved on from a job that ended outside a transition
    resent: int = 0  # outbox deliveries sent again
    ended: int = 0  # runs failed for want of any open stage
    timed_out: tuple[int, ...] = ()  # jobs whose waitpoint's deadline passed (resumed or failed)
    resumed: tuple[int, ...] = ()  # children waits answered by the backstop sweep

    @property
    def acted(self) -> bool:
        return bool(
            self.failed
            or self.redispatched
            or self.adopted
            or self.resent
            or self.ended
            or self.timed_out
            or self.resumed
        )


class Rescuer(Service):
    """One worker's rescuer: the same service contract as every other (see `Service`)."""

    name = "rescuer"
    logger = logger
    jitter = 0.2  # keeps the replicas' sweeps from lining up

    def __init__(self, store: Store, config: RescuerConfig | None = None) -> None:
        self.config = config or RescuerConfig()
        self._store = store
        self._transitions = Transitions(store, timeout=self.config.statement_timeout)
        self._children_swept = -math.inf  # monotonic; the first sweep runs at start

    def pause(self) -> float:
        return self.config.interval

    def counts(self, result: Any) -> dict[str, int]:
        return {"acted": int(result.acted)} if isinstance(result, RescueReport) else {}

    async def run_once(self) -> RescueReport:
        """One sweep, batch after batch until a batch comes back short."""
        failed: list[int] = []
        timed_out: list[int] = []
        counts: Counter[str] = Counter()
        for _ in range(MAX_BATCHES):
            batch = await self._store.expire_waitpoints(self.config.batch)
            timed_out += batch
            if len(batch) < self.config.batch:
                break
        resumed: list[int] = []
        if time.monotonic() - self._children_swept >= self.config.children_sweep:
            self._children_swept = time.monotonic()
            resumed = await self._store.resume_children_waits(self.config.batch)
        for _ in range(MAX_BATCHES):
            jobs, runs, acted = await self._transitions.rescue(
                leases=self.config.batch,
                runs=self.config.run_batch,
                resend_after=self.config.resend_after,
            )
            failed += jobs
            counts += acted
            if len(jobs) < self.config.batch and runs < self.config.run_batch:
                break
        report = RescueReport(
            tuple(failed),
            redispatched=counts["redispatched"],
            adopted=counts["adopted"],
            resent=counts["resent"],
            ended=counts["ended"],
            timed_out=tuple(timed_out),
            resumed=tuple(resumed),
        )
        if report.acted:
            log_event(
                logger,
                "rescued",
                leases_failed=len(report.failed),
                redispatched=report.redispatched,
                adopted=report.adopted,
                resent=report.resent,
                ended=report.ended,
                waitpoints_timed_out=len(report.timed_out),
                waits_resumed=len(report.resumed),
            )
        return report
