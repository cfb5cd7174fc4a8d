"""The heartbeat thread: one batched extension per tick for every lease the process holds.

It runs on its own OS thread with its own connection, so a blocked event loop
or a hung native call in a tool cannot stop it. It is also not blind: a lease
is extended only while its executor is alive and observable — the task is not
done, the event loop answered recently (for async tools), and the time limit
has not passed. An unobservable job is simply not extended; its lease runs out
and the work goes to someone who can be watched.

The same thread keeps the worker's row in the registry alive (`tenure_workers`): every
extension also stamps it, and when no extension went out for a keep-alive period (no
leases held) one cheap statement does. So a worker counts as alive exactly while this
thread can reach the database, whatever its event loop is doing.

Zero rows for a job means the lease is lost: the tool is stopped and the
heartbeat is never retried. A database error means ownership is unknown: the
tool may not start a new irreversible step, and the thread keeps trying only
while the conservative deadline leaves time.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Self

from .._errors import StoreError
from .._log import enabled, log_event
from .._store import ClaimedJob, JournalRow, LeaseConnection, SessionBeat, WorkerRegistration
from ._ownership import Ownership

logger = logging.getLogger("tenure.heartbeat")

MIN_TIMEOUT = 0.2
MAX_TIMEOUT = 10.0
JOURNAL_TIMEOUT = 1.0
WATCH_INTERVAL = 0.02
MAX_BACKLOG = 10_000
PROGRESS_INTERVAL = 0.25  # at most this often one progress statement for the whole process
PROGRESS_TIMEOUT = 1.0
KEEPALIVE_TIMEOUT = 1.0
# Session beats between two full extensions (extend_leases), which look at every lease
# again: the backstop for a cancel whose notification was lost, and for a lease this
# process holds without knowing it (a claim whose answer never arrived).
RECONCILE_EVERY = 6


def _code(detail: dict[str, object]) -> str | None:
    """The journal's code for a heartbeat event: an error code, or why the lease ended."""
    code = detail.get("code") or detail.get("reason")
    return None if code is None else str(code)


@dataclass(slots=True)
class _Tally:
    """What one beat confirmed of one tool's leases: one heartbeat_batch event, so that
    whoever watches beats (the metrics) pays per tool and beat, not per held lease."""

    leases: int = 0
    oldest: float = 0.0  # the longest time since a confirmation that the beat renewed
    least_left: float = float("inf")  # the least lease left when the beat was sent

    def add(self, age: float, left: float) -> None:
        self.leases += 1
        if age > self.oldest:
            self.oldest = age
        if left < self.least_left:
            self.least_left = left


def _tallies() -> dict[str, _Tally] | None:
    """Per-tool tallies for this beat, or None when nobody takes heartbeat_batch."""
    return {} if enabled(logger, "heartbeat_batch", logging.DEBUG) else None


@dataclass(eq=False, slots=True)
class Held:
    """One lease this process holds, and how to tell whether its executor lives."""

    job: ClaimedJob
    ownership: Ownership
    lease_ms: int
    heartbeat: float
    time_limit: float
    started_at: float
    is_alive: Callable[[], bool]
    on_end: Callable[[str], None]
    next_beat: float = 0.0
    unobservable_logged: bool = field(default=False)
    # The lease follows the process's session (migration 0023), so a session beat confirms
    # it; False for a lease of its own row (claimed before 0023, or frozen).
    session: bool = False

    def observable(self, now: float) -> bool:
        return now - self.started_at < self.time_limit and self.is_alive()


class HeartbeatThread:
    """Extends held leases; reports lost ones through each job's ``on_end``."""

    def __init__(
        self,
        dsn: str,
        owner: str,
        registration: WorkerRegistration | None = None,
    ) -> None:
        self._conn = LeaseConnection(dsn)
        self._owner = owner
        # The registry's keep-alive: when the last statement that stamped this worker's row
        # was sent (monotonic), and how often one must go out.
        self._registration = registration
        self._keepalive = registration.keepalive_ms / 1000 if registration else 0.0
        self._seen_at = time.monotonic()
        self._held: dict[int, Held] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tenure-heartbeat", daemon=True)
        self._watcher = threading.Thread(target=self._watch, name="tenure-deadline", daemon=True)
        self._watch_wake = threading.Event()
        self._backlog: collections.deque[tuple[str, Held, dict[str, object], float, float]] = (
            collections.deque()
        )
        # When each thread will next wake by itself (monotonic; under _lock). A new lease
        # wakes a thread only if it needs it sooner: claiming 1,000 jobs must not mean
        # 1,000 wake-ups and 1,000 scans of every held lease.
        self._beat_at = 0.0
        self._watch_at = 0.0
        # No held lease's next beat is earlier than this (monotonic; under _lock): the thread
        # looks at the held leases only once it is reached. A new hold lowers it, and so
        # does ``_held_since``, the earliest next beat of the holds since the last look.
        self._due_at = float("inf")
        self._held_since = float("inf")
        # No held lease's deadline is earlier than this (monotonic; under _lock): deadlines
        # only move later, and a new hold lowers it. The watcher scans the held leases only
        # once it is reached, not on every wake (50,000 leases, once a second, was a fifth
        # of a worker's CPU).
        self._watch_bound = 0.0
        # Progress reports waiting to be written (job id → JSON, latest wins), and the
        # earliest moment the next batch may go: a tool that reports in a tight loop
        # costs this process at most one statement per PROGRESS_INTERVAL.
        self._progress: dict[int, str] = {}
        self._progress_at = 0.0
        self.ticks = 0
        self.statements = 0
        # Session beats since the last full extension, and the shortest lease this process
        # ever held under its session (a session beat is refused once the session has been
        # silent for that long: some lease of it may have ended).
        self._session_beats = 0
        self._shortest_session_ms = 0
        # Claims of this process on their way (from before the statement until every job
        # it took is held): key → when it started (monotonic), and when the last beat
        # statement ended, answered or not. A job such a claim took may predate the
        # session's previous beat and still be unknown here; a full extension then must
        # not take it for forgotten and freeze it (the process would go on confirming it
        # by session beats while its row lease ran out).
        self._claims: dict[int, float] = {}
        self._claim_keys = itertools.count()
        self._beat_ended_at = 0.0

    def start(self) -> None:
        self._thread.start()
        self._watcher.start()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._wake.set()
        self._watch_wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._watcher.is_alive():
            self._watcher.join(timeout)
        self._conn.close()

    def hold(self, held: Held) -> None:
        held.next_beat = held.started_at + held.heartbeat
        held.session = held.job.session_lease
        with self._lock:
            if held.session and (
                not self._shortest_session_ms or held.lease_ms < self._shortest_session_ms
            ):
                self._shortest_session_ms = held.lease_ms
            self._held[held.job.id] = held
            self._due_at = min(self._due_at, held.next_beat)
            self._held_since = min(self._held_since, held.next_beat)
            beat_sooner = held.next_beat < self._beat_at
            watch_sooner = held.ownership.deadline < self._watch_at
            self._watch_bound = min(self._watch_bound, held.ownership.deadline)
        if watch_sooner:
            self._watch_wake.set()
        if beat_sooner:
            self._wake.set()

    @contextlib.contextmanager
    def claiming(self) -> Iterator[None]:
        """Around a claim and the holds of the jobs it took (the worker's claim loop)."""
        started = time.monotonic()
        with self._lock:
            key = next(self._claim_keys)
            self._claims[key] = started
        try:
            yield
        finally:
            with self._lock:
                del self._claims[key]

    def release(self, job_id: int) -> None:
        with self._lock:
            self._held.pop(job_id, None)
            self._progress.pop(job_id, None)

    def report(self, job_id: int, progress: str) -> None:
        """Queue a progress report (any thread; never blocks on the database)."""
        with self._lock:
            if job_id not in self._held:
                return
            self._progress[job_id] = progress
            sooner = self._progress_at < self._beat_at
        if sooner:
            self._wake.set()

    def take_progress(self, job_id: int) -> str | None:
        """The job's report not written yet, taken away (its commit will carry it)."""
        with self._lock:
            return self._progress.pop(job_id, None)

    def held_tokens(self) -> dict[int, int]:
        """Every lease this process holds: job id → token."""
        with self._lock:
            return {job_id: item.job.token for job_id, item in self._held.items()}

    def cancelled(self, job_id: int, token: int, via: str) -> None:
        """The database says that this job was cancelled under ``token`` (``via`` a
        notification, or a read after the LISTEN connection came back): stop the call
        now, instead of at the next heartbeat."""
        with self._lock:
            item = self._held.get(job_id)
        if item is not None and item.job.token == token:
            self._end(item, "cancelled", via)

    def _run(self) -> None:
        while not self._stopping.is_set():
            now = time.monotonic()
            with self._lock:
                # Nothing is looked at before the earliest next beat of any lease: a wake-up
                # for a progress report or a keep-alive costs nothing per held lease.
                scan = now >= self._due_at
                held = list(self._held.values()) if scan else []
                self._held_since = float("inf")
                unsettled = scan and any(t < self._beat_ended_at for t in self._claims.values())
            if scan:
                beat = self._sort(held, now)
                if beat is not None:
                    due, kept, quiet = beat
                    self._conn.keep(kept, freeze_unnamed=not unsettled)
                    self._survive(self._tick, due, now, quiet)
                soonest = min((h.next_beat for h in held if not h.ownership.ended), default=now + 1)
                with self._lock:
                    self._due_at = min(soonest, self._held_since)
            self._survive(self._flush_journal)
            self._survive(self._flush_progress)
            self._survive(self._keep_alive)
            with self._lock:
                now = time.monotonic()
                soonest = self._due_at
                if self._progress:
                    soonest = min(soonest, self._progress_at)
                if self._registration is not None:
                    soonest = min(soonest, self._seen_at + self._keepalive)
                self._beat_at = max(min(soonest, now + 1), now)
            self._wake.wait(self._beat_at - now)
            self._wake.clear()

    @staticmethod
    def _sort(held: list[Held], now: float) -> tuple[list[Held], list[int], list[Held]] | None:
        """One pass over the held leases, once one is due: (due, kept, quiet), or None.

        Once one lease is due, every lease due within half a period is renewed with it:
        leases claimed in many small batches fall into one phase, so the process sends one
        statement per period, not one per claim batch. The others it can observe are named
        too (``kept``): a session lease (migration 0023) the full extension names nowhere is
        taken for unobservable and frozen; a session beat is told of those explicitly
        (``quiet``).
        """
        due: list[Held] = []
        kept: list[int] = []
        quiet: list[Held] = []
        late = False
        for h in held:
            if h.ownership.ended:
                continue
            if h.next_beat <= now + h.heartbeat / 2:
                due.append(h)
                late = late or h.next_beat <= now
            elif h.observable(now):
                kept.append(h.job.id)
            elif h.session:
                quiet.append(h)
        return (due, kept, quiet) if late else None

    @staticmethod
    def _survive(step: Callable[..., None], *args: object) -> None:
        """Run one step of a beat: the thread must outlive any bad one (a dead heartbeat
        thread would let every lease of the process run out, and leave their journal rows
        unwritten)."""
        try:
            step(*args)
        except Exception:
            logger.exception("heartbeat step %s failed", getattr(step, "__name__", step))

    def _keep_alive(self) -> None:
        """Stamp the registry row unless an extension did so within the keep-alive period.
        A failure is only a missed stamp: the next period tries again, and readers call
        the worker silent only after three."""
        if self._registration is None or time.monotonic() < self._seen_at + self._keepalive:
            return
        sent_at = time.monotonic()
        try:
            self.statements += 1
            self._conn.touch_worker(self._registration, KEEPALIVE_TIMEOUT)
        except StoreError:
            self._seen_at = time.monotonic() - self._keepalive / 2  # again in half a period
            return
        self._seen_at = sent_at

    def _flush_progress(self) -> None:
        """Write the waiting progress reports in one fenced statement. A report the
        database refuses (a stale owner) is dropped: the heartbeat finds out why."""
        now = time.monotonic()
        with self._lock:
            if not self._progress or now < self._progress_at:
                return
            reports = [
                (job_id, self._held[job_id].job.token, text)
                for job_id, text in self._progress.items()
                if job_id in self._held
            ]
            self._progress.clear()
            self._progress_at = now + PROGRESS_INTERVAL
        if not reports:
            return
        try:
            self.statements += 1
            self._conn.report_progress(self._owner, reports, PROGRESS_TIMEOUT)
        except StoreError:
            pass  # progress is advisory; the next report carries the latest

    def _tick(self, due: list[Held], now: float, quiet: list[Held]) -> None:
        live: list[Held] = []
        # Read in the same pass: the earliest deadline, the shortest period, and whether
        # every live lease follows the session (plain reads of each deadline, no lock per
        # lease: none of these has ended).
        earliest = float("inf")
        period = float("inf")
        all_session = True
        for item in due:
            if item.observable(now):
                live.append(item)
                if item.ownership.deadline < earliest:
                    earliest = item.ownership.deadline
                if item.heartbeat < period:
                    period = item.heartbeat
                all_session = all_session and item.session
                continue
            if item.session:
                quiet.append(item)
            item.next_beat = now + item.heartbeat
            if not item.unobservable_logged:
                item.unobservable_logged = True
                log_event(
                    logger,
                    "heartbeat_withheld",
                    job=item.job,
                    worker=self._owner,
                    reason="executor_unobservable",
                )
                self._journal(
                    "heartbeat_lost",
                    item,
                    {"reason": "executor_unobservable"},
                    now - item.ownership.confirmed_at,
                )
        if not live:
            return
        # Each lease's own margin is read again only if an event wants it (the deadline
        # moves only when this thread confirms it).
        least_left = max(0.0, earliest - now)
        # Wait for the answer one period, or half the lease left if that is longer:
        # ownership is judged from the send time, so a slow answer (10,000 rows on a
        # loaded server) is still a good one, and giving up after one period would mark
        # every lease unknown at once and send the same slow statement again. Half, so a
        # partition is still reported as unknown well before the deadline ends the call.
        timeout = min(max(period, least_left / 2, MIN_TIMEOUT), MAX_TIMEOUT)
        failed_at = time.monotonic()
        self.ticks += 1
        # Whichever statement goes out freezes the quiet leases (the session beat by name,
        # the full extension because it does not name them): from now on each is a lease
        # of its own row, which only the full extension may confirm.
        freeze = [(h.job.id, h.job.token) for h in quiet]
        for item in quiet:
            item.session = False
        # The session beat confirms leases without looking at them, so only leases that are
        # still live by this process's own conservative deadline: one that passed (a
        # process stopped for longer than its lease) may have been frozen and taken over
        # meanwhile, and only the full extension's answer for it may say.
        if self._session_beats < RECONCILE_EVERY and all_session and earliest > failed_at:
            self.statements += 1
            try:
                beat = self._conn.beat_session(
                    self._owner, self._shortest_session_ms, freeze, timeout
                )
            except StoreError as exc:
                self._unknown(live, exc, failed_at)
                return
            finally:
                self._beat_ended_at = time.monotonic()
            self._seen_at = failed_at  # the beat stamped the registry row too
            if beat.beat_at is not None:
                self._session_beats += 1
                self._confirm_session(live, beat, now)
                return
            # Refused: the session was silent too long; let the full extension decide.
        self._session_beats = 0
        self.statements += 1
        try:
            answers = self._conn.extend(
                self._owner, [(h.job.id, h.job.token, h.lease_ms) for h in live], timeout
            )
        except StoreError as exc:
            self._unknown(live, exc, failed_at)
            return
        finally:
            self._beat_ended_at = time.monotonic()
        self._seen_at = failed_at  # the extension stamped the registry row too
        by_id = {h.job.id: h for h in live}
        lost: list[Held] = []
        wanted = enabled(logger, "heartbeat_ok", logging.DEBUG)
        tallies = _tallies()
        for answer in answers:
            item = by_id[answer.job_id]
            remaining = answer.remaining
            if remaining is None:
                lost.append(item)
                continue
            self._confirm(item, answer.sent_at, remaining, now, wanted, tallies)
        self._report_batch(tallies, "extension")
        if lost:
            self._report_lost(lost, timeout)

    def _unknown(self, live: list[Held], exc: StoreError, failed_at: float) -> None:
        """The database did not answer: ownership of every lease sent is unknown until the
        next beat, which comes in half a period."""
        for item in live:
            item.next_beat = time.monotonic() + item.heartbeat / 2
            if item.ownership.mark_unknown():
                log_event(
                    logger,
                    "ownership_unknown",
                    job=item.job,
                    worker=self._owner,
                    reason="db_error",
                    error=type(exc).__name__,
                    remaining=round(item.ownership.remaining(), 3),
                    since_confirmed=round(failed_at - item.ownership.confirmed_at, 3),
                )

    def _confirm_session(self, live: list[Held], beat: SessionBeat, ticked_at: float) -> None:
        """A session beat confirmed every lease of the session: each now ends its own
        length after the beat, on the database's clock. No row per lease came back, so
        this costs the process a few operations per lease, not a parsed row."""
        sent_at, age = beat.sent_at, beat.age
        wanted = enabled(logger, "heartbeat_ok", logging.DEBUG)
        tallies = _tallies()
        if wanted or tallies is not None:
            for item in live:
                remaining = item.lease_ms / 1000 - age
                self._confirm(item, sent_at, remaining, ticked_at, wanted, tallies, "session")
            self._report_batch(tallies, "session")
            return
        # Nobody watches single beats: the same confirmation, without a call per lease
        # (a million leases at H = 5 s are 200,000 of these a second across the processes).
        for item in live:
            item.ownership.confirm(sent_at, item.lease_ms / 1000 - age)
            item.unobservable_logged = False
            item.next_beat = sent_at + item.heartbeat

    def _confirm(
        self,
        item: Held,
        sent_at: float,
        remaining: float,
        ticked_at: float,
        wanted: bool,
        tallies: dict[str, _Tally] | None,
        via: str | None = None,
    ) -> None:
        """One lease confirmed by a beat sent at ``sent_at``: its deadline moves, its next
        beat is due a period later. ``wanted``: whether a handler or the log takes its own
        heartbeat_ok, at DEBUG (10,000 held leases must not flood the log nor, unless
        configured, the journal); ``tallies``: its tool's share of the beat's
        heartbeat_batch, which the metrics read instead. ``ticked_at``: when the beat was
        prepared; the lease left then is read only for those."""
        previous = item.ownership.confirmed_at
        left = 0.0
        if tallies is not None or wanted:
            left = max(0.0, item.ownership.deadline - ticked_at)  # not confirmed yet
        item.ownership.confirm(sent_at, remaining)
        item.unobservable_logged = False
        item.next_beat = sent_at + item.heartbeat
        if tallies is not None:
            tally = tallies.get(item.job.tool)
            if tally is None:
                tally = tallies[item.job.tool] = _Tally()
            tally.add(sent_at - previous, left)
        if wanted:
            log_event(
                logger,
                "heartbeat_ok",
                job=item.job,
                worker=self._owner,
                level=logging.DEBUG,
                heartbeat_age=round(sent_at - previous, 3),
                lease_left=round(left, 3),
                lease_remaining=round(remaining, 3),
                deadline_monotonic=round(sent_at + remaining, 3),
                via=via,
            )

    def _report_batch(self, tallies: dict[str, _Tally] | None, via: str) -> None:
        """One heartbeat_batch per tool the beat confirmed leases of."""
        for tool, tally in (tallies or {}).items():
            log_event(
                logger,
                "heartbeat_batch",
                tool=tool,
                worker=self._owner,
                level=logging.DEBUG,
                leases=tally.leases,
                heartbeat_age=round(tally.oldest, 3),
                lease_left=round(tally.least_left, 3),
                via=via,
            )

    def _report_lost(self, lost: list[Held], timeout: float) -> None:
        """Zero rows: lost, unless this very owner ended the job itself meanwhile.

        A heartbeat and the job's own fenced commit can cross: the extension matches
        zero rows because the commit landed first. That lease was not lost, it was
        used; so a job whose commit is in flight (or accepted, and not yet released)
        is looked at again at the next beat: by then it is released, or its commit
        was refused and the loss is real.
        """
        try:
            states = self._conn.states([h.job.id for h in lost], timeout)
        except StoreError:
            states = {}
        for item in lost:
            with self._lock:
                still_held = self._held.get(item.job.id) is item
            if not still_held:
                continue  # committed or abandoned while the statement was in flight
            if states.get(item.job.id) == "cancelled":
                self._end(item, "cancelled", "heartbeat")
            elif item.ownership.committing:
                item.next_beat = time.monotonic() + item.heartbeat / 2
            else:
                self._end(item, "zero_rows")

    def _end(self, item: Held, reason: str, via: str | None = None) -> None:
        """End one held lease, exactly once, whichever thread notices first (``via``: how
        a cancel was learned of)."""
        with self._lock:
            if self._held.get(item.job.id) is not item:
                return
            del self._held[item.job.id]
        if reason == "cancelled":
            item.ownership.mark_cancelled()
        else:
            item.ownership.mark_lost(reason)
        since_confirmed = time.monotonic() - item.ownership.confirmed_at
        log_event(
            logger,
            "heartbeat_lost" if reason != "cancelled" else "cancel_observed",
            job=item.job,
            worker=self._owner,
            reason=reason,
            since_confirmed=round(since_confirmed, 3),
            via=via,
        )
        item.on_end(reason)  # stop the call first: the journal write may wait on a dead link
        if reason != "cancelled":
            self._journal("heartbeat_lost", item, {"reason": reason}, since_confirmed)

    def _journal(
        self, kind: str, item: Held, detail: dict[str, object], since_confirmed: float
    ) -> None:
        """Queue a journal row; the heartbeat thread writes it after its next beat.

        Never inline: the link may be dead, and a write that waits on it would hold
        up the beats of every other lease (or, from the watcher, race the thread's
        connection).
        """
        if len(self._backlog) < MAX_BACKLOG:
            self._backlog.append((kind, item, detail, since_confirmed, time.monotonic()))

    def _flush_journal(self) -> None:
        """Write queued journal rows on this thread's own connection in one statement,
        best effort: on failure they stay queued for the next beat (the log lines
        already carry them)."""
        if not self._backlog:
            return
        batch = list(self._backlog)
        rows = [
            JournalRow(
                kind=kind,
                job_id=item.job.id,
                token=item.job.token,
                attempt=item.job.attempt,
                worker=self._owner,
                tool=item.job.tool,
                code=_code(detail),
                duration_ms=round(since_confirmed * 1000),
                detail=detail,
                observed_at=observed_at,
            )
            for kind, item, detail, since_confirmed, observed_at in batch
        ]
        try:
            self._conn.record_events(rows, JOURNAL_TIMEOUT)
        except StoreError:
            return
        for _ in batch:
            self._backlog.popleft()

    def _watch(self) -> None:
        """Stop calls whose conservative deadline passed, even while a beat is stuck.

        The beat itself may be blocked in a reconnect that libpq will not give up in
        under 2 s; a lease must not outlive its deadline by that much.
        """
        while not self._stopping.is_set():
            self._watch_wake.clear()
            now = time.monotonic()
            with self._lock:
                due = now >= self._watch_bound
                held = list(self._held.values()) if due else []
            for item in held:
                # A plain read of the deadline: no lock per lease. A job whose fenced
                # commit is in flight is left to the commit's verdict.
                if (
                    item.ownership.deadline <= now
                    and not item.ownership.committing
                    and item.ownership.status == "lost"
                ):
                    self._end(item, item.ownership.reason or "deadline_passed")
            # Deadlines only move later (confirmations) or arrive with new holds, which
            # wake this thread if they come sooner; so sleep until the earliest one.
            with self._lock:
                now = time.monotonic()
                if due:
                    self._watch_bound = min(
                        (h.ownership.deadline for h in self._held.values()), default=now + 1
                    )
                earliest = min(self._watch_bound, now + 1)
                self._watch_at = max(earliest, now + WATCH_INTERVAL)
            self._watch_wake.wait(self._watch_at - now)
