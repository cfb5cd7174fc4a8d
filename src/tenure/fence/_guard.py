"""FenceGuard and SyncFenceGuard: thin async and sync shells over the plans in ``_core``.

**Single-phase (default)** — for effects in the receiver's own database. The
fence check, the key's reservation, the caller's effect (written through
``slot.conn``) and the recorded response share one transaction. The scope's
row stays locked until it commits, so:

- a concurrent duplicate of the key waits, then replays the first response;
- a lower token cannot commit after a higher one was accepted;
- a crash anywhere aborts the transaction, so an ``in_progress`` row is never
  left behind — the retry simply applies the effect.

The price: requests of one scope (one job) are applied one at a time, and a
duplicate waiting longer than ``lock_timeout`` gets RequestInProgress. The
timeout is set for the whole transaction, so it also bounds the lock waits of
the caller's own statements on ``slot.conn``.

**Two-phase** (``two_phase=True``) — for effects outside that database (a
payment provider, a mail server). The reservation commits first, the effect
runs with no transaction open, and the response is recorded in a second
transaction. Duplicates arriving meanwhile get RequestInProgress at once. The
trade-offs: the fence is checked at admission, not when the effect lands (a
higher token may be admitted while a slow effect is still in flight), and if
the process dies or the block raises after admission, the key stays
``in_progress`` — the effect may or may not have happened, and the kit never
guesses. Later duplicates keep getting RequestInProgress until someone who can
check the outside system resolves the row (its ``created_at`` and ``token``
say which attempt made it). Call ``slot.release()`` when you *know* nothing
was applied so a retry may apply it.

A guard configured with secrets verifies the request's signature before it
touches the database, so a forged huge token cannot raise the high-water mark
and lock honest writers out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ._core import (
    FenceRequest,
    FenceSlot,
    OperationRecord,
    Plan,
    StoredResponse,
    admit,
    highest_token,
    lookup,
    secrets_tuple,
)
from ._schema import QUERIES
from ._signing import verify_signature

T = TypeVar("T")

AsyncConn = psycopg.AsyncConnection[Any]
SyncConn = psycopg.Connection[Any]


class _GuardConfig:
    """What both shells share: the secrets, the lock timeout and the pre-database checks."""

    def __init__(self, secret: bytes | Sequence[bytes] | None, lock_timeout: float | None) -> None:
        if lock_timeout is not None and not lock_timeout > 0:
            raise ValueError(f"lock_timeout must be positive seconds or None, got {lock_timeout}")
        self._secrets = secrets_tuple(secret)
        self._lock_timeout_ms = None if lock_timeout is None else max(1, round(lock_timeout * 1000))

    @property
    def signed(self) -> bool:
        """True if requests must carry a valid signature."""
        return bool(self._secrets)

    def _request(
        self, scope: str, token: int, key: str, fingerprint: str, signature: str | None
    ) -> FenceRequest:
        request = FenceRequest(scope=scope, token=token, key=key, fingerprint=fingerprint)
        if self._secrets:
            verify_signature(self._secrets, scope, token, key, signature)
        return request

    def _admit(self, request: FenceRequest) -> Plan[StoredResponse | None]:
        return admit(request, self._lock_timeout_ms)


class FenceGuard(_GuardConfig):
    """The async guard, on an AsyncConnectionPool (shared, not closed by us) or a DSN.

    With a DSN the guard owns its pool: ``async with FenceGuard(dsn) as guard``
    or ``await guard.open()`` / ``await guard.close()``.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[Any] | str,
        *,
        secret: bytes | Sequence[bytes] | None = None,
        lock_timeout: float | None = 5.0,
        max_connections: int = 10,
    ) -> None:
        super().__init__(secret, lock_timeout)
        self._owns_pool = isinstance(pool, str)
        self._pool: AsyncConnectionPool[Any] = (
            AsyncConnectionPool(pool, min_size=1, max_size=max_connections, open=False)
            if isinstance(pool, str)
            else pool
        )

    async def open(self) -> None:
        if self._owns_pool:
            await self._pool.open(wait=True)

    async def close(self) -> None:
        if self._owns_pool:
            await self._pool.close()

    async def __aenter__(self) -> FenceGuard:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @asynccontextmanager
    async def fenced(
        self,
        *,
        scope: str,
        token: int,
        key: str,
        fingerprint: str,
        signature: str | None = None,
        two_phase: bool = False,
    ) -> AsyncIterator[FenceSlot[AsyncConn]]:
        """Admit one fenced request (see the module docstring for the two modes).

        Raises StaleFence, FingerprintMismatch, RequestInProgress, BadSignature
        or MalformedFence on entry; otherwise yields the slot.
        """
        request = self._request(scope, token, key, fingerprint, signature)
        if two_phase:  # no connection is held while the outside effect runs
            slot = FenceSlot[AsyncConn](request, await self._run(self._admit(request)), None)
            yield slot
            closing = slot.closing_plan()
            if closing is not None:
                await self._run(closing)
        else:
            async with self._pool.connection() as conn, conn.transaction() as tx:
                replay = await _drive_async(conn, self._admit(request))
                slot = FenceSlot[AsyncConn](request, replay, conn)
                yield slot
                if slot.released:
                    raise psycopg.Rollback(tx)
                closing = slot.closing_plan()
                if closing is not None:
                    await _drive_async(conn, closing)

    async def lookup(self, key: str) -> OperationRecord | None:
        """The stored state of an idempotency key, or None if it was never applied."""
        return await self._run(lookup(key))

    async def highest_token(self, scope: str) -> int | None:
        """The highest token accepted for ``scope``, or None if it was never seen."""
        return await self._run(highest_token(scope))

    async def _run(self, plan: Plan[T]) -> T:
        async with self._pool.connection() as conn, conn.transaction():
            return await _drive_async(conn, plan)


class SyncFenceGuard(_GuardConfig):
    """The same guard for threaded services, on a ConnectionPool or a DSN."""

    def __init__(
        self,
        pool: ConnectionPool[Any] | str,
        *,
        secret: bytes | Sequence[bytes] | None = None,
        lock_timeout: float | None = 5.0,
        max_connections: int = 10,
    ) -> None:
        super().__init__(secret, lock_timeout)
        self._owns_pool = isinstance(pool, str)
        self._pool: ConnectionPool[Any] = (
            ConnectionPool(pool, min_size=1, max_size=max_connections, open=False)
            if isinstance(pool, str)
            else pool
        )

    def open(self) -> None:
        if self._owns_pool:
            self._pool.open(wait=True)

    def close(self) -> None:
        if self._owns_pool:
            self._pool.close()

    def __enter__(self) -> SyncFenceGuard:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def fenced(
        self,
        *,
        scope: str,
        token: int,
        key: str,
        fingerprint: str,
        signature: str | None = None,
        two_phase: bool = False,
    ) -> Iterator[FenceSlot[SyncConn]]:
        """Admit one fenced request; the sync twin of :meth:`FenceGuard.fenced`."""
        request = self._request(scope, token, key, fingerprint, signature)
        if two_phase:  # no connection is held while the outside effect runs
            slot = FenceSlot[SyncConn](request, self._run(self._admit(request)), None)
            yield slot
            closing = slot.closing_plan()
            if closing is not None:
                self._run(closing)
        else:
            with self._pool.connection() as conn, conn.transaction() as tx:
                replay = _drive_sync(conn, self._admit(request))
                slot = FenceSlot[SyncConn](request, replay, conn)
                yield slot
                if slot.released:
                    raise psycopg.Rollback(tx)
                closing = slot.closing_plan()
                if closing is not None:
                    _drive_sync(conn, closing)

    def lookup(self, key: str) -> OperationRecord | None:
        """The stored state of an idempotency key, or None if it was never applied."""
        return self._run(lookup(key))

    def highest_token(self, scope: str) -> int | None:
        """The highest token accepted for ``scope``, or None if it was never seen."""
        return self._run(highest_token(scope))

    def _run(self, plan: Plan[T]) -> T:
        with self._pool.connection() as conn, conn.transaction():
            return _drive_sync(conn, plan)


async def _drive_async(conn: AsyncConn, plan: Plan[T]) -> T:
    """Run a plan's statements in order; database errors are thrown back into the plan."""
    async with conn.cursor(row_factory=dict_row) as cur:
        try:
            step = next(plan)
            while True:
                try:
                    await cur.execute(QUERIES[step.query], step.params)
                    row = await cur.fetchone()
                except psycopg.Error as exc:
                    step = plan.throw(exc)
                else:
                    step = plan.send(row)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def _drive_sync(conn: SyncConn, plan: Plan[T]) -> T:
    """Run a plan's statements in order; database errors are thrown back into the plan."""
    with conn.cursor(row_factory=dict_row) as cur:
        try:
            step = next(plan)
            while True:
                try:
                    cur.execute(QUERIES[step.query], step.params)
                    row = cur.fetchone()
                except psycopg.Error as exc:
                    step = plan.throw(exc)
                else:
                    step = plan.send(row)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
