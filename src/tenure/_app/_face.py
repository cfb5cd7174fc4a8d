"""App: a thin face over its three parts. The tool **registry** (``app.registry``: what a
worker runs), the **client** (App *is* one: enqueue, get, wait, watch, cancel, answer a
waitpoint, pipelines) and the **admin** (``app.admin``: an operator's reads and actions).
``app.sync`` is the same, blocking."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from .._dsn import dsn_from_environment
from .._errors import PolicyError
from .._intercept import Interceptor
from .._observe._journal import journal_key as journal_key_from
from .._payload import MAX_PAYLOAD_BYTES
from .._registry import ToolSpec
from ._admin import Admin
from ._client import Client
from ._connection import Connection
from ._registry import DEFAULT_RETAIN, Registry, check_retain
from ._sync import SyncApp

if TYPE_CHECKING:
    from .._worker._worker import Worker

T = TypeVar("T")
P = ParamSpec("P")


def _registers(method: Callable[Concatenate[Registry, P], T]) -> Callable[Concatenate[App, P], T]:
    """An App method that is its registry's (same arguments, same documentation)."""

    @functools.wraps(method)
    def registers(self: App, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return method(self.registry, *args, **kwargs)

    return registers


class App(Client):
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

    Its parts: ``app.registry`` (the tools, their schemas and policies), ``app.admin``
    (what an operator reads and does: jobs, the journal, workers, doctor, migrate,
    prune) and ``app.sync`` (every coroutine here and on the admin, blocking:
    ``app.sync.enqueue(...)``, ``app.sync.admin.jobs()``).
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
        journal = journal_key_from(journal_key)
        retain = check_retain(retain)
        if (
            isinstance(poll_interval, bool)
            or not isinstance(poll_interval, int | float)
            or not 0.01 <= poll_interval <= 3600
        ):
            raise PolicyError(f"poll_interval must be in [0.01, 3600] s, got {poll_interval!r}")
        given = dsn if dsn is not None else dsn_from_environment()
        if isinstance(signing_key, str):
            signing_key = signing_key.encode()
        if signing_key is None and os.environ.get("TENURE_SIGNING_KEY"):
            signing_key = os.environ["TENURE_SIGNING_KEY"].encode()
        if not 1 <= max_payload_bytes <= MAX_PAYLOAD_BYTES:
            raise PolicyError(f"max_payload_bytes must be in [1, {MAX_PAYLOAD_BYTES}]")
        connection = Connection(given, migrate=migrate, poll_interval=float(poll_interval))
        self.registry = Registry(
            connection,
            signing_key=signing_key,
            max_payload=max_payload_bytes,
            journal_key=journal,
            retain=retain,
            interceptors=interceptors,
        )
        super().__init__(self.registry, connection)
        self.admin = Admin(self.registry, connection, self)
        self.sync = SyncApp(self, self.admin, connection)

    # -- registration: the registry's ------------------------------------------

    tool = _registers(Registry.tool)
    """``@app.tool(...)``: register a tool with its policy (`Registry.tool`, same arguments)."""
    limit = _registers(Registry.limit)
    """At most N calls with a matching concurrency key at once (`Registry.limit`)."""
    quota = _registers(Registry.quota)
    """At most N queued jobs per matching tenant (`Registry.quota`)."""
    schedule = _registers(Registry.schedule)
    """Call a tool periodically, by cron or every N seconds (`Registry.schedule`)."""
    periodic = _registers(Registry.periodic)
    """Decorator form of `schedule`, above ``@app.tool`` (`Registry.periodic`)."""
    pipeline = _registers(Registry.pipeline)
    """Declare a pipeline of stages over the registered tools (`Registry.pipeline`)."""

    @property
    def tools(self) -> Mapping[str, ToolSpec]:
        """The registered tools, by name."""
        return self.registry.tools

    def worker(self, **options: Any) -> Worker:
        """A Worker for this app's tools (see `Worker` for the options)."""
        from .._worker._worker import Worker

        return Worker(self.registry, **options)

    # -- the database ------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """The server's DSN; without one, the embedded server's (and migrates) on first use.

        That is the server another process of this user already runs in tenure's data
        dir (a `tenure worker` in another terminal), else one this process starts and
        stops on close. Workers on other machines never see it: which one it is, is said
        on stderr (once per process).
        """
        return self._connection.dsn

    def set_dsn(self, dsn: str) -> None:
        """Point this app at ``dsn`` before it first connects (``tenure --dsn``, for an app
        whose module built it from the environment). ConfigError once it is connected."""
        self._connection.set_dsn(dsn)

    @property
    def configured_dsn(self) -> str | None:
        """The DSN this app was given (argument, ``TENURE_DSN``, ``TENURE_DSN_FILE``), or None
        when it uses (or will start) the embedded server."""
        return self._connection.configured_dsn

    @property
    def auto_migrate(self) -> bool:
        """Whether first use migrates the schema (read-only commands turn it off)."""
        return self._connection.auto_migrate

    @auto_migrate.setter
    def auto_migrate(self, value: bool) -> None:
        self._connection.auto_migrate = value

    async def aclose(self) -> None:
        """Close this loop's connections (and the embedded server, from `close()`)."""
        await self._connection.aclose()

    def close(self) -> None:
        """Release every connection and stop the embedded server, if this process started
        it (one another process runs is left running)."""
        self._connection.close()
