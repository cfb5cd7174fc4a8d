"""The base every group of statements shares: one pool, one way to run a statement."""

from __future__ import annotations

import time
from typing import Any, Self

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from .._dsn import check_dsn
from ._connection import (
    Pool,
    connect_options,
    deadline,
    last_used,
    readable,
    statement,
    typed_methods,
)


class StoreBase:
    """Async access to tenure's tables through a small connection pool.

    ``check_idle`` (seconds; None: no checks): a producer's connections may sit in the
    pool through a database restart, and without a check the first statement after it
    fails on a connection that died meanwhile. So a connection is checked with one
    round trip before it is handed out when its socket shows the server hung up, or
    when it sat idle longer than ``check_idle``; a busy producer pays nothing for this.

    Every public coroutine method of every subclass (each group of statements) raises its
    database errors as tenure errors, verdict and all (`_connection.typed_method`, by
    `_errors.RULES`): the wait for a connection, the statements and the commit alike.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        typed_methods(cls)

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        check_idle: float | None = None,
    ) -> None:
        self._check_idle = check_idle
        self._pool = Pool(
            check_dsn(dsn),
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, "row_factory": dict_row, **connect_options()},
            open=False,
            name="tenure",
            check=None if check_idle is None else self._check,
        )

    async def _check(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """A round trip only for a connection that may have died while it sat in the pool:
        one whose socket has something to read (an idle connection is sent nothing but
        the server's goodbye when it shuts down or restarts), or that was last handed out
        longer than ``check_idle`` ago (a peer that vanished without a goodbye).

        Idle time counts from when the connection was last handed out, not returned: a
        pool with a ``reset`` callback returns every connection through a background
        task, which cost each producer call ≈ 0.3 ms. Counting from the hand-out
        over-estimates idle time by the time it was in use, so a check comes sooner,
        never later."""
        now = time.monotonic()
        used = last_used.get(conn)
        last_used[conn] = now
        idle = self._check_idle is not None and (used is None or now - used >= self._check_idle)
        if idle or readable(conn):
            await AsyncConnectionPool.check_connection(conn)

    async def open(self) -> None:
        await self._pool.open(wait=True, timeout=30)

    async def close(self) -> None:
        await self._pool.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _fetch(
        self,
        name: str,
        params: dict[str, Any],
        timeout: float | None = None,
        *,
        prepare: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Rows of a named statement. ``prepare=False`` plans it with this call's values
        every time (for statements whose absent filters must fold away, never a generic plan)."""
        async with self._pool.connection() as conn:
            with deadline(conn, timeout):
                cursor = await conn.cursor(row_factory=dict_row).execute(
                    statement(name), params, prepare=prepare
                )
                return await cursor.fetchall() if cursor.description else []

    async def _execute(self, name: str, params: dict[str, Any]) -> int:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(statement(name), params)
            return cursor.rowcount


typed_methods(StoreBase)  # its own: opening the pool (a server that cannot be reached), closing it
