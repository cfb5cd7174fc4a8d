"""The App's database: its DSN (or the embedded server), one store and one set of waiters
per event loop, and the private event loop thread its blocking face runs on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from .._dsn import check_dsn
from .._errors import ConfigError
from .._store import Store, fresh_database, migrate, probe, server_address
from .._waiting import Waiters

T = TypeVar("T")

# For the front ends that need a server itself: the demo its own databases, the chaos
# run its fault proxy's upstream.
__all__ = ["Connection", "fresh_database", "server_address"]

CHECK_IDLE = 30.0  # a producer's pooled connection idle longer is checked before use


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


class Connection:
    """Where an App's statements go: opened lazily, once per event loop, closed by `close`."""

    def __init__(self, dsn: str | None, *, migrate: bool, poll_interval: float) -> None:
        self._dsn = check_dsn(dsn) if dsn else None
        self.auto_migrate = migrate  # migrate on first use (read-only commands turn it off)
        self.poll_interval = poll_interval
        self._migrated = False
        self._embedded: Any = None
        self._lock = threading.Lock()
        self._stores: dict[asyncio.AbstractEventLoop, asyncio.Future[Store]] = {}
        self._waiters: dict[asyncio.AbstractEventLoop, Waiters] = {}
        self._portal: _Portal | None = None

    @property
    def dsn(self) -> str:
        """The server's DSN; without one, the embedded server's (and migrates) on first use."""
        with self._lock:
            if self._dsn is None:
                from .._embedded import EmbeddedPostgres, announce

                self._embedded = EmbeddedPostgres()
                self._dsn = self._embedded.use()
                announce(self._embedded)
            if self.auto_migrate and not self._migrated:
                migrate(self._dsn)
                self._migrated = True
            return self._dsn

    def set_dsn(self, dsn: str) -> None:
        checked = check_dsn(dsn)
        with self._lock:
            if checked == self._dsn:
                return
            if self._stores or self._embedded is not None or self._migrated:
                raise ConfigError("this app is already connected; give the DSN before first use")
            self._dsn = checked

    @property
    def configured_dsn(self) -> str | None:
        return None if self._embedded is not None else self._dsn

    async def store(self) -> Store:
        """This loop's store, opened on first use (concurrent first callers share it)."""
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

    async def probed_store(self) -> Store:
        """The store, once one plain connection got through: a refused or silent server
        fails within libpq's connect timeout, not after the pool's retries."""
        dsn = await asyncio.to_thread(lambda: self.dsn)  # may start the embedded server
        await probe(dsn)
        return await self.store()

    async def waiters(self) -> Waiters:
        """This loop's waiters: one LISTEN connection for all of them, opened on first use."""
        loop = asyncio.get_running_loop()
        store = await self.store()
        waiters = self._waiters.get(loop)
        if waiters is None:
            waiters = self._waiters[loop] = Waiters(store, self.dsn, self.poll_interval)
        return waiters

    async def aclose(self) -> None:
        waiters = self._waiters.pop(asyncio.get_running_loop(), None)
        if waiters is not None:
            await waiters.close()
        future = self._stores.pop(asyncio.get_running_loop(), None)
        if future is not None and future.done() and not future.exception():
            await future.result().close()

    def close(self) -> None:
        if self._portal is not None:
            self._portal.call(self.aclose())
            self._portal.close()
            self._portal = None
        if self._embedded is not None:
            self._embedded.stop()
            self._embedded = None
            self._dsn = None
            self._migrated = False

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to its end on the private event loop thread (the blocking face)."""
        with self._lock:
            if self._portal is None:
                self._portal = _Portal()
            portal = self._portal
        return portal.call(coro)
