"""App: the tool registry, the producer API and the worker factory.

The async methods are the implementation; the ``*_sync`` methods run the very
same coroutines on a private event loop thread, so there is one code path,
not two hand-written copies.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import json
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Literal,
    ParamSpec,
    TypedDict,
    TypeVar,
    Unpack,
    overload,
)

from ._dsn import check_dsn, dsn_from_environment
from ._errors import (
    ConfigError,
    Conflict,
    JobAlreadyEnded,
    JobCancelled,
    JobFailed,
    JobNotFound,
    PayloadError,
    PolicyError,
    RunFailed,
    StoreError,
    UnknownTool,
    WaitTimeout,
    one_line,
)
from ._intercept import Interceptor, Interceptors
from ._job import Enqueued, Job
from ._maintenance._cron import Cron
from ._maintenance._scheduler import CatchUp, Every, Schedule
from ._observe._journal import journal_key as journal_key_from
from ._observe._journal import payload_hmac
from ._payload import MAX_PAYLOAD_BYTES, fingerprint
from ._pipeline._engine import Transitions
from ._pipeline._model import Pipeline, Run, Stage, Verdict, build_pipeline, run_key
from ._pipeline._plan import plan_pipeline
from ._policy import MAX_BACKOFF, LeasePolicy, RetryPolicy, ToolPolicy
from ._registry import (
    ConcurrencyLimits,
    KeyRule,
    TenantQuotas,
    ToolSpec,
    check_priority,
    check_tenant,
    make_spec,
)
from ._run_watch import RunEvent, follow_run
from ._search import JobPage, SearchFilters, job_search, page_of
from ._signature import load_result
from ._store import (
    EventQuery,
    JobDetail,
    JobWaitpoint,
    JournalEntry,
    NewJob,
    Store,
    WorkerInfo,
    migrate,
    probe,
)
from ._waiting import Deadline, Waiters, reread
from ._waitpoint import answer_json, token_hash
from ._waitpoint import check_name as check_waitpoint_name

if TYPE_CHECKING:
    from ._observe._doctor import Check
    from ._worker._worker import Worker

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")
F = TypeVar("F", bound=Callable[..., Any])

MAX_KEY_LENGTH = 500
MAX_PRIORITY = 100
MAX_DELAY = 30 * 24 * 3600.0
MAX_WAIT = 7 * 24 * 3600.0
DAY = 24 * 3600.0
DEFAULT_RETAIN = 7 * DAY
NO_SCHEMA = "no tenure schema in this database; run `tenure migrate`"
PRUNE_COUNT_CAP = 10_000_000
WORKER_LEASE_CAP = 100_000  # running jobs read to count the leases workers hold
CHECK_IDLE = 30.0  # a producer's pooled connection idle longer is checked before use
MIN_RETAIN = 1.0
MAX_RETAIN = 3650 * DAY


def check_retain(value: Any) -> float:
    """A retention in seconds: how long an ended job (and so its key) is kept."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not MIN_RETAIN <= value <= MAX_RETAIN
    ):
        raise PolicyError(
            f"retain must be a number of seconds in [{MIN_RETAIN:g}, {MAX_RETAIN:g}], got {value!r}"
        )
    return float(value)


class ScheduleOptions(TypedDict, total=False):
    """The keyword options of `App.schedule` besides ``cron``."""

    every: float | None
    name: str | None
    payload: Mapping[str, Any] | None
    catch_up: CatchUp
    grace: float | None


class _Portal:
    """An event loop on a daemon thread that runs coroutines for sync callers."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tenure-sync", daemon=True
        )
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


def _blocking(
    method: Callable[Concatenate[App, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[App, P], T]:
    """The blocking twin of an async App method: the same coroutine, run on the App's
    private event loop thread."""

    @functools.wraps(method)
    def blocking(self: App, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._sync(method(self, *args, **kwargs))

    blocking.__name__ = blocking.__qualname__ = f"{method.__name__}_sync"
    blocking.__doc__ = f"Blocking form of `App.{method.__name__}` (same arguments).\n\n" + (
        method.__doc__ or ""
    )
    return blocking


class App:
    """Registry of tools plus the API to enqueue, inspect, wait for and cancel calls.

    ``dsn`` (else ``TENURE_DSN``, else the file ``TENURE_DSN_FILE`` names) names a
    PostgreSQL 14+ server; without one, an embedded PostgreSQL is started in tenure's
    data directory on first use (said once on stderr) and stopped by `close()`. The
    schema is migrated on first use unless ``migrate=False`` (then run ``tenure migrate``).

    ``journal_key`` (or ``TENURE_JOURNAL_KEY``, at least 16 bytes) keys the
    HMAC-SHA256 of each payload that the journal carries instead of the payload;
    without one, journal rows carry no payload hash at all.

    ``retain`` (seconds, default 7 days) is how long an ended job is kept before a
    worker's pruner deletes it, unless its tool or its enqueue says otherwise. It is
    also the idempotency window: once a job is pruned, its key may run again.

    ``poll_interval`` (seconds, default 1) is how often a waiter reads its job when
    notifications cannot reach it (a pooler in transaction mode); when they can, it
    reads only when told, plus once every 30 s (or ``poll_interval``, if longer).

    ``interceptors`` (`tenure.telemetry.Interceptor`, the first outermost) wrap its
    enqueues and its workers' claims, calls and commits; `tenure.otel.instrument()` adds
    its tracer to every App's chain.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        signing_key: bytes | str | None = None,
        migrate: bool = True,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
        journal_key: bytes | str | None = None,
        retain: float = DEFAULT_RETAIN,
        poll_interval: float = 1.0,
        interceptors: Sequence[Interceptor] = (),
    ) -> None:
        # Around its enqueues and its workers' claims, calls and commits (tenure._intercept).
        self.interceptors = Interceptors(interceptors)
        self._journal_key = journal_key_from(journal_key)
        self.retain = check_retain(retain)
        if (
            isinstance(poll_interval, bool)
            or not isinstance(poll_interval, int | float)
            or not 0.01 <= poll_interval <= 3600
        ):
            raise PolicyError(f"poll_interval must be in [0.01, 3600] s, got {poll_interval!r}")
        self.poll_interval = float(poll_interval)
        given = dsn if dsn is not None else dsn_from_environment()
        self._dsn = check_dsn(given) if given else None
        if isinstance(signing_key, str):
            signing_key = signing_key.encode()
        if signing_key is None and os.environ.get("TENURE_SIGNING_KEY"):
            signing_key = os.environ["TENURE_SIGNING_KEY"].encode()
        self.signing_key: bytes | None = signing_key
        if not 1 <= max_payload_bytes <= MAX_PAYLOAD_BYTES:
            raise PolicyError(f"max_payload_bytes must be in [1, {MAX_PAYLOAD_BYTES}]")
        self._max_payload = max_payload_bytes
        self.auto_migrate = migrate  # migrate on first use (read-only commands turn it off)
        self._migrated = False
        self._embedded: Any = None
        self._lock = threading.Lock()
        self._stores: dict[asyncio.AbstractEventLoop, asyncio.Future[Store]] = {}
        self._waiters: dict[asyncio.AbstractEventLoop, Waiters] = {}
        self._portal: _Portal | None = None
        self.tools: dict[str, ToolSpec] = {}
        self.pipelines: dict[str, Pipeline] = {}
        self.limits = ConcurrencyLimits()
        self.quotas = TenantQuotas()
        self.schedules: dict[str, Schedule] = {}
        self._secret: bytes | None = None  # the database's secret, read once (derived_key)

    # -- configuration ---------------------------------------------------------

    @property
    def dsn(self) -> str:
        """The server's DSN; without one, the embedded server's (and migrates) on first use.

        That is the server another process of this user already runs in tenure's data
        dir (a `tenure worker` in another terminal), else one this process starts and
        stops on close. Workers on other machines never see it: which one it is, is said
        on stderr (once per process).
        """
        with self._lock:
            if self._dsn is None:
                from ._embedded import EmbeddedPostgres, announce

                self._embedded = EmbeddedPostgres()
                self._dsn = self._embedded.use()
                announce(self._embedded)
            if self.auto_migrate and not self._migrated:
                migrate(self._dsn)
                self._migrated = True
            return self._dsn

    def set_dsn(self, dsn: str) -> None:
        """Point this app at ``dsn`` before it first connects (``tenure --dsn``, for an app
        whose module built it from the environment). ConfigError once it is connected."""
        checked = check_dsn(dsn)
        with self._lock:
            if checked == self._dsn:
                return
            if self._stores or self._embedded is not None or self._migrated:
                raise ConfigError("this app is already connected; give the DSN before first use")
            self._dsn = checked

    @property
    def configured_dsn(self) -> str | None:
        """The DSN this app was given (argument, ``TENURE_DSN``, ``TENURE_DSN_FILE``), or None
        when it uses (or will start) the embedded server."""
        return None if self._embedded is not None else self._dsn

    def tool(
        self,
        name: str | None = None,
        *,
        lease: float = 90.0,
        heartbeat: float = 30.0,
        jitter: float = 20.0,
        missed_beats: int = 2,
        safety_margin: float | None = None,
        time_limit: float = 600.0,
        max_attempts: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 300.0,
        permanent: Sequence[type[BaseException]] = (),
        labels: Mapping[str, str] | None = None,
        priority: int = 0,
        concurrency: int | None = None,
        concurrency_key: KeyRule = None,
        retain: float | None = None,
    ) -> Callable[[F], F]:
        """Register a tool with its policy; the policy is validated now, not at run time.

        ``labels`` may name the ``model`` and ``provider`` the tool calls; metrics are
        broken down by them (e.g. ``labels={"model": "gpt-4o", "provider": "openai"}``).

        ``priority`` is the default priority of its calls (higher is claimed first).
        ``concurrency=N`` lets at most N calls of this tool run at once across all
        workers (key ``tool:{name}``). ``concurrency_key`` instead gives each call a
        key whose limit `limit` declares: a fixed string (``"provider:openai"``) or a
        function of the payload (``lambda p: f"user:{p['user_id']}"``).

        ``retain`` (seconds) keeps this tool's ended jobs that long instead of the app's
        ``retain``; it is the window in which a repeated idempotency key finds the job.
        """
        policy = ToolPolicy(
            lease=LeasePolicy(lease, heartbeat, jitter, missed_beats, safety_margin),
            retry=RetryPolicy(
                max_attempts,
                backoff,
                max_backoff=min(max_backoff, MAX_BACKOFF),
                permanent=tuple(permanent),
            ),
            time_limit=time_limit,
        )

        check_priority(priority, MAX_PRIORITY)
        tool_retain = None if retain is None else check_retain(retain)
        if concurrency is not None and concurrency_key is not None:
            raise PolicyError(
                "give concurrency (this tool's own limit) or concurrency_key (a key whose "
                "limit app.limit declares), not both"
            )

        def register(fn: F) -> F:
            tool_name = name or fn.__name__
            key = f"tool:{tool_name}" if concurrency is not None else concurrency_key
            spec = make_spec(
                tool_name,
                fn,
                policy,
                labels,
                priority=priority,
                concurrency_key=key,
                retain=tool_retain,
            )
            if spec.name in self.tools:
                raise PolicyError(f"tool {spec.name!r} is already registered")
            if concurrency is not None:
                self.limit(f"tool:{tool_name}", concurrency)
            self.tools[spec.name] = spec
            return fn

        return register

    def limit(self, pattern: str, limit: int) -> None:
        """At most ``limit`` calls with a matching concurrency key run at once, across all
        workers: ``app.limit("user:*", 2)`` (each user), ``app.limit("provider:openai", 8)``.

        Producers and workers must declare the same limits (import the same app module).
        """
        self.limits.declare(pattern, limit)

    def quota(self, pattern: str, max_queued: int) -> None:
        """A tenant matching ``pattern`` may have at most ``max_queued`` jobs queued at once:
        ``app.quota("*", 10_000)`` (every tenant), ``app.quota("trial:*", 100)``.

        An enqueue that would pass it raises QuotaExceeded and queues nothing. Jobs
        already running do not count, and a retry is never refused. Tenants matching no
        quota have none. Producers must declare the same quotas (import the same app).
        """
        self.quotas.declare(pattern, max_queued)

    def schedule(
        self,
        tool: str | Callable[..., Any],
        *,
        cron: str | None = None,
        every: float | None = None,
        name: str | None = None,
        payload: Mapping[str, Any] | None = None,
        catch_up: CatchUp = "once",
        grace: float | None = None,
    ) -> Schedule:
        """Call ``tool`` periodically: at each ``cron`` slot (5 fields, UTC) or ``every``
        so many seconds. Each slot is queued once across all workers.

        ``catch_up`` says what a worker that comes back after downtime does with the
        slots nobody was up for: ``"once"`` runs the latest of them once, ``"skip"``
        drops them. A slot is missed when it is found more than ``grace`` seconds late
        (default: half the period, at most 60 s). ``name`` (default: the tool's) names
        the schedule in its jobs' keys, ``periodic:{name}:{slot}``.
        """
        spec = self._spec_of(tool)
        rule: Cron | Every
        if cron is not None and every is None:
            rule = Cron.parse(cron)
        elif every is not None and cron is None:
            rule = Every(every)
        else:
            raise PolicyError(f"schedule for {spec.name!r}: give cron or every, exactly one")
        schedule = Schedule(
            name or spec.name, spec.name, rule, dict(payload or {}), catch_up, grace
        )
        if schedule.name in self.schedules:
            raise PolicyError(f"schedule {schedule.name!r} is already declared; name it")
        self._schedule_job(schedule, "periodic:check")  # the payload must fit the tool now
        self.schedules[schedule.name] = schedule
        return schedule

    def periodic(
        self, cron: str | None = None, **options: Unpack[ScheduleOptions]
    ) -> Callable[[F], F]:
        """Decorator form of `schedule` (same options), placed above ``@app.tool(...)``::

        @app.periodic("0 3 * * *", catch_up="skip")
        @app.tool()
        async def nightly_report(ctx): ...
        """

        def register(fn: F) -> F:
            self.schedule(fn, cron=cron, **options)
            return fn

        return register

    def _spec_of(self, tool: str | Callable[..., Any]) -> ToolSpec:
        for spec in self.tools.values():
            if spec.name == tool or spec.fn is tool:
                return spec
        if callable(tool):
            raise PolicyError(
                f"{getattr(tool, '__name__', tool)!r} is not a registered tool; "
                "register it first (put @app.periodic above @app.tool)"
            )
        known = ", ".join(sorted(self.tools)) or "none"
        raise UnknownTool(f"unknown tool {tool!r} (registered: {known})")

    def _schedule_job(self, schedule: Schedule, key: str) -> NewJob:
        """The job of one slot: the tool's own priority, limits and policy."""
        return self._new_job(schedule.tool, dict(schedule.payload), key, None, 0.0)

    def worker(self, **options: Any) -> Worker:
        """A Worker for this app's tools (see `Worker` for the options)."""
        from ._worker._worker import Worker

        return Worker(self, **options)

    # -- the store, one per event loop -----------------------------------------

    async def _store(self) -> Store:
        loop = asyncio.get_running_loop()
        future = self._stores.get(loop)
        if future is None:
            future = loop.create_future()
            self._stores[loop] = future
            try:
                dsn = await asyncio.to_thread(lambda: self.dsn)
                # A producer's connections may sit idle through a database restart.
                store = Store(dsn, check_idle=CHECK_IDLE)
                await store.open()
            except BaseException as exc:
                del self._stores[loop]
                future.set_exception(exc)
                future.exception()  # retrieved: concurrent awaiters get it, nobody else must
                raise
            future.set_result(store)
        return await future

    async def _waiting(self) -> Waiters:
        """This loop's waiters: one LISTEN connection for all of them, opened on first use."""
        loop = asyncio.get_running_loop()
        store = await self._store()
        waiters = self._waiters.get(loop)
        if waiters is None:
            waiters = self._waiters[loop] = Waiters(store, self.dsn, self.poll_interval)
        return waiters

    async def aclose(self) -> None:
        """Close this loop's connections (and the embedded server, from `close()`)."""
        waiters = self._waiters.pop(asyncio.get_running_loop(), None)
        if waiters is not None:
            await waiters.close()
        future = self._stores.pop(asyncio.get_running_loop(), None)
        if future is not None and future.done() and not future.exception():
            await future.result().close()

    def close(self) -> None:
        """Release every connection and stop the embedded server, if this process started
        it (one another process runs is left running)."""
        if self._portal is not None:
            self._portal.call(self.aclose())
            self._portal.close()
            self._portal = None
        if self._embedded is not None:
            self._embedded.stop()
            self._embedded = None
            self._dsn = None
            self._migrated = False

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if self._portal is None:
                self._portal = _Portal()
            portal = self._portal
        return portal.call(coro)

    # -- producers -------------------------------------------------------------

    def _new_job(
        self,
        tool: str,
        payload: Any,
        key: str | None,
        priority: int | None,
        delay: float,
        concurrency_key: str | None = None,
        tenant: str | None = None,
        retain: float | None = None,
    ) -> NewJob:
        spec = self.tools.get(tool)
        if spec is None:
            known = ", ".join(sorted(self.tools)) or "none"
            raise UnknownTool(f"unknown tool {tool!r} (registered: {known})")
        payload = {} if payload is None else payload
        text = spec.validate(payload, limit=self._max_payload)
        if key is None:
            key = f"auto:{uuid.uuid4()}"
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_LENGTH or not key.isprintable():
            raise PayloadError(f"idempotency_key must be 1-{MAX_KEY_LENGTH} printable characters")
        priority = spec.priority if priority is None else check_priority(priority, MAX_PRIORITY)
        if not isinstance(delay, int | float) or not 0 <= delay <= MAX_DELAY:
            raise PolicyError(f"delay must be a number of seconds in [0, {MAX_DELAY:g}]")
        concurrency_key = self._concurrency_key(spec, payload, concurrency_key)
        if retain is None:
            retain = self.retain if spec.retain is None else spec.retain
        return NewJob(
            tool=tool,
            key=key,
            payload_json=text,
            payload_hash=fingerprint(tool + "\n" + text),
            max_attempts=spec.policy.retry.max_attempts,
            priority=priority,
            delay_ms=round(delay * 1000),
            payload_hmac=None
            if self._journal_key is None
            else payload_hmac(self._journal_key, tool, text),
            concurrency_key=concurrency_key,
            concurrency_limit=None
            if concurrency_key is None
            else self.limits.resolve(concurrency_key),
            tenant="" if tenant is None else check_tenant(tenant),
            quota=None if tenant is None else self.quotas.lookup(tenant),
            retain_ms=round(check_retain(retain) * 1000),
        )

    def _concurrency_key(
        self, spec: ToolSpec, payload: dict[str, Any], given: str | None
    ) -> str | None:
        """The call's key: the tool's own (fixed or from the payload), else the caller's."""
        rule = spec.concurrency_key
        if rule is None:
            return given
        if given is not None:
            raise PolicyError(f"tool {spec.name!r} sets its own concurrency key; a call cannot")
        if isinstance(rule, str):
            return rule
        try:
            return rule(payload)
        except Exception as exc:
            raise PayloadError(
                f"tool {spec.name!r}: concurrency_key could not be computed from the payload "
                f"({type(exc).__name__}: {exc})"
            ) from None

    async def enqueue(
        self,
        tool: str,
        payload: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        priority: int | None = None,
        delay: float = 0.0,
        concurrency_key: str | None = None,
        tenant: str | None = None,
        retain: float | None = None,
    ) -> Job:
        """Queue a call. A repeated key returns the existing job (``job.created`` is False);
        the same key with a different tool or payload raises IdempotencyConflict. Keys are
        unique per tenant: another tenant's job under the same key is never returned.

        ``priority`` defaults to the tool's. ``concurrency_key`` (e.g. ``"user:42"``)
        puts the call under the limit `limit` declared for that key; the limit itself
        always comes from the app, never from the caller. ``tenant`` (e.g. ``"acme"``)
        puts the call in that tenant's share of the line: workers take the queued jobs
        of all tenants in turn, and `quota` may cap how many each has queued.
        ``retain`` (seconds) keeps the job that long once it ended (default: the tool's,
        else the app's); while it is kept, its key returns it instead of running again.
        """
        new = self._new_job(
            tool, payload, idempotency_key, priority, delay, concurrency_key, tenant, retain
        )
        store = await self._store()
        chain = self.interceptors.chain()
        if chain is None:
            return await store.enqueue(new)
        return await chain.enqueue(new, store.enqueue)

    async def enqueue_many(
        self,
        tool: str,
        payloads: Sequence[dict[str, Any]],
        *,
        idempotency_keys: Sequence[str] | None = None,
        priority: int | None = None,
        tenant: str | None = None,
        retain: float | None = None,
    ) -> list[Enqueued]:
        """Queue many calls of one tool for one tenant in one transaction; returns each
        call's job id, key and whether it was created, in order. A repeated key returns
        its existing job; a key that names another call raises IdempotencyConflict, and
        over the tenant's quota (counting every call given, repeated keys included)
        QuotaExceeded: then nothing of the batch is queued."""
        if idempotency_keys is not None and len(idempotency_keys) != len(payloads):
            raise PayloadError("idempotency_keys must be as long as payloads")
        keys: Sequence[str | None] = idempotency_keys or [None] * len(payloads)
        jobs = [
            self._new_job(tool, p, k, priority, 0.0, tenant=tenant, retain=retain)
            for p, k in zip(payloads, keys, strict=True)
        ]
        store = await self._store()
        chain = self.interceptors.chain()
        if chain is None:
            return await store.enqueue_many(jobs)
        return await chain.enqueue_many(jobs, store.enqueue_many)

    # -- what an agent sees of its tools -----------------------------------------

    def tool_schema(self, tool: str | Callable[..., Any]) -> dict[str, Any]:
        """The tool's name, description (its docstring) and the JSON Schema of its
        parameters, in the shape LLM function calling uses:
        ``{"name": ..., "description": ..., "parameters": {...}}``. The schema is the
        one `enqueue` checks payloads against."""
        return self._spec_of(tool).contract.schema()

    def tool_schemas(self) -> list[dict[str, Any]]:
        """`tool_schema` of every registered tool, by name."""
        return [self.tools[name].contract.schema() for name in sorted(self.tools)]

    def output_schema(self, tool: str | Callable[..., Any]) -> dict[str, Any] | None:
        """The JSON Schema of the tool's result as an object (MCP's ``outputSchema``), or
        None when its result is untyped; a result that is not an object is its property
        ``result`` (see `structured_result`)."""
        return self._spec_of(tool).contract.output_schema()

    def structured_result(self, tool: str, result: Any) -> dict[str, Any] | None:
        """A succeeded job's ``result`` as the object `output_schema` describes (an untyped
        result: itself when it is an object, else None)."""
        spec = self.tools.get(tool)
        if spec is None:  # a job of a tool this app no longer has
            return result if isinstance(result, dict) else None
        return spec.contract.structured(result)

    def coerce_arguments(self, tool: str, arguments: Any) -> dict[str, Any]:
        """``arguments`` converted to what the tool's signature declares, leniently
        (pydantic's lax mode: ``"2"`` for an ``int``, ``"true"`` for a ``bool``), for a
        model whose trivial slip should not cost its retry. `enqueue` stays strict: pass
        it the returned dict. PayloadError listing every problem that remains."""
        spec = self._spec_of(tool)
        text = spec.contract.validate(arguments, "arguments", self._max_payload, lax=True)
        coerced: dict[str, Any] = json.loads(text)
        return coerced

    # -- operations ------------------------------------------------------------

    async def get(
        self, job_id: int | None = None, *, key: str | None = None, tenant: str | None = None
    ) -> Job:
        """The job with this id, or with this idempotency ``key`` of ``tenant`` (keys are
        unique per tenant). Given a tenant, a job of another tenant is not found."""
        store = await self._store()
        if (job_id is None) == (key is None):
            raise PolicyError("give a job id or key=..., exactly one")
        if key is not None:
            return await store.job_by_key(key, "" if tenant is None else check_tenant(tenant))
        assert job_id is not None
        job = await store.get_job(job_id)
        if tenant is not None and job.tenant != check_tenant(tenant):
            raise JobNotFound(f"no job {job_id}")
        return job

    async def list_jobs(
        self,
        *,
        state: str | None = None,
        tool: str | None = None,
        tenant: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        return await (await self._store()).list_jobs(
            state=state, tool=tool, tenant=tenant, limit=max(1, min(limit, 10_000))
        )

    async def search_jobs(self, **filters: Unpack[SearchFilters]) -> JobPage:
        """One page of jobs, newest first (by created_at, then id), every filter optional:
        ``job_id``, idempotency ``key`` (of ``tenant``, '' if not given), ``state``,
        ``tool``, ``tenant``, created in [``since``, ``until``), ``limit`` (1-500, 50).
        Pass the page's ``next_cursor`` as ``cursor`` for the next page: a keyset cursor,
        as fast a thousand pages deep as on the first. Rows carry no payload, result or
        error message. InvalidSearch on a bad filter or cursor, before anything is read."""
        search = job_search(**filters)
        return page_of(await (await self._store()).search_jobs(search), search)

    async def events(self, job_id: int) -> list[JournalEntry]:
        """The job's journal: claims, losses, rejections and outcomes, oldest first by the
        database's time, then id (its first 1,000 entries)."""
        return await (await self._store()).job_timeline(job_id)

    async def cancel(
        self,
        job_id: int,
        *,
        until: Literal["cancelled", "stopped"] = "cancelled",
        timeout: float | None = None,
    ) -> Job:
        """Cancel a queued, running or waiting job and return it. A running call is told at
        once (the cancel notifies its worker in the same transaction, and a worker whose
        LISTEN connection was away reads its calls again when it is back): an async tool
        gets CancelledError, a threaded one sees ``ctx.cancelled``, and ``ctx.ensure_owned()``
        raises JobCancelled. JobAlreadyEnded (a Conflict) if it had already ended: nothing
        changed, and the error carries the job.

        With ``until="cancelled"`` (the default) it returns once the job is cancelled in
        the database; the call may still be finishing a step (a few milliseconds with its
        worker connected). With ``until="stopped"`` it returns only once the call is over:
        its worker reported that the tool's task ended (or its thread returned), or the
        lease the call held when it was cancelled ran out on the database's clock (by
        then the worker's own deadline had passed, so ``ensure_owned()`` refuses every
        step). ``timeout`` bounds that wait (WaitTimeout; the job stays cancelled).
        """
        if until not in ("cancelled", "stopped"):
            raise PolicyError(f'until must be "cancelled" or "stopped", got {until!r}')
        deadline = Deadline.after(timeout)
        store = await self._store()
        cancelled = await store.cancel(job_id)
        if cancelled is None:
            job = await store.get_job(job_id)
            raise JobAlreadyEnded(f"job {job_id} already ended {job.state}; nothing changed", job)
        if until == "stopped" and cancelled.held_until is not None:
            waiters = await self._waiting()
            await waiters.until_stopped(cancelled.job, cancelled.held_until, deadline)
        return cancelled.job

    async def complete_waitpoint(self, token: str, answer: Any = None) -> Job:
        """Answer the waitpoint whose token a suspended call handed out: the answer (any
        JSON) reaches the tool, which is called again. Accepted once, while the waitpoint
        is open, its deadline (the database's clock) not passed and its job waits there:
        a second, late or unknown answer raises Conflict and writes nothing. Returns the
        job as the answer left it: queued again."""
        if not isinstance(token, str) or not 1 <= len(token) <= 200:
            raise Conflict("no open waitpoint has this token")
        store = await self._store()
        job = await store.complete_waitpoint(token_hash(token), answer_json(answer))
        if job is None:
            raise Conflict("no open waitpoint has this token (answered, timed out or unknown)")
        return job

    async def answer_waitpoint(
        self, job_id: int, name: str, answer: Any = None, *, tenant: str = ""
    ) -> Job:
        """Answer, as the job's caller, its open waitpoint ``name``: only one the tool
        declared ``answered_by="caller"`` (`Context.waitpoint`), and only for a job of
        ``tenant`` (the MCP server answers for its callers this way, with what their client
        replied). A waitpoint declared for whoever holds its token (a person, a service)
        is never answered here, whoever asks: Conflict, like a second, late or unknown
        answer, and nothing is written. Returns the job, queued again."""
        name = check_waitpoint_name(name)
        if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id < 2**63:
            raise Conflict(f"no job {job_id!r}")
        store = await self._store()
        job = await store.answer_caller_waitpoint(
            job_id, name, check_tenant(tenant) if tenant else "", answer_json(answer)
        )
        if job is None:
            raise Conflict(
                f"job {job_id} has no open waitpoint {name!r} its caller may answer "
                "(answered, timed out, unknown, or for whoever holds its token)"
            )
        return job

    async def derived_key(self, purpose: str) -> bytes:
        """A 32-byte key for ``purpose`` (e.g. ``"mcp-task"``), the same in every process on
        this database and different for every purpose: HMAC-SHA256 of the purpose under
        the secret the database keeps for tenure (migration 0008). For ids that must be
        unguessable and stable across replicas and restarts, such as MCP task ids."""
        if not isinstance(purpose, str) or not purpose or not purpose.isprintable():
            raise PolicyError("purpose must be printable text")
        secret = self._secret
        if secret is None:
            secret = self._secret = await (await self._store()).waitpoint_secret()
        return hmac.new(secret, f"tenure-key\0{purpose}".encode(), hashlib.sha256).digest()

    async def retry(self, job_id: int) -> Job:
        """Queue a failed or cancelled job again with one more attempt. The tool is called
        from the top with the answers it had and the steps it recorded (replayed, not run
        again); a waitpoint that closed unanswered (timed out, or cancelled with its job)
        is asked again, as is a sleep it was cancelled in (in full, from then); a sleep
        that ended stays over."""
        store = await self._store()
        retried = await store.retry(job_id)
        if retried is None:
            job = await store.get_job(job_id)
            raise PolicyError(f"job {job_id} is {job.state}; only failed or cancelled jobs retry")
        return retried

    @overload
    async def wait(
        self,
        job_id: int | None = None,
        *,
        key: str | None = None,
        tenant: str | None = None,
        timeout: float | None = None,
        result_type: None = None,
    ) -> Any: ...

    @overload
    async def wait(
        self,
        job_id: int | None = None,
        *,
        key: str | None = None,
        tenant: str | None = None,
        timeout: float | None = None,
        result_type: type[R],
    ) -> R: ...

    async def wait(
        self,
        job_id: int | None = None,
        *,
        key: str | None = None,
        tenant: str | None = None,
        timeout: float | None = None,
        result_type: Any = None,
    ) -> Any:
        """The job's result once it succeeded: its JSON form, or with ``result_type`` (a
        pydantic model, a dataclass, ``list[Report]``, ...) that object. JobFailed if it
        failed (with ``.code`` and ``.attempts``), JobCancelled if it was cancelled.

        Returns within milliseconds of the commit: the commit notifies in its own
        transaction (polling every ``poll_interval`` only where notifications cannot
        arrive). ``timeout`` None (the default) waits as long as the job takes: how long
        it may run is bounded by its tool's time limit and attempts, not by the waiter;
        give a timeout to bound how long it may also sit in the queue (WaitTimeout).
        """
        deadline = Deadline.after(timeout)
        store = await self._store()
        job = await reread(functools.partial(self.get, job_id, key=key, tenant=tenant), deadline)
        async for _ in (await self._waiting()).follow([job.id], deadline):
            pass
        return self._outcome(
            await reread(functools.partial(store.get_job, job.id), deadline), result_type
        )

    @staticmethod
    def _outcome(job: Job, result_type: Any = None) -> Any:
        if job.state == "cancelled":
            raise JobCancelled(f"job {job.id} was cancelled", job)
        if job.state != "succeeded":
            code = (job.error or {}).get("code", job.state)
            raise JobFailed(f"job {job.id} ended {job.state} ({code})", job)
        return job.result if result_type is None else load_result(job.result, result_type)

    async def as_completed(
        self, job_ids: Sequence[int], *, timeout: float | None = None
    ) -> AsyncIterator[Job]:
        """Each job, as it ends (succeeded, failed or cancelled), in the order they end;
        WaitTimeout if some have not ended within ``timeout`` seconds."""
        deadline = Deadline.after(timeout)
        store = await self._store()
        ids = list(dict.fromkeys(job_ids))
        async for status in (await self._waiting()).follow(ids, deadline):
            yield await reread(functools.partial(store.get_job, status.id), deadline)

    async def wait_many(self, job_ids: Sequence[int], *, timeout: float | None = None) -> list[Job]:
        """Every job once all have ended, in the order given (look at each one's state,
        result and error: a failure does not interrupt the others)."""
        ended = {job.id: job async for job in self.as_completed(job_ids, timeout=timeout)}
        return [ended[job_id] for job_id in job_ids]

    async def watch(
        self,
        job_id: int | None = None,
        *,
        key: str | None = None,
        tenant: str | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[Job]:
        """The job now, then again each time its state or progress changes (pushed by the
        database), ending with the job in its final state."""
        deadline = Deadline.after(timeout)
        store = await self._store()
        job = await reread(functools.partial(self.get, job_id, key=key, tenant=tenant), deadline)
        follow = (await self._waiting()).follow([job.id], deadline, progress=True)
        last: tuple[str, Any] | None = None
        async for _ in follow:
            now = await reread(functools.partial(store.get_job, job.id), deadline)
            if (now.state, now.progress) != last:  # the row may be ahead of the status read
                last = (now.state, now.progress)
                yield now

    async def watch_run(
        self, job_id: int, *, timeout: float | None = None
    ) -> AsyncIterator[RunEvent]:
        """A durable run's events (`RunEvent`), from its start until it ended: each model
        step with the usage the model reported, each tool call started and finished, its
        progress, each wait (a person's approval, a timer, its tools) and its output.
        Pushed by the database, like `watch`; WaitTimeout past ``timeout`` seconds."""
        store = await self._store()
        waiters = await self._waiting()
        async for event in follow_run(store, waiters, job_id, Deadline.after(timeout)):
            yield event

    async def summary(self) -> dict[str, int]:
        """Counts of jobs by state (``jobs_<state>``), of journal events by kind
        (``events_<kind>``) and of the owners they name (``owners_<kind>``: distinct job
        and token pairs), plus claims that took a lease over (``reclaims``) and duplicate
        commits."""
        return await (await self._store()).summary()

    # -- what an operator reads: never a payload, result or error message -------

    async def _probed_store(self) -> Store:
        """The store, once one plain connection got through: a refused or silent server
        fails within libpq's connect timeout, not after the pool's retries."""
        dsn = await asyncio.to_thread(lambda: self.dsn)  # may start the embedded server
        await probe(dsn)
        return await self._store()

    async def verify_schema(self) -> None:
        """ConfigError unless tenure's schema is in this database and up to date."""
        from ._observe._doctor import check_schema

        store = await self._probed_store()
        if await store.applied_migrations() is None:
            raise ConfigError(NO_SCHEMA)
        [schema] = await check_schema(store)
        if schema.status == "fail":
            raise ConfigError(f"tenure schema: {schema.detail}")

    async def job_detail(self, job_id: int) -> JobDetail:
        """The job as an operator may see it: state, owner, token, lease, error code,
        progress, key; never its payload, result or error message."""
        return await (await self._store()).job_detail(job_id)

    async def job_waitpoints(self, job_id: int) -> list[JobWaitpoint]:
        """The job's waitpoints: name, state, deadline, what each asks."""
        return await (await self._store()).job_waitpoints(job_id)

    async def find_events(
        self,
        *,
        kinds: Sequence[str] = (),
        job_id: int | None = None,
        tool: str | None = None,
        worker: str | None = None,
        since: float | datetime | None = None,
        limit: int = 100,
    ) -> list[JournalEntry]:
        """Journal rows, newest first (by the database's time, then id): of these ``kinds``
        (``job_reclaimed`` selects claims that took a job over from an expired lease), of a
        job, a tool or a worker, from ``since`` (seconds back, or a time) on."""
        query = EventQuery(
            kinds=tuple(k for k in kinds if k != "job_reclaimed"),
            reclaims="job_reclaimed" in kinds,
            job_id=job_id,
            tool=tool,
            worker=worker,
            since_ms=round(since * 1000) if isinstance(since, int | float) else None,
            since_at=since if isinstance(since, datetime) else None,
            limit=max(1, min(limit, 10_000)),
        )
        return await (await self._store()).find_events(query)

    async def prune_journal(
        self,
        older_than: float,
        *,
        dry_run: bool = False,
        on_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Delete journal rows older than ``older_than`` seconds, in bounded batches (or,
        with ``dry_run``, count them); how many. Jobs keep their own retention."""
        from ._maintenance._journal_pruner import JournalPruner, JournalPrunerConfig

        store = await self._store()
        pruner = JournalPruner(store, JournalPrunerConfig(retention=older_than))
        if dry_run:
            return await store.count_old_events(pruner.retention_ms, PRUNE_COUNT_CAP)
        return await pruner.run_once(on_batch)

    async def doctor(
        self, *, check_tools: bool = True, on_step: Callable[[str], None] | None = None
    ) -> list[Check]:
        """Check the server, schema, clock, this app's tool policies (unless not
        ``check_tools``) and the indexes and query plans; ``on_step(label)`` before each. A server
        that cannot be reached is one failed check, not an exception."""
        from ._observe._doctor import Check, doctor_steps

        try:
            store = await self._probed_store()
        except (StoreError, OSError) as exc:
            return [Check("connectivity", "fail", f"{type(exc).__name__}: {one_line(exc)}")]
        checks: list[Check] = []
        for label, run in doctor_steps(store, self if check_tools else None):
            if on_step is not None:
                on_step(label)
            checks.extend(await run())
        return checks

    async def list_workers(self, *, limit: int = 1000) -> list[WorkerInfo]:
        """Registered worker processes, alive first, then silent, then stopped: name, host,
        pid, version, tools, concurrency, when started and last seen, and the leases each
        holds (counted from the jobs it owns, never stored twice)."""
        store = await self._store()
        return await store.list_workers(max(1, min(limit, 10_000)), WORKER_LEASE_CAP)

    async def database_time(self) -> datetime:
        """The database's clock, the one every lease is judged by."""
        return await (await self._store()).db_now()

    # -- pipelines -------------------------------------------------------------

    def pipeline(
        self, name: str, stages: Sequence[Stage], *, start: str | Sequence[str] | None = None
    ) -> Pipeline:
        """Declare a pipeline of stages (see `Stage`); checked now against the registered tools.

        Register the tools first. ``start`` names the first stage(s); default: the
        first in ``stages``. Each run keeps its own copy of the graph.
        """
        if name in self.pipelines:
            raise PolicyError(f"pipeline {name!r} is already declared")
        pipeline = build_pipeline(name, stages, start, self.tools)
        self.pipelines[name] = pipeline
        return pipeline

    async def start_run(
        self,
        pipeline: str | Pipeline,
        input: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Run:
        """Start a run; the run and its first stages' jobs are written in one transaction.

        ``input`` is the run's first context: each stage's tool is called with the
        entries it declares, and a stage's dict result is merged in for the stages
        after it. A repeated key returns the existing run (``run.created`` is False);
        the same key with another pipeline or input raises IdempotencyConflict.
        """
        if isinstance(pipeline, str):
            found = self.pipelines.get(pipeline)
            if found is None:
                known = ", ".join(sorted(self.pipelines)) or "none"
                raise PolicyError(f"unknown pipeline {pipeline!r} (declared: {known})")
            pipeline = found
        transitions = Transitions(await self._store())
        run_id, created = await transitions.start(pipeline, input, run_key(idempotency_key))
        run = await transitions.get(run_id)
        return run if created else replace(run, created=False)

    async def get_run(self, run_id: int) -> Run:
        """The run with every stage execution and its job (RunNotFound if there is none)."""
        return await Transitions(await self._store()).get(run_id)

    async def wait_run(self, run_id: int, timeout: float = 60.0) -> Run:
        """The run once it succeeded; RunFailed if it failed or was cancelled."""

        async def probe() -> tuple[bool, Any]:
            row = await (await self._store()).get_run(run_id)
            if row is None or row.state == "running":
                return False, "running" if row else "missing"
            run = await self.get_run(run_id)
            if run.state != "succeeded":
                code = (run.error or {}).get("code", run.state)
                raise RunFailed(f"run {run_id} ended {run.state} ({code})", run)
            return True, run

        result: Run = await _poll(probe, timeout, f"run {run_id}")
        return result

    async def record_verdict(self, run_id: int, stage: str, token: int, verdict: Verdict) -> Run:
        """Record a gate's verdict from outside a worker (e.g. a gate service's callback).

        ``token`` is the fencing token of the gate's job (``ctx.token`` in the tool that
        handed the review out). The verdict is accepted only while that job still holds
        the open stage; a late or duplicate verdict raises Conflict (an HTTP surface
        answers 409) and writes nothing. Accepted, the job ends with the verdict and the
        next stages are queued in the same transaction; the tool still waiting in the
        worker loses its lease and stops.
        """
        transitions = Transitions(await self._store())
        await transitions.record_verdict(run_id, stage, token, verdict)
        return await transitions.get(run_id)

    async def dispatch_plan(
        self, plan: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> Run:
        """Run a plan a model proposed — ``[{"tool": ..., "arguments": {...}}, ...]`` — in order.

        Every step is checked against the registered tools first: an unknown tool,
        arguments its signature does not take, or a ``time_limit`` above its cap is
        reported (all steps' problems at once) as PlanRejected, and nothing is queued.
        Keys, leases, attempts and backoff come from tenure and the tools' policies.
        """
        pipeline = plan_pipeline(plan, self.tools)
        return await self.start_run(
            pipeline, {"plan": [dict(step) for step in plan]}, idempotency_key=idempotency_key
        )

    # -- the same, for synchronous callers -------------------------------------
    # Each is the async method above run on a private event loop thread: generated, not
    # written twice (tests/unit/test_public_api.py checks every coroutine has its twin).

    enqueue_sync = _blocking(enqueue)
    enqueue_many_sync = _blocking(enqueue_many)
    get_sync = _blocking(get)
    list_jobs_sync = _blocking(list_jobs)
    search_jobs_sync = _blocking(search_jobs)
    events_sync = _blocking(events)
    cancel_sync = _blocking(cancel)
    complete_waitpoint_sync = _blocking(complete_waitpoint)
    answer_waitpoint_sync = _blocking(answer_waitpoint)
    derived_key_sync = _blocking(derived_key)
    retry_sync = _blocking(retry)
    wait_sync = _blocking(wait)
    wait_many_sync = _blocking(wait_many)
    summary_sync = _blocking(summary)
    start_run_sync = _blocking(start_run)
    get_run_sync = _blocking(get_run)
    wait_run_sync = _blocking(wait_run)
    record_verdict_sync = _blocking(record_verdict)
    dispatch_plan_sync = _blocking(dispatch_plan)
    verify_schema_sync = _blocking(verify_schema)
    job_detail_sync = _blocking(job_detail)
    job_waitpoints_sync = _blocking(job_waitpoints)
    find_events_sync = _blocking(find_events)
    prune_journal_sync = _blocking(prune_journal)
    doctor_sync = _blocking(doctor)
    list_workers_sync = _blocking(list_workers)
    database_time_sync = _blocking(database_time)


async def _poll(probe: Callable[[], Awaitable[tuple[bool, Any]]], timeout: float, what: str) -> Any:
    """Ask ``probe`` until it says done (returning its value), backing off to 0.25 s.

    While not done, the probe's value is the state shown in the WaitTimeout message.
    """
    if not 0 <= timeout <= MAX_WAIT:
        raise PolicyError(f"timeout must be in [0, {MAX_WAIT:g}] s")
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        done, value = await probe()
        if done:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(f"{what} is still {value} after {timeout:g} s")
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, 0.25)


def require_dsn(dsn: str | None) -> str:
    if not dsn:
        raise ConfigError("no DSN given")
    return check_dsn(dsn)
