"""The worker: claims jobs, runs them under leases, commits what it still owns.

Flow: a notification (LISTEN/NOTIFY) or the poll timer wakes the claim loop
→ one statement claims up to the free capacity → each job runs in its own
task while the heartbeat thread extends its lease → the completer commits the
outcome, fenced. Shutdown is soft then hard: stop claiming, let running calls
finish within the grace period, then cancel the rest and hand their leases
back without burning an attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import signal
import socket
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._errors import PolicyError, StoreError
from .._intercept import Chain, Interceptors
from .._log import enabled, log_event
from .._maintenance._job_pruner import JobPruner, JobPrunerConfig
from .._maintenance._journal_pruner import JournalPrunerConfig
from .._maintenance._rescuer import Rescuer, RescuerConfig
from .._maintenance._scheduler import Scheduler, SchedulerConfig
from .._maintenance._service import Service
from .._maintenance._statistics import StatisticsConfig, StatisticsKeeper
from .._maintenance._supervisor import Signals, Supervisor, Task, Thread
from .._maintenance._worker_pruner import WorkerPruner, WorkerPrunerConfig
from .._observe._runtime import TelemetryOptions, WorkerTelemetry
from .._pipeline._engine import Transitions
from .._store import MAX_CLAIM, ClaimedJob, Listener, Store, WorkerRegistration
from ._completer import Completer
from ._context import Context
from ._executor import Abandoned, Executor, Stopped
from ._heartbeat import HeartbeatThread, Held
from ._ownership import Ownership
from ._steps import Steps

if TYPE_CHECKING:
    from .._registry import ToolRegistry

logger = logging.getLogger("tenure.worker")

# A cap, not a target: with session beats (migration 0023) a held call costs its process a
# few operations per heartbeat period and the database nothing per lease, so one process may
# hold 100,000 long calls (bench/scale.py measures 50,000 per process).
MAX_CONCURRENCY = 100_000
# Out of the box (README, "Performance"): 100 calls at once, claimed up to 100 per
# statement. Long calls are mostly waiting (a model, an API), so 100 of them cost a
# process little; a burst of short ones is then claimed 100 at a time instead of 10.
DEFAULT_CONCURRENCY = 100
DEFAULT_CLAIM_BATCH = 100
# The largest claim_batch: the most one claim statement takes.
MAX_CLAIM_BATCH = MAX_CLAIM
CREDENTIAL_VARIABLES = (
    "TENURE_DSN",
    "TENURE_DSN_FILE",
    "PGPASSWORD",
    "PGPASSFILE",
    "DATABASE_URL",
    "TENURE_JOURNAL_KEY",  # read by App(); tools have no use for it
)
PULSE_INTERVAL = 0.05
START_SLICE = 100  # job starts between two yields to the event loop
EXPIRY_SLACK = 0.005  # wake this long after a foreign lease's end, so it has surely passed
KEEPALIVE = 5.0  # seconds between the registry's keep-alives when no extension carried one
KEEPALIVE_RANGE = (0.1, 3600.0)
UNREGISTER_TIMEOUT = 2.0
# Pauses between tries of a read or write that failed on a database just back (a re-check
# of held calls after the LISTEN connection came back, a stopped call's acknowledgement).
# The first are short: after an outage each try may only find (and discard) one more of the
# pool's dead connections, which fails at once.
RETRY_FIRST = 0.01
RETRY_LAST = 1.0
STOP_TIMEOUT = 2.0  # one try of a stopped call's acknowledgement
MAX_NAME = 200  # the journal's and the workers registry's bound


async def _cancel_and_wait(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _remove_signal_handlers(loop: asyncio.AbstractEventLoop) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    """Runs the tools of a `ToolRegistry` (an App's: create it with ``app.worker(...)``).

    ``concurrency`` calls at once, claimed ``claim_batch`` at a time; ``poll_interval``
    is how often it looks for work when no notification woke it; ``grace`` is how long
    a stopping worker lets running calls finish. ``name`` is what the journal and the
    dashboard call it (host:pid:random by default). ``metrics_port`` serves /metrics on
    ``metrics_host`` (loopback unless told otherwise); ``journal_heartbeats`` journals
    every lease extension, not only losses.

    Each maintenance service takes its config, with defaults: ``rescuer``
    (`RescuerConfig`: expired leases, stuck runs, waitpoint deadlines),
    ``journal_pruner`` (`JournalPrunerConfig`), ``job_pruner`` (`JobPrunerConfig`),
    ``scheduler`` (`SchedulerConfig`), ``statistics`` (`StatisticsConfig`) and
    ``worker_pruner`` (`WorkerPrunerConfig`: registry rows of workers unseen too long).

    The worker registers itself in ``tenure_workers`` at start (`App.admin.workers`,
    ``tenure workers``); its heartbeat thread keeps the row alive at least every
    ``keepalive`` seconds, and readers call it silent after three periods unseen.

    Every background loop runs under one ``supervisor``; ``signals`` are what a test
    awaits instead of time: ``await worker.signals["rescuer"].wait()`` returns after the
    rescuer's next round (``completer``: a batch committed; ``journal_writer``: a batch
    written).
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        claim_batch: int = DEFAULT_CLAIM_BATCH,
        poll_interval: float = 1.0,
        grace: float = 10.0,
        name: str | None = None,
        rescuer: RescuerConfig | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        journal_heartbeats: bool = False,
        journal_pruner: JournalPrunerConfig | None = None,
        scheduler: SchedulerConfig | None = None,
        job_pruner: JobPrunerConfig | None = None,
        statistics: StatisticsConfig | None = None,
        worker_pruner: WorkerPrunerConfig | None = None,
        keepalive: float = KEEPALIVE,
    ) -> None:
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise PolicyError(f"concurrency={concurrency} is outside [1, {MAX_CONCURRENCY}]")
        if not 1 <= claim_batch <= MAX_CLAIM_BATCH:
            raise PolicyError(f"claim_batch={claim_batch} is outside [1, {MAX_CLAIM_BATCH}]")
        if not 0.01 <= poll_interval <= 60:
            raise PolicyError(f"poll_interval={poll_interval} is outside [0.01, 60] s")
        if not 0 <= grace <= 3600:
            raise PolicyError(f"grace={grace} is outside [0, 3600] s")
        if not registry.tools:
            raise PolicyError("the app has no registered tools; a worker would have nothing to do")
        low, high = KEEPALIVE_RANGE
        if (
            isinstance(keepalive, bool)
            or not isinstance(keepalive, int | float)
            or not low <= keepalive <= high
        ):
            raise PolicyError(f"keepalive={keepalive!r} is outside [{low:g}, {high:g}] s")
        if metrics_port is not None and not 0 <= metrics_port <= 65535:
            raise PolicyError(f"metrics_port={metrics_port} is outside [0, 65535]")
        if name is not None and not (
            isinstance(name, str) and 1 <= len(name) <= MAX_NAME and name.isprintable()
        ):
            raise PolicyError(
                f"a worker's name must be 1 to {MAX_NAME} printable characters, got {name!r:.60}"
            )
        self.registry = registry
        self.name = name or default_worker_name()
        self.concurrency = concurrency
        self.claim_batch = claim_batch
        self.poll_interval = poll_interval
        self.grace = grace
        self._telemetry = TelemetryOptions(
            metrics_port, metrics_host, journal_heartbeats, journal_pruner
        )
        self.metrics_url: str | None = None
        self._rescuer_config = rescuer or RescuerConfig(
            interval=min(1.0, min(t.policy.lease.lease for t in registry.tools.values()) / 2)
        )
        self._scheduler_config = scheduler or SchedulerConfig()
        self._job_pruner_config = job_pruner or JobPrunerConfig()
        self._statistics = statistics or StatisticsConfig()
        self._worker_pruner_config = worker_pruner or WorkerPrunerConfig()
        self.keepalive = keepalive
        self._limited = bool(registry.limits)  # keyed jobs need the admitting claim
        self._lease_ms = {name: spec.policy.lease.lease_ms for name, spec in registry.tools.items()}
        self._active: dict[int, asyncio.Task[None]] = {}
        self._stop_reasons: dict[int, Stopped] = {}
        self._wake = asyncio.Event()
        self._look_again_at = 0.0  # when an idle claim loop next asks for the next expiry
        self._expired_streak = 0  # expiries found already past with nothing to claim after
        self._stopping = asyncio.Event()
        self._loop_seen = time.monotonic()
        self._waitpoint_secret = b""  # read from the database when the worker starts
        self._steps: Steps | None = None  # the jobs' fenced steps, once the store is open
        self._store: Store | None = None  # while run() runs
        self._recheck: asyncio.Task[None] | None = None
        self._acks: set[asyncio.Task[None]] = set()
        self.counts: Counter[str] = Counter()
        self._interceptors: Interceptors = registry.interceptors  # around claim, call, commit
        # River's test signals: a test awaits signals["rescuer"].wait() (a round done).
        self.signals = Signals()
        self.supervisor: Supervisor | None = None  # while run() runs

    # -- lifecycle -------------------------------------------------------------

    def _count(self, kind: str) -> None:
        self.counts[kind] += 1

    def stop(self) -> None:
        """Soft stop: claim nothing more; running calls get the grace period."""
        self._stopping.set()
        self._wake.set()

    async def run(self, *, handle_signals: bool = True, scrub_environment: bool = False) -> None:
        """Run until `stop()` (or SIGTERM/SIGINT when ``handle_signals``).

        ``scrub_environment`` removes database credentials from ``os.environ`` once
        the DSN is resolved, so tool code in a dedicated worker process cannot read
        them (``tenure worker`` sets it).
        """
        loop = asyncio.get_running_loop()
        dsn = self.registry.dsn
        if scrub_environment:
            for variable in CREDENTIAL_VARIABLES:
                os.environ.pop(variable, None)
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(self._log_stopped)  # the last thing, whatever went wrong
            if handle_signals:
                stack.callback(_remove_signal_handlers, loop)
            store = await stack.enter_async_context(Store(dsn, max_size=4))
            self._store = store
            # Unwinds after everything else, just before the store closes.
            stack.push_async_callback(self._forget_store)
            self._waitpoint_secret = await store.waitpoint_secret()
            self._steps = Steps(store, self.name, loop, self.registry.new_job)
            registration = self._registration()
            await store.register_worker(registration)
            # Runs after the heartbeat thread has stopped (the stack unwinds in reverse), so
            # no keep-alive can follow the stop.
            stack.push_async_callback(self._unregister, store)
            telemetry = WorkerTelemetry(self.registry, self.name, store, self._telemetry)
            executor = Executor()
            heartbeat = HeartbeatThread(dsn, self.name, registration)
            completer = Completer(store, self.name, self._count, stages=Transitions(store))
            listener = Listener(
                dsn,
                ("tenure_jobs", "tenure_cancel"),
                functools.partial(self._notified, heartbeat),
                on_connect=functools.partial(self._listening, store, heartbeat),
                name=self.name,
            )
            # The process's one list of background loops, started in this order and stopped
            # in reverse: the journal writer outlives the heartbeat thread whose events it
            # writes; the listener (and the pulse) stop first.
            self.supervisor = Supervisor(
                [
                    *telemetry.components,
                    Thread("heartbeat", heartbeat),
                    completer,
                    *self._services(store),
                    listener,
                    Task("pulse", self._pulse),
                ],
                self.signals,
            )
            await stack.enter_async_context(self.supervisor)
            self.metrics_url = telemetry.metrics_url
            stack.push_async_callback(self._stop_recheck)  # before the listener stops
            log_event(
                logger,
                "worker_started",
                worker=self.name,
                concurrency=self.concurrency,
                tools=",".join(sorted(self._lease_ms)),
            )
            await self._claim_loop(store, heartbeat, executor, completer)
            await self._drain()

    def _services(self, store: Store) -> list[Service]:
        """The maintenance services of this worker: the components with rounds."""
        return [
            Rescuer(store, self._rescuer_config),
            Scheduler(
                store,
                list(self.registry.schedules.values()),
                self.registry.schedule_job,
                self._scheduler_config,
            ),
            JobPruner(store, list(self._lease_ms), self._job_pruner_config),
            StatisticsKeeper(store, self._statistics),
            WorkerPruner(store, self._worker_pruner_config),
        ]

    def _registration(self) -> WorkerRegistration:
        from .._version import __version__

        return WorkerRegistration(
            name=self.name,
            host=socket.gethostname()[:255],
            pid=os.getpid(),
            version=__version__,
            tools=tuple(sorted(self._lease_ms)),
            concurrency=self.concurrency,
            keepalive_ms=round(self.keepalive * 1000),
        )

    async def _unregister(self, store: Store) -> None:
        """Mark this process's registry row stopped; if the database is gone, the row
        simply goes silent (and is pruned in time), which is what readers then see."""
        try:
            async with asyncio.timeout(UNREGISTER_TIMEOUT):  # a dead server must not hold it up
                await store.stop_worker(self.name, os.getpid())
        except (StoreError, OSError, TimeoutError) as exc:
            failure: dict[str, Any] = {"error": type(exc).__name__, "level": logging.WARNING}
            log_event(logger, "worker_unregister_failed", worker=self.name, **failure)

    def _log_stopped(self) -> None:
        log_event(
            logger,
            "worker_stopped",
            worker=self.name,
            counts=",".join(f"{k}:{v}" for k, v in sorted(self.counts.items())),
        )

    async def _drain(self) -> None:
        if self._active:
            log_event(
                logger,
                "worker_draining",
                worker=self.name,
                running=len(self._active),
                grace=self.grace,
            )
            await asyncio.wait(list(self._active.values()), timeout=self.grace)
        for job_id, task in list(self._active.items()):
            self._stop_reasons[job_id] = Stopped("shutdown")
            task.cancel()
        if self._active:
            await asyncio.wait(list(self._active.values()))

    # -- claiming --------------------------------------------------------------

    async def _claim_loop(
        self, store: Store, heartbeat: HeartbeatThread, executor: Executor, completer: Completer
    ) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            free = self.concurrency - len(self._active) - executor.stuck
            if free > 0:
                asked = min(free, self.claim_batch)
                # Until every job it took is held, the heartbeat freezes no lease it was not
                # told of: it may be one of these.
                with heartbeat.claiming():
                    jobs = await self._claim(store, asked)
                    for n, job in enumerate(jobs, 1):
                        self._start(job, heartbeat, executor, completer)
                        if n % START_SLICE == 0:
                            # Let the loop breathe: a claim of 1,000 starting at once would
                            # stall it past a heartbeat, and the observer would then
                            # withhold every lease the process holds.
                            await asyncio.sleep(0)
                if jobs:
                    self._expired_streak = 0
                if len(jobs) == asked:
                    continue  # there may be more waiting
            wait = await self._idle_wait(store) if free > 0 else self.poll_interval
            # asyncio.timeout, not wait_for: no extra task between a NOTIFY and the claim.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()

    async def _claim(self, store: Store, asked: int) -> list[ClaimedJob]:
        try:
            return await store.claim(self.name, self._lease_ms, asked, limited=self._limited)
        except StoreError as exc:
            log_event(
                logger,
                "claim_failed",
                worker=self.name,
                level=logging.WARNING,
                error=type(exc).__name__,
            )
            return []

    async def _idle_wait(self, store: Store) -> float:
        """How long an idle claim loop may wait: until its next poll, or until another
        worker's lease runs out if that comes first. No NOTIFY announces an expiry (the
        holder may be dead), so without this a crashed worker's job would wait up to a
        whole poll interval past its lease. The database is asked again only once the
        expiry it named (or a poll interval) has passed, not on every wake-up.

        An expiry already past means "claim now": the lease ended between our claim and
        this question. If claims keep finding nothing behind such an expiry (a keyed job
        at its limit, a last attempt the rescuer is about to fail), the next looks back
        off, so the loop never spins.
        """
        now = time.monotonic()
        if now >= self._look_again_at:
            try:
                seconds = await store.next_expiry(self.name, list(self._lease_ms))
            except StoreError:
                seconds = None
            # The answer's clock: after it arrived, so a slow answer never wakes us early.
            now = time.monotonic()
            if seconds is None:
                ahead = self.poll_interval
            elif seconds > 0:
                ahead = seconds + EXPIRY_SLACK
            else:
                streak = self._expired_streak
                ahead = 0.0 if streak == 0 else EXPIRY_SLACK * 2**streak
                self._expired_streak = min(streak + 1, 16)
            self._look_again_at = now + min(self.poll_interval, ahead)
        return max(0.0, min(self.poll_interval, self._look_again_at - now))

    def _start(
        self,
        job: ClaimedJob,
        heartbeat: HeartbeatThread,
        executor: Executor,
        completer: Completer,
    ) -> None:
        spec = self.registry.tools[job.tool]
        sent_at = job.sent_at
        lease_remaining = job.lease_remaining
        ownership = Ownership(sent_at, lease_remaining)
        ctx = Context(
            job_id=job.id,
            tool=job.tool,
            token=job.token,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            worker=self.name,
            ownership=ownership,
            safety_margin=spec.policy.lease.margin,
            signing_key=self.registry.signing_key,
            progress=functools.partial(heartbeat.report, job.id),
            waitpoint_secret=self._waitpoint_secret,
            waitpoints=job.waitpoints,
            steps=self._steps,
            tenant=job.tenant,
        )
        self.counts["claimed"] += 1
        if job.previous_token is not None:
            self.counts["reclaimed"] += 1
            # About the expired holder (its token, attempt and name); we only noticed it.
            log_event(
                logger,
                "lease_expired",
                job=job.id,
                token=job.previous_token,
                attempt=job.attempt - 1,
                tool=job.tool,
                worker=job.previous_owner,
                reclaimed_by=self.name,
            )
        # The journal records every claim and outcome; the log line is INFO only where an
        # operator should look (a reclaim, a failure): two INFO lines per job cost a third
        # of a busy worker's time, and the fields of an event that nobody wants, ~3 µs.
        level = logging.DEBUG if job.previous_token is None else logging.INFO
        if enabled(logger, "job_claimed", level):
            log_event(
                logger,
                "job_claimed",
                level=level,
                job=job,
                worker=self.name,
                payload_hmac=job.payload_hmac,
                lease_remaining=round(lease_remaining, 3),
                deadline_monotonic=round(sent_at + lease_remaining, 3),
                reclaimed_from=job.previous_owner,
                previous_token=job.previous_token,
            )
        chain = self._interceptors.chain()
        if chain is not None:
            chain.claimed(job, self.name)
        task = asyncio.create_task(
            self._execute(job, ctx, ownership, executor, completer, heartbeat, chain),
            name=f"tenure-job-{job.id}",
        )
        self._active[job.id] = task
        loop = asyncio.get_running_loop()
        policy = spec.policy
        heartbeat.hold(
            Held(
                job=job,
                ownership=ownership,
                lease_ms=policy.lease.lease_ms,
                heartbeat=policy.lease.heartbeat,
                time_limit=policy.time_limit,
                started_at=sent_at,
                is_alive=self._observer(task, policy.lease.heartbeat),
                on_end=functools.partial(self._interrupt_threadsafe, loop, job.id, ownership),
            )
        )
        task.add_done_callback(lambda _: self._finished(job.id, heartbeat))

    def _observer(self, task: asyncio.Task[None], heartbeat: float) -> Callable[[], bool]:
        """Alive means: the task is not done and the event loop answered within one beat."""
        stall_limit = max(heartbeat, 4 * PULSE_INTERVAL)
        return lambda: not task.done() and time.monotonic() - self._loop_seen < stall_limit

    def _finished(self, job_id: int, heartbeat: HeartbeatThread) -> None:
        heartbeat.release(job_id)
        self._active.pop(job_id, None)
        self._stop_reasons.pop(job_id, None)
        self._wake.set()

    def _interrupt_threadsafe(
        self, loop: asyncio.AbstractEventLoop, job_id: int, ownership: Ownership, reason: str
    ) -> None:
        """Called from the heartbeat thread: the loop cancels the task when it can."""
        loop.call_soon_threadsafe(self._interrupt, job_id, ownership, reason)

    def _interrupt(self, job_id: int, ownership: Ownership, reason: str) -> None:
        task = self._active.get(job_id)
        if task is None or task.done() or ownership.committing:
            return  # the call is over; its commit, in flight, gets the database's verdict
        self._stop_reasons[job_id] = Stopped("cancelled" if reason == "cancelled" else "lease_lost")
        self.counts["cancelled" if reason == "cancelled" else "lease_lost"] += 1
        task.cancel()

    async def _execute(
        self,
        job: ClaimedJob,
        ctx: Context,
        ownership: Ownership,
        executor: Executor,
        completer: Completer,
        heartbeat: HeartbeatThread,
        chain: Chain | None,
    ) -> None:
        spec = self.registry.tools[job.tool]
        started = time.monotonic()
        try:
            run = executor.run(spec, ctx, job, self._stop_reasons)
            finish = await (run if chain is None else chain.call(job, self.name, lambda: run))
        except asyncio.CancelledError:
            return  # the worker itself is going down hard; the lease will expire
        if isinstance(finish, Abandoned):
            duration = round(time.monotonic() - started, 3)
            reason = ownership.reason or finish.reason
            log_event(
                logger,
                "call_abandoned",
                job=job,
                worker=self.name,
                reason=reason,
                duration=duration,
            )
            if finish.outcome is not None:
                # What an operator reads must show that this attempt produced an outcome
                # that was thrown away (never its content), as result_rejected does for
                # a refused commit.
                log_event(
                    logger,
                    "result_discarded",
                    job=job,
                    worker=self.name,
                    reason=reason,
                    outcome=finish.outcome,
                    duration=duration,
                )
            if ownership.status == "cancelled":
                self._acknowledge(job, ownership, finish.running)
            return
        log_event(
            logger,
            "call_finished",
            level=logging.DEBUG if finish.state == "succeeded" else logging.INFO,
            job=job,
            worker=self.name,
            outcome=finish.state,
            code=(finish.error or {}).get("code"),
            duration=round(time.monotonic() - started, 3),
        )
        # The last progress report not yet written goes with the outcome, fenced with it.
        finish.progress_json = heartbeat.take_progress(job.id)
        commit = completer.commit(job, finish, ownership)
        await (commit if chain is None else chain.commit(job, self.name, finish, lambda: commit))

    # -- background ------------------------------------------------------------

    async def _pulse(self) -> None:
        """Proof of a responsive event loop, read by the heartbeat thread."""
        while True:
            self._loop_seen = time.monotonic()
            await asyncio.sleep(PULSE_INTERVAL)

    def _notified(self, heartbeat: HeartbeatThread, channel: str, payload: str) -> None:
        """A NOTIFY: new work wakes the claim loop; a cancel stops its call at once."""
        if channel != "tenure_cancel":
            self._wake.set()
            return
        for item in payload.split(","):
            job_id, _, token = item.partition(":")
            if job_id.isdigit() and token.isdigit() and int(job_id) in self._active:
                heartbeat.cancelled(int(job_id), int(token), "notify")

    def _listening(self, store: Store, heartbeat: HeartbeatThread) -> None:
        """The LISTEN connection is (back) in place. Whatever was announced while it was
        away reached nobody: the claim loop looks for work, and every held call's job is
        read again for a cancel (the heartbeat's zero rows would find it too, but only at
        the next beat: up to a heartbeat period of side effects after the cancel)."""
        self._wake.set()
        if self._recheck is not None:
            self._recheck.cancel()
        self._recheck = asyncio.create_task(
            self._recheck_cancels(store, heartbeat), name=f"{self.name}-recheck"
        )

    async def _recheck_cancels(self, store: Store, heartbeat: HeartbeatThread) -> None:
        """One read of every held call's job (by id and token); a cancelled one is stopped
        as a notification would have stopped it. Read again until the database answers:
        right after a restart the pool's first connections may be the dead ones."""
        pause = RETRY_FIRST
        while held := heartbeat.held_tokens():
            try:
                cancelled = await store.cancelled_among(held)
            except StoreError as exc:
                if exc.verdict == "fail":  # reading again cannot help: the lease's end will
                    return
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_LAST)
                continue
            for job_id, token in cancelled:
                heartbeat.cancelled(job_id, token, "recheck")
            return

    async def _stop_recheck(self) -> None:
        if self._recheck is not None:
            await _cancel_and_wait(self._recheck)
            self._recheck = None

    # -- a cancelled call, stopped ----------------------------------------------

    def _acknowledge(
        self, job: ClaimedJob, ownership: Ownership, running: asyncio.Future[Any] | None
    ) -> None:
        """Journal (call_stopped, notified) that this cancelled call has stopped, once it
        has: now, or when its thread returns. What `App.cancel(until="stopped")` waits
        for; without it, the canceller waits for the lease to run out."""
        if running is None or running.done():
            self._record_stop(job, ownership)
        else:
            running.add_done_callback(lambda _: self._record_stop(job, ownership))

    def _record_stop(self, job: ClaimedJob, ownership: Ownership) -> None:
        store = self._store
        if store is None:
            return  # the worker is gone; the canceller falls back on the lease's end
        task = asyncio.create_task(self._write_stop(store, job, ownership))
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

    async def _write_stop(self, store: Store, job: ClaimedJob, ownership: Ownership) -> None:
        """Tried until it lands or the call's lease would have ended anyway: past that,
        the canceller no longer waits for it."""
        stopped_at = time.monotonic()
        since = ownership.cancelled_at if ownership.cancelled_at is not None else stopped_at
        pause = RETRY_FIRST
        while True:
            try:
                await store.record_stop(
                    job, self.name, round((stopped_at - since) * 1000), STOP_TIMEOUT
                )
                return
            except StoreError as exc:
                if exc.verdict == "fail" or time.monotonic() + pause >= ownership.deadline:
                    return
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_LAST)

    async def _forget_store(self) -> None:
        """The store is about to close: unwritten acknowledgements are dropped (their
        cancellers wait for the lease's end instead)."""
        self._store = None
        for task in list(self._acks):
            await _cancel_and_wait(task)
