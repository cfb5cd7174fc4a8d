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
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable

from ._errors import JobNotFound, PolicyError, WaitTimeout
from ._states import TERMINAL_STATES
from ._store import JobStatus, Listener, Store

SAFETY_POLL = 30.0
MAX_WAIT = 7 * 24 * 3600.0


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

    async def follow(
        self, job_ids: Iterable[int], timeout: float | None, *, progress: bool = False
    ) -> AsyncIterator[JobStatus]:
        """Yield each job's status when it ends (and, with ``progress``, whenever its
        state or progress changes), until every job has ended; WaitTimeout past
        ``timeout`` seconds. A job that does not exist ends the iteration with
        JobNotFound from the store's read."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pending = set(job_ids)
        seen: dict[int, tuple[str, object]] = {}
        subscription = self._subscribe(pending, progress)
        self._listener.start()
        try:
            while pending:
                subscription.woken.clear()
                statuses = await self._store.job_status(sorted(pending))
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
                wait = self._interval()
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise WaitTimeout(
                            f"job {min(pending)} is still {statuses[min(pending)].state} after "
                            f"{timeout:g} s"
                        )
                    wait = min(wait, left)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):  # not wait_for: see Listener._check
                        await subscription.woken.wait()
        finally:
            self._unsubscribe(subscription)
