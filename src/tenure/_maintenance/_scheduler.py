"""The scheduler: enqueues each slot of a periodic schedule once, across all workers.

Schedules are declared in code (`App.schedule`, `@app.periodic`): a cron
expression or a fixed interval, a tool, a payload, and what to do after
downtime. Every worker runs a scheduler; none of them is special. Each tick
reads the database's clock and, per schedule, the latest slot already decided
(``tenure_schedules``); the slot due now is decided by one statement that
advances that mark only if nobody did, and the job it queues carries the key
``periodic:{name}:{slot}`` as well, so a slot is enqueued once however many
workers see it, and a restart neither repeats nor forgets it.

A slot seen within ``grace`` of its time is on time and runs. A slot seen
later was missed (no worker was up): ``catch_up="once"`` runs the latest
missed slot once, ``"skip"`` records it without running; slots before the
latest missed one never run. A new schedule starts with its next slot.

Same shape as every maintenance service: a frozen config validated eagerly,
idempotent start/stop, `run_once()` for tests, and logs only when it acted.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from .._errors import PolicyError
from .._log import log_event
from .._store import NewJob, Store
from ._cron import Cron
from ._service import Service

logger = logging.getLogger("tenure.scheduler")

CatchUp = Literal["once", "skip"]
CATCH_UP: tuple[CatchUp, ...] = ("once", "skip")
SCHEDULE_NAME_MAX = 200
MIN_EVERY = 1.0
MAX_EVERY = 366 * 24 * 3600.0
MAX_GRACE = 60.0  # the default grace: half the period, at most this


@dataclass(frozen=True, slots=True)
class Every:
    """Slots every ``seconds``, counted from the Unix epoch so all workers agree."""

    seconds: float

    def __post_init__(self) -> None:
        if (
            isinstance(self.seconds, bool)
            or not isinstance(self.seconds, int | float)
            or not math.isfinite(self.seconds)
            or not MIN_EVERY <= self.seconds <= MAX_EVERY
        ):
            raise PolicyError(
                f"every={self.seconds!r} must be a number of seconds in [{MIN_EVERY:g}, "
                f"{MAX_EVERY:g}]"
            )

    @property
    def _ms(self) -> int:
        return round(self.seconds * 1000)

    def previous(self, moment: datetime) -> datetime:
        ms = math.floor(moment.timestamp() * 1000) // self._ms * self._ms
        return datetime.fromtimestamp(ms / 1000, UTC)

    def next(self, moment: datetime) -> datetime:
        return self.previous(moment) + timedelta(milliseconds=self._ms)


@dataclass(frozen=True, slots=True)
class Schedule:
    """One periodic call: the tool, its payload, when it fires and what downtime does."""

    name: str
    tool: str
    rule: Cron | Every
    payload: Mapping[str, Any] = field(default_factory=dict)
    catch_up: CatchUp = "once"
    grace: float | None = None  # default: half the period, at most MAX_GRACE seconds

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not 1 <= len(name) <= SCHEDULE_NAME_MAX:
            raise PolicyError(f"schedule name must be 1-{SCHEDULE_NAME_MAX} characters")
        if not name.isprintable() or ":" in name:
            raise PolicyError(f"schedule name {name!r} must be printable, without ':'")
        if self.catch_up not in CATCH_UP:
            raise PolicyError(f"catch_up={self.catch_up!r} must be one of {CATCH_UP}")
        if self.grace is not None and (
            isinstance(self.grace, bool)
            or not isinstance(self.grace, int | float)
            or not 0 < self.grace <= MAX_EVERY
        ):
            raise PolicyError(f"grace={self.grace!r} must be a positive number of seconds")

    def slot_key(self, slot: datetime) -> str:
        """The idempotency key of the slot's job: one job per schedule and slot."""
        text = slot.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return f"periodic:{self.name}:{text.replace('.000Z', 'Z')}"

    def grace_for(self, slot: datetime) -> float:
        if self.grace is not None:
            return self.grace
        following = self.rule.next(slot)
        period = MAX_GRACE * 2 if following is None else (following - slot).total_seconds()
        return min(MAX_GRACE, period / 2)

    def decide(self, now: datetime, last: datetime | None) -> tuple[datetime, bool] | None:
        """The slot to decide at ``now`` and whether it runs; None when nothing is due.

        ``last`` is the latest slot already decided (None: the schedule is new).
        """
        slot = self.rule.previous(now)
        if slot is None or (last is not None and slot <= last):
            return None
        if (now - slot).total_seconds() <= self.grace_for(slot):
            return slot, True
        return slot, last is not None and self.catch_up == "once"


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """``interval``: the longest pause between two looks at the schedules (the scheduler
    also wakes at each next slot, so this only bounds how stale a look can get)."""

    interval: float = 1.0

    def __post_init__(self) -> None:
        if (
            isinstance(self.interval, bool)
            or not isinstance(self.interval, int | float)
            or not 0.05 <= self.interval <= 3600
        ):
            raise PolicyError(f"scheduler interval={self.interval!r} is outside [0.05, 3600] s")


@dataclass(frozen=True, slots=True)
class Decision:
    """What one look did for one schedule: the slot, and the job if one was queued."""

    schedule: str
    slot: datetime
    job_id: int | None


class Scheduler(Service):
    """One worker's scheduler; ``make_job(schedule, key)`` builds a slot's job."""

    name = "scheduler"
    logger = logger

    def __init__(
        self,
        store: Store,
        schedules: Sequence[Schedule],
        make_job: Callable[[Schedule, str], NewJob],
        config: SchedulerConfig | None = None,
    ) -> None:
        self._store = store
        self._schedules = list(schedules)
        self._make_job = make_job
        self.config = config or SchedulerConfig()
        self._pause = self.config.interval

    async def run_once(self) -> list[Decision]:
        """One look at every schedule; returns the slots this worker decided."""
        now, marks = await self._store.schedule_marks([s.name for s in self._schedules])
        decided: list[Decision] = []
        for schedule in self._schedules:
            due = schedule.decide(now, marks.get(schedule.name))
            if due is None:
                continue
            slot, run = due
            job = self._make_job(schedule, schedule.slot_key(slot)) if run else None
            advanced, job_id = await self._store.decide_slot(schedule.name, slot, job)
            if not advanced:
                continue  # another worker decided it first
            decided.append(Decision(schedule.name, slot, job_id))
            log_event(
                logger,
                "slot_enqueued" if run else "slot_skipped",
                job=job_id,
                schedule=schedule.name,
                slot=slot.isoformat(),
                late=round((now - slot).total_seconds(), 3),
            )
        following = [s.rule.next(now) for s in self._schedules]
        soonest = min(
            ((t - now).total_seconds() for t in following if t is not None),
            default=self.config.interval,
        )
        self._pause = min(self.config.interval, max(0.001, soonest))
        return decided

    @property
    def enabled(self) -> bool:
        return bool(self._schedules)

    def pause(self) -> float:
        """Until the next slot (a failed round resets it to the interval)."""
        pause, self._pause = self._pause, self.config.interval
        return pause
