"""How the store reaches PostgreSQL: connection options, the pool, deadlines, statements.

Everything that is about a connection rather than about a table lives here:
libpq settings, prepared statements on or off (a pooler in transaction mode),
the pool that reconnects promptly after an outage and checks a producer's idle
connections, the deadline that turns a statement the network swallowed into an
error, and the named statements themselves (`statement`), loaded once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
import select
import socket
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields
from types import MappingProxyType
from typing import Any, LiteralString, TypeVar, cast

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from .._dsn import check_dsn as check_dsn
from .._errors import ConfigError, TenureError
from ._errors import store_error
from ._migrate import discover
from ._migrate import migrate as apply_migrations
from ._queries import load_query_folder

# The most jobs one claim takes, and the most the `claim` statement as written takes: its
# queued branch is bounded by a constant (why: queries/jobs.sql); `claim_large` is the same
# statement bounded by MAX_CLAIM.
MAX_CLAIM = 1000
SMALL_CLAIM = 100


def _queued_bound(jobs: int) -> LiteralString:
    return f"LIMIT {jobs}\n    FOR UPDATE SKIP LOCKED\n), picked AS ("


def _with_large_claim(
    queries: Mapping[str, LiteralString],
) -> MappingProxyType[str, LiteralString]:
    claim, small = queries["claim"], _queued_bound(SMALL_CLAIM)
    if claim.count(small) != 1:
        raise ValueError(
            f"the claim's queued branch lost its bound of {SMALL_CLAIM} (queries/jobs.sql)"
        )
    return MappingProxyType(
        {**queries, "claim_large": claim.replace(small, _queued_bound(MAX_CLAIM))}
    )


QUERIES = _with_large_claim(load_query_folder("tenure._store.queries"))
T = TypeVar("T")
MIGRATIONS_PACKAGE = "tenure._store.migrations"
MIGRATIONS_TABLE = "tenure_migrations"
MIGRATION_LOCK = 0x7E2E_0001
# How long a claiming transaction that admits keyed jobs may sit idle holding its keys.
ADMIT_IDLE_TIMEOUT_MS = 5000
# A claim takes milliseconds; one without an answer after this long was swallowed by
# the network. Rows it may have claimed expire with their lease and are reclaimed.
CLAIM_TIMEOUT = 2.0
# Likewise for a batch of fenced commits: every later commit of the worker waits
# behind it, so a swallowed answer must not hold them for long. (The outcome of
# such a commit is uncertain; the completer checks the row before calling it lost.)
FINISH_TIMEOUT = 2.0
# How long a statement's cancel request may take to reach the server (abandon_statement).
CANCEL_TIMEOUT = 0.5
# The longest pause between two attempts to reconnect a pool to a server that went away.
MAX_RECONNECT_DELAY = 0.25
# A bulk enqueue of at least this many jobs analyzes tenure_jobs in its own transaction
# when it outnumbers what the planner believes is there; the lock wait is bounded.
BULK_ANALYZE_MIN = 1000
BULK_ANALYZE_LOCK_MS = 100

# libpq settings for every tenure connection: fail fast on connect, notice a dead
# peer through TCP keepalives, and abort writes the network swallows.
CONNECT_OPTIONS: dict[str, Any] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "application_name": "tenure",
}


def prepared_statements() -> bool:
    """Whether tenure's connections prepare their statements (the default: every statement
    is prepared on first use). ``TENURE_PREPARED_STATEMENTS=off`` turns them off for a
    pooler in transaction mode (PgBouncer before 1.21, or without max_prepared_statements),
    which hands each transaction a server connection that never saw the PREPARE."""
    value = os.environ.get("TENURE_PREPARED_STATEMENTS", "on").strip().lower()
    if value not in ("on", "off", "1", "0", "true", "false", "yes", "no"):
        raise ConfigError(f"TENURE_PREPARED_STATEMENTS must be on or off, got {value!r}")
    return value in ("on", "1", "true", "yes")


def connect_options() -> dict[str, Any]:
    """CONNECT_OPTIONS plus the prepared-statement setting, for every pooled or heartbeat
    connection; statements then run with psycopg's default ``prepare=None``."""
    return {**CONNECT_OPTIONS, "prepare_threshold": 0 if prepared_statements() else None}


def statement(name: str) -> LiteralString:
    return QUERIES[name]


def known_migrations() -> dict[int, str]:
    """Every migration this version of tenure ships: version → name."""
    return {m.version: m.name for m in discover(MIGRATIONS_PACKAGE)}


def migrate(dsn: str) -> list[int]:
    """Apply tenure's pending migrations; safe to run twice and concurrently. A role that
    may not create tables gets a ConfigError saying who may, unless nothing is pending."""
    with typed_errors(connecting=True):
        conn = psycopg.connect(check_dsn(dsn), autocommit=True, **CONNECT_OPTIONS)
    with conn, typed_errors():
        try:
            return apply_migrations(conn, MIGRATIONS_PACKAGE, MIGRATIONS_TABLE, MIGRATION_LOCK)
        except psycopg.errors.InsufficientPrivilege:
            raise ConfigError(
                "this database role may not migrate tenure's schema (permission denied): run "
                "`tenure migrate` as the schema's owner (docs: operations/roles.md)"
            ) from None


def from_row(cls: type[T], row: dict[str, Any]) -> T:
    return cls(**{f.name: row[f.name] for f in fields(cls)})  # type: ignore[arg-type]


async def rows_of(
    conn: psycopg.AsyncConnection[Any], name: str, params: dict[str, Any]
) -> list[dict[str, Any]]:
    cursor = await conn.cursor(row_factory=dict_row).execute(statement(name), params)
    return await cursor.fetchall() if cursor.description else []


def typed(exc: psycopg.Error, *, connecting: bool = False) -> TenureError:
    """The tenure error for a database error by the one table (`_errors.RULES`), its verdict
    included (``connecting``: see `store_error`)."""
    error = store_error(exc, connecting=connecting)
    assert error is not None  # every psycopg error has a rule (DEFAULT at worst)
    return error


@contextlib.contextmanager
def typed_errors(*, connecting: bool = False) -> Iterator[None]:
    """Every database error raised inside, as its tenure error (a StoreError with its
    verdict, or QuotaExceeded), the database's own error kept as ``__cause__``. Anything
    else (a tenure error, a bug, a cancel) passes through as it is."""
    try:
        yield
    except psycopg.Error as exc:
        raise typed(exc, connecting=connecting) from exc


F = TypeVar("F", bound=Callable[..., Any])


def typed_method(fn: F) -> F:
    """``fn`` (a coroutine function or a plain one) raising its database errors as tenure
    errors (`typed_errors`): the one wrapping point of the store's boundary, applied to
    every public method of every group of statements (`StoreBase.__init_subclass__`), of
    `RunTransaction` and of `LeaseConnection`."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except psycopg.Error as exc:
                raise typed(exc) from exc

        return cast(F, run)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except psycopg.Error as exc:
            raise typed(exc) from exc

    return cast(F, call)


def typed_methods(cls: type[T], *, sync: bool = False) -> type[T]:
    """Wrap every public coroutine method ``cls`` itself defines (with ``sync``, every public
    plain one too) with `typed_method`. Private ones are left alone: only the public ones
    call them, so each call across the boundary passes exactly one wrapper."""
    for name, value in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(value):
            continue
        if sync or inspect.iscoroutinefunction(value):
            setattr(cls, name, typed_method(value))
    return cls


async def probe(dsn: str) -> None:
    """Open one plain connection and close it: a refused or silent server fails within
    libpq's connect timeout (as a StoreError whose verdict is ``retry``: nothing was sent),
    not after a pool's retries."""
    with typed_errors(connecting=True):
        conn = await psycopg.AsyncConnection.connect(check_dsn(dsn), **CONNECT_OPTIONS)
        await conn.close()


def as_jsonb(text: str | None) -> Jsonb | None:
    return None if text is None else Jsonb(text, dumps=str)


class PromptReconnect(AttemptWithBackoff):
    """psycopg_pool's reconnection schedule, made prompt: a worker must be back within a
    fraction of a second of the server answering again, not after a backoff that had
    grown to seconds during the outage (+0.02, +1.0, +2.8 s was measured)."""

    INITIAL_DELAY = 0.05
    DELAY_BACKOFF = 1.5

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, MAX_RECONNECT_DELAY)


class Pool(AsyncConnectionPool[psycopg.AsyncConnection[Any]]):
    """The pool every Store uses: psycopg_pool's, reconnecting on `PromptReconnect`'s
    schedule. (``_add_connection`` is the pool's own hook for each new connection; the
    tests pin its behaviour, so an upgrade that changes it fails loudly.)"""

    async def _add_connection(
        self, attempt: AttemptWithBackoff | None, growing: bool = False
    ) -> None:
        if attempt is None:
            attempt = PromptReconnect(timeout=self.reconnect_timeout)
        await super()._add_connection(attempt, growing)


def readable(conn: psycopg.AsyncConnection[Any]) -> bool:
    try:
        fd = conn.pgconn.socket
    except psycopg.Error:
        return True
    return bool(select.select([fd], [], [], 0)[0])


# When each pooled connection was last handed out (for `Store`'s ``check_idle``).
last_used: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = (
    weakref.WeakKeyDictionary()
)


@contextlib.contextmanager
def deadline(conn: psycopg.AsyncConnection[Any], timeout: float | None) -> Iterator[None]:
    """Turn a statement the network swallowed into a connection error after ``timeout``.

    Cancelling the awaiting task instead would make psycopg send a cancel request
    and then wait for an answer that may never come; shutting the socket down
    fails the statement at once, and the pool discards the broken connection.
    """
    if timeout is None:
        yield
        return
    handle = asyncio.get_running_loop().call_later(timeout, shutdown_socket, conn)
    try:
        yield
    finally:
        handle.cancel()


def abandon_statement(conn: psycopg.Connection[Any]) -> None:
    """A synchronous statement past its deadline: have the server cancel it, then shut the
    socket down.

    Shutting the socket alone frees the waiting thread, but the server goes on running the
    statement until it next writes to the client: one waiting for a row lock or a stalled
    disk keeps the locks it took, and the next statement of the same process (a heartbeat
    of the same session) queues behind it, times out in turn, and leaves one more. The
    cancel request travels on a connection of its own and is given up after
    ``CANCEL_TIMEOUT`` (a server the network swallowed cannot take it anyway)."""
    try:
        conn.cancel_safe(timeout=CANCEL_TIMEOUT)
    except (psycopg.Error, OSError):
        pass  # unreachable, or the statement ended meanwhile: the socket still goes
    shutdown_socket(conn)


def shutdown_socket(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Unblock a query stuck on a silent network by shutting the socket down."""
    try:
        fd = conn.pgconn.socket
    except psycopg.Error:
        return
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


def server_address(dsn: str) -> tuple[str, int]:
    """Where ``dsn`` connects: (host or Unix socket dir, port), asked from a live connection
    (a fault proxy's upstream)."""
    with typed_errors(connecting=True):
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
    with conn, typed_errors():
        return conn.info.host, conn.info.port


def fresh_database(server_dsn: str, name: str) -> str:
    """Drop and create database ``name`` on the server of ``server_dsn`` (the demo's own
    databases); its DSN. Identifiers cannot be bound parameters, so the name is quoted
    as one (psycopg.sql.Identifier), never formatted in."""
    with typed_errors(connecting=True):
        conn = psycopg.connect(server_dsn, autocommit=True)
    with conn, typed_errors():
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(server_dsn)
    params["dbname"] = name
    return make_conninfo("", **params)
