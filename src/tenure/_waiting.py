"""Waiting for jobs without polling them: one LISTEN connection per App and event loop.

The statements that end a job (a fenced commit, a cancel, the rescuer's verdict)
and the heartbeat thread's progress writes notify, in their own transaction, on
``tenure_done`` and ``tenure_progress``. A waiter subscribes to its job ids, then
reads the rows, then sleeps until a notification names one of them: subscribing
first means a notification that lands between the read and the sleep still wakes
it. Every answer comes from the row read afterwards, never from the notification.
Progress wakes only those who follow it (`App.watch`): a plain wait sleeps through
a chatty tool's reports and reads its row again only when the job ends.

Polling is the fallback, not the mechanism: when the listener's probe shows that
notifications do not arrive (a pooler in transaction mode), waiters read their
rows every ``poll_interval``; when they do arrive, only every ``SAFETY_POLL``
seconds (or ``poll_interval``, if longer), in case one was lost with a dropped
connection (a reconnect also wakes every waiter).

A read that a restart or a cut link breaks (`ConnectionLost`) is read again, after
a pause that grows from 0.05 s to 1 s, while the caller's timeout allows and for at
most ``OUTAGE_LIMIT`` seconds of failures in a row: a waiter sees a tenure error, and
only once retrying has no point.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from ._errors import ConnectionLost, JobNotFound, PolicyError, WaitTimeout
from ._job import Job
from ._states import TERMINAL_STATES
from ._store import JobStatus, Listener, Store

T = TypeVar("T")
SAFETY_POLL = 30.0
MAX_WAIT = 7 * 24 * 3600.0
RETRY_FIRST = 0.05  # the first pause before a read that lost its connection is tried again
RETRY_LAST = 1.0  # the longest pause between two tries
OUTAGE_LIMIT = 60.0  # seconds of failed tries after which a waiter gives up (ConnectionLost)
LEASE_SLACK = 0.005  # look again this long after a lease's end, so it has surely passed


def check_timeout(timeout: float | None) -> float | None:
    """None (no limit) or a number of seconds in [0, MAX_WAIT]."""
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not (0 <= timeout <= MAX_WAIT)
    ):
        raise PolicyError(f"timeout must be None or a number of seconds in [0, {MAX_WAIT:g}]")
    return float(timeout)


@dataclass(frozen=True, slots=True)
class Deadline:
    """How long a caller waits: ``timeout`` seconds (None: no limit), until ``at`` on the
    monotonic clock."""

    timeout: float | None
    at: float | None

    @classmethod
    def after(cls, timeout: float | None) -> Deadline:
        seconds = check_timeout(timeout)
        return cls(seconds, None if seconds is None else time.monotonic() + seconds)

    def left(self) -> float | None:
        return None if self.at is None else self.at - time.monotonic()


async def reread(read: Callable[[], Awaitable[T]], deadline: Deadline) -> T:
    """``await read()``, and again after each `ConnectionLost` (see the module docstring);
    WaitTimeout once the next try would pass ``deadline``, the last ConnectionLost once
    the failures have lasted OUTAGE_LIMIT seconds."""
    pause = RETRY_FIRST
    give_up = time.monotonic() + OUTAGE_LIMIT
    while True:
        try:
            return await read()
        except ConnectionLost as exc:
            left = deadline.left()
            if left is not None and left <= pause:
                raise WaitTimeout(
                    f"the database did not answer within {deadline.timeout:g} s: "
                    "its connection was lost"
                ) from exc
            if time.monotonic() + pause >= give_up:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, RETRY_LAST)


class Subscription:
    """The job ids one waiter follows, whether it follows their progress too, and the
    event that says "look again"."""

    __slots__ = ("ids", "progress", "woken")

    def __init__(self, ids: frozenset[int], progress: bool) -> None:
        self.ids = ids
        self.progress = progress
        self.woken = asyncio.Event()


class Waiters:
    """Everything an App's waiters share on one event loop (see the module docstring)."""

    def __init__(self, store: Store, dsn: str, poll_interval: float) -> None:
        self._store = store
        self._poll = poll_interval
        self._by_job: defaultdict[int, set[Subscription]] = defaultdict(set)
        self._listener = Listener(
            dsn,
            ("tenure_done", "tenure_progress"),
            self._notified,
            on_connect=self._wake_all,
            probe=store.notify,
            name="tenure-waiters",
        )
        self._listener.start()

    async def close(self) -> None:
        await self._listener.stop()

    @property
    def pushed(self) -> bool:
        """Whether notifications are known to arrive on this connection."""
        return bool(self._listener.delivers)

    def _interval(self) -> float:
        return max(self._poll, SAFETY_POLL) if self.pushed else self._poll

    def _notified(self, channel: str, payload: str) -> None:
        """Wake the subscriptions of the jobs named: an ending wakes all of them, progress
        only those that follow progress (a plain wait reads nothing until its job ends)."""
        everyone = channel != "tenure_progress"
        for part in payload.split(","):
            if part.isdigit():
                for subscription in self._by_job.get(int(part), ()):
                    if everyone or subscription.progress:
                        subscription.woken.set()

    def _wake_all(self) -> None:
        for subscriptions in self._by_job.values():
            for subscription in subscriptions:
                subscription.woken.set()

    def _subscribe(self, ids: Iterable[int], progress: bool) -> Subscription:
        subscription = Subscription(frozenset(ids), progress)
        for job_id in subscription.ids:
            self._by_job[job_id].add(subscription)
        return subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        for job_id in subscription.ids:
            found = self._by_job.get(job_id)
            if found is not None:
                found.discard(subscription)
                if not found:
                    del self._by_job[job_id]

    async def until_stopped(self, job: Job, held_until: datetime, deadline: Deadline) -> None:
        """Return once the call of ``job`` (cancelled while it held its lease until
        ``held_until``) is over: its owner journaled that it stopped, or refused its commit,
        or that lease ran out on the database's clock. Woken by the owner's notification
        on ``tenure_done``; otherwise it reads again every ``poll_interval``, and when the
        lease is due to end. WaitTimeout past the ``deadline``."""
        subscription = self._subscribe([job.id], False)
        self._listener.start()
        try:
            while True:
                subscription.woken.clear()
                check = await reread(
                    functools.partial(self._store.stop_check, job.id, job.token, held_until),
                    deadline,
                )
                if check.settled:
                    return
                wait = min(self._poll, check.lease_left + LEASE_SLACK)
                if not await self._sleep(subscription, wait, deadline):
                    raise WaitTimeout(
                        f"job {job.id} is cancelled, but its call (token {job.token}) has not "
                        f"been seen to stop within {deadline.timeout:g} s; its lease ends at "
                        f"{held_until.isoformat()}"
                    )
        finally:
            self._unsubscribe(subscription)

    async def follow(
        self, job_ids: Iterable[int], deadline: Deadline, *, progress: bool = False
    ) -> AsyncIterator[JobStatus]:
        """Yield each job's status when it ends (and, with ``progress``, whenever its
        state or progress changes), until every job has ended; WaitTimeout past the
        ``deadline``. A job that does not exist ends the iteration with JobNotFound
        from the store's read."""
        pending = set(job_ids)
        seen: dict[int, tuple[str, object]] = {}
        subscription = self._subscribe(pending, progress)
        self._listener.start()
        try:
            while pending:
                subscription.woken.clear()
                ids = sorted(pending)
                statuses = await reread(functools.partial(self._store.job_status, ids), deadline)
                missing = pending - statuses.keys()
                if missing:
                    raise JobNotFound(f"no job {min(missing)}")
                for job_id in sorted(pending):
                    status = statuses[job_id]
                    ended = status.state in TERMINAL_STATES
                    mark = (status.state, status.progress)
                    if ended or (progress and seen.get(job_id) != mark):
                        seen[job_id] = mark
                        if ended:
                            pending.discard(job_id)
                        yield status
                if not pending:
                    return
                if not await self._sleep(subscription, self._interval(), deadline):
                    first = min(pending)
                    raise WaitTimeout(
                        f"job {first} is still {statuses[first].state} after {deadline.timeout:g} s"
                    )
        finally:
            self._unsubscribe(subscription)

    async def wakeups(self, job_ids: Iterable[int], deadline: Deadline) -> AsyncIterator[None]:
        """Yield at once, then each time a notification names one of the jobs (its end, or
        anything it reports: this follows progress too; without notifications, every
        interval), until the caller stops; WaitTimeout past the ``deadline``. For a caller
        that reads more than a job's status each time (`App.watch_run`), through `reread`."""
        subscription = self._subscribe(job_ids, True)
        self._listener.start()
        try:
            while True:
                subscription.woken.clear()
                yield
                if not await self._sleep(subscription, self._interval(), deadline):
                    raise WaitTimeout(
                        f"job {min(subscription.ids)} still runs after {deadline.timeout:g} s"
                    )
        finally:
            self._unsubscribe(subscription)

    @staticmethod
    async def _sleep(subscription: Subscription, wait: float, deadline: Deadline) -> bool:
        """Until ``subscription`` is woken, or ``wait`` seconds, or the ``deadline``; False
        (without waiting) if that has passed already."""
        left = deadline.left()
        if left is not None:
            if left <= 0:
                return False
            wait = min(wait, left)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):  # not wait_for: see Listener._check
                await subscription.woken.wait()
        return True
