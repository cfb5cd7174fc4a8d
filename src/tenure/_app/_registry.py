"""The App's tool registry: tools, limits, quotas, schedules, pipelines and the keys
its calls are checked and signed with. The worker sees it (as `ToolRegistry`), never
the App."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack

from .._errors import PayloadError, PolicyError, UnknownTool
from .._intercept import Interceptor, Interceptors
from .._maintenance._cron import Cron
from .._maintenance._scheduler import CatchUp, Every, Schedule
from .._observe._journal import payload_hmac
from .._payload import fingerprint
from .._pipeline._model import Pipeline, Stage, build_pipeline
from .._policy import MAX_BACKOFF, LeasePolicy, RetryPolicy, ToolPolicy
from .._registry import (
    ConcurrencyLimits,
    KeyRule,
    TenantQuotas,
    ToolSpec,
    check_priority,
    check_tenant,
    make_spec,
)
from .._store import NewJob

if TYPE_CHECKING:
    from ._connection import Connection

F = TypeVar("F", bound=Callable[..., Any])

MAX_KEY_LENGTH = 500
MAX_PRIORITY = 100
MAX_DELAY = 30 * 24 * 3600.0
DAY = 24 * 3600.0
DEFAULT_RETAIN = 7 * DAY
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


class Registry:
    """The tools an App registers and everything their calls are checked against.

    ``app.registry``: the `ToolRegistry` a `Worker` runs, and what an agent is shown of
    the tools (`tool_schema`, `output_schema`, `coerce_arguments`, ...). `App.tool`,
    `App.limit`, `App.quota`, `App.schedule` and `App.pipeline` register here.
    """

    def __init__(
        self,
        connection: Connection,
        *,
        signing_key: bytes | None,
        max_payload: int,
        journal_key: bytes | None,
        retain: float,
        interceptors: Sequence[Interceptor] = (),
    ) -> None:
        self._connection = connection
        # Around its enqueues and its workers' claims, calls and commits (tenure._intercept).
        self.interceptors = Interceptors(interceptors)
        self.signing_key = signing_key
        self._max_payload = max_payload
        self._journal_key = journal_key
        self.retain = retain
        self.tools: dict[str, ToolSpec] = {}
        self.pipelines: dict[str, Pipeline] = {}
        self.limits = ConcurrencyLimits()
        self.quotas = TenantQuotas()
        self.schedules: dict[str, Schedule] = {}

    @property
    def dsn(self) -> str:
        """The App's database (see `App.dsn`)."""
        return self._connection.dsn

    def retention(self, tool: str) -> float:
        """Seconds an ended job of ``tool`` is kept: the tool's ``retain``, else the app's."""
        spec = self.tools.get(tool)
        return self.retain if spec is None or spec.retain is None else spec.retain

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
        spec = self.spec_of(tool)
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
        self.schedule_job(schedule, "periodic:check")  # the payload must fit the tool now
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

    def spec_of(self, tool: str | Callable[..., Any]) -> ToolSpec:
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

    def schedule_job(self, schedule: Schedule, key: str) -> NewJob:
        """The job of one slot: the tool's own priority, limits and policy."""
        return self.new_job(schedule.tool, dict(schedule.payload), key, None, 0.0)

    def new_job(
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

    # -- what an agent sees of its tools -----------------------------------------

    def tool_schema(self, tool: str | Callable[..., Any]) -> dict[str, Any]:
        """The tool's name, description (its docstring) and the JSON Schema of its
        parameters, in the shape LLM function calling uses:
        ``{"name": ..., "description": ..., "parameters": {...}}``. The schema is the
        one `enqueue` checks payloads against."""
        return self.spec_of(tool).contract.schema()

    def tool_schemas(self) -> list[dict[str, Any]]:
        """`tool_schema` of every registered tool, by name."""
        return [self.tools[name].contract.schema() for name in sorted(self.tools)]

    def output_schema(self, tool: str | Callable[..., Any]) -> dict[str, Any] | None:
        """The JSON Schema of the tool's result as an object (MCP's ``outputSchema``), or
        None when its result is untyped; a result that is not an object is its property
        ``result`` (see `structured_result`)."""
        return self.spec_of(tool).contract.output_schema()

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
        spec = self.spec_of(tool)
        text = spec.contract.validate(arguments, "arguments", self._max_payload, lax=True)
        coerced: dict[str, Any] = json.loads(text)
        return coerced
