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

A guard needs ``secret=`` (the senders' signing key) or an explicit
``insecure=True``. A signed guard verifies the request's signature — over the
fence and the request's method, path and body — before it touches the
database, so a forged huge token cannot raise the high-water mark and lock
honest writers out, and a captured header set cannot carry another request.
An insecure guard trusts whoever reaches it: authenticate callers before it.

Only *final* answers are recorded (``final_statuses``, see
``_core.FINAL_STATUSES``): a 429, 401 or 408 is released like a 5xx, so the
next attempt with the same key runs the effect instead of replaying "not now".
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Generic, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ._core import (
    FINAL_STATUSES,
    FenceSlot,
    GuardPolicy,
    OperationRecord,
    Plan,
    highest_token,
    lookup,
)
from ._schema import QUERIES
from ._signing import RequestDigest

T = TypeVar("T")

AsyncConn = psycopg.AsyncConnection[Any]
SyncConn = psycopg.Connection[Any]
PoolT = TypeVar("PoolT", AsyncConnectionPool[Any], ConnectionPool[Any])


class _GuardConfig(Generic[PoolT]):
    """What both shells share: the validated options (see ``GuardPolicy``) and the pool.

    ``pool`` is a pool the caller owns (shared, never closed by the guard) or a
    DSN, for which the guard makes and owns one.
    """

    def __init__(
        self,
        pool: PoolT | str,
        *,
        secret: bytes | Sequence[bytes] | None = None,
        insecure: bool = False,
        final_statuses: Iterable[int] = FINAL_STATUSES,
        accept_v1_signatures: bool = False,
        lock_timeout: float | None = 5.0,
        max_connections: int = 10,
    ) -> None:
        self._policy = GuardPolicy.build(
            secret=secret,
            insecure=insecure,
            final_statuses=final_statuses,
            accept_v1_signatures=accept_v1_signatures,
            lock_timeout=lock_timeout,
        )
        self._owns_pool = isinstance(pool, str)
        self._pool: PoolT = self._new_pool(pool, max_connections) if isinstance(pool, str) else pool

    def _new_pool(self, dsn: str, max_connections: int) -> PoolT:
        raise NotImplementedError

    @property
    def signed(self) -> bool:
        """True if requests must carry a valid signature."""
        return bool(self._policy.secrets)

    @property
    def final_statuses(self) -> frozenset[int]:
        """The statuses recorded unless a response says otherwise."""
        return self._policy.final_statuses


class FenceGuard(_GuardConfig[AsyncConnectionPool[Any]]):
    """The async guard, on an AsyncConnectionPool (shared, not closed by us) or a DSN.

    With a DSN the guard owns its pool: ``async with FenceGuard(dsn, secret=...) as
    guard`` or ``await guard.open()`` / ``await guard.close()``.
    """

    def _new_pool(self, dsn: str, max_connections: int) -> AsyncConnectionPool[Any]:
        return AsyncConnectionPool(dsn, min_size=1, max_size=max_connections, open=False)

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
        digest: RequestDigest | None = None,
        two_phase: bool = False,
    ) -> AsyncIterator[FenceSlot[AsyncConn]]:
        """Admit one fenced request (see the module docstring for the two modes).

        ``digest`` is the request the fence travels with; a signed guard needs
        it (the signature covers it). Raises StaleFence, FingerprintMismatch,
        RequestInProgress, BadSignature or MalformedFence on entry; otherwise
        yields the slot.
        """
        request = self._policy.request(scope, token, key, fingerprint, signature, digest)
        if two_phase:  # no connection is held while the outside effect runs
            replay = await self._run(self._policy.admit(request))
            slot: FenceSlot[AsyncConn] = self._policy.slot(request, replay, None)
            yield slot
            closing = slot.closing_plan()
            if closing is not None:
                await self._run(closing)
        else:
            async with self._pool.connection() as conn, conn.transaction() as tx:
                replay = await _drive_async(conn, self._policy.admit(request))
                slot = self._policy.slot(request, replay, conn)
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


class SyncFenceGuard(_GuardConfig[ConnectionPool[Any]]):
    """The same guard for threaded services, on a ConnectionPool or a DSN."""

    def _new_pool(self, dsn: str, max_connections: int) -> ConnectionPool[Any]:
        return ConnectionPool(dsn, min_size=1, max_size=max_connections, open=False)

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
        digest: RequestDigest | None = None,
        two_phase: bool = False,
    ) -> Iterator[FenceSlot[SyncConn]]:
        """Admit one fenced request; the sync twin of :meth:`FenceGuard.fenced`."""
        request = self._policy.request(scope, token, key, fingerprint, signature, digest)
        if two_phase:  # no connection is held while the outside effect runs
            replay = self._run(self._policy.admit(request))
            slot: FenceSlot[SyncConn] = self._policy.slot(request, replay, None)
            yield slot
            closing = slot.closing_plan()
            if closing is not None:
                self._run(closing)
        else:
            with self._pool.connection() as conn, conn.transaction() as tx:
                replay = _drive_sync(conn, self._policy.admit(request))
                slot = self._policy.slot(request, replay, conn)
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
