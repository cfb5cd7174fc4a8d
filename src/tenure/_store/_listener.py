"""The LISTEN connection: one per worker, one per App that waits, owned by the store.

A notification only says "look again": every decision is taken from the row that
is read afterwards, so a lost notification costs a delay, never a wrong answer.
Notifications are lost while the connection is down (that is when `on_connect`
tells the owner to look at everything again), and always through a pooler in
transaction mode, which hands LISTEN's server connection to somebody else: that
is what `probe` finds out, so the owner knows whether to poll.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, LiteralString, Self

import psycopg

from .._errors import StoreError
from .._log import log_event
from ._connection import MAX_RECONNECT_DELAY, QUERIES, connect_options, typed

logger = logging.getLogger("tenure.listener")

# LISTEN takes no parameters: one named statement per channel.
CHANNELS: dict[str, LiteralString] = {
    "tenure_jobs": QUERIES["listen"],
    "tenure_cancel": QUERIES["listen_cancel"],
    "tenure_done": QUERIES["listen_done"],
    "tenure_progress": QUERIES["listen_progress"],
}
FIRST_PAUSE = 0.05
# The pool's own cap: whatever was announced while the connection is away is lost, and the
# owner looks again only once it is back (a worker's cancels: effects until then).
LAST_PAUSE = MAX_RECONNECT_DELAY
PROBE_TIMEOUT = 2.0
STOP_TIMEOUT = 5.0

Notify = Callable[[str, str], None]
Probe = Callable[[str, str], Awaitable[None]]


class Listener:
    """Hands every notification on ``channels`` to ``on_notify(channel, payload)``.

    ``on_connect`` runs after each (re)connection, once LISTEN is in place: whatever
    was announced while the connection was down is lost, so the owner looks again.
    With ``probe`` (a function that sends ``pg_notify(channel, payload)`` on another
    connection), each connection is first checked to really hear notifications;
    `delivers` says whether the last check did. A worker's supervisor runs it as its
    ``listener`` component.
    """

    name = "listener"

    def __init__(
        self,
        dsn: str,
        channels: Sequence[str],
        on_notify: Notify,
        *,
        on_connect: Callable[[], None] | None = None,
        probe: Probe | None = None,
        name: str = "tenure",
    ) -> None:
        unknown = [c for c in channels if c not in CHANNELS]
        if unknown or not channels:
            raise ValueError(f"unknown channels {unknown}; known: {sorted(CHANNELS)}")
        self._dsn = dsn
        self._channels = tuple(channels)
        self._on_notify = on_notify
        self._on_connect = on_connect
        self._probe = probe
        self._name = name
        self._task: asyncio.Task[None] | None = None
        self._probes: dict[str, asyncio.Future[None]] = {}
        self.connected = asyncio.Event()
        self.delivers: bool | None = None  # None until a probe has said, or without probe

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"{self._name}-listen")

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Cancel the listening task; a task that does not end within STOP_TIMEOUT (a
        driver stuck in a socket call) is left behind rather than hanging the caller."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_TIMEOUT)
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: never "exception was never retrieved"
        self.connected.clear()

    async def _run(self) -> None:
        pause = FIRST_PAUSE
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True, **connect_options()
                )
                async with conn:
                    for channel in self._channels:
                        await conn.execute(CHANNELS[channel])
                    pause = FIRST_PAUSE
                    await self._serve(conn)
            except psycopg.Error as exc:
                log_event(
                    logger,
                    "listen_failed",
                    worker=self._name,
                    level=logging.DEBUG,
                    error=type(typed(exc, connecting=not self.connected.is_set())).__name__,
                )
            self.connected.clear()
            await asyncio.sleep(pause)
            pause = min(pause * 2, LAST_PAUSE)

    async def _serve(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self._probe is None:
            self._connected()
            async for note in conn.notifies():
                self._on_notify(note.channel, note.payload)
            return
        reader = asyncio.create_task(self._read(conn))
        try:
            self.delivers = await self._check(self._channels[0])
            self._connected()
            await reader
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _read(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async for note in conn.notifies():
            waiter = self._probes.get(note.payload) if note.payload.startswith("probe:") else None
            if waiter is not None:
                if not waiter.done():
                    waiter.set_result(None)
                continue
            self._on_notify(note.channel, note.payload)

    async def _check(self, channel: str) -> bool:
        """Send a probe through another connection; True if it came back here."""
        assert self._probe is not None
        payload = f"probe:{secrets.token_hex(8)}"
        arrived = asyncio.get_running_loop().create_future()
        self._probes[payload] = arrived
        try:
            # asyncio.timeout, never wait_for: on Python 3.11 wait_for can swallow a cancel
            # that lands as the awaited future completes, and stop() would then wait forever.
            async with asyncio.timeout(PROBE_TIMEOUT):
                await self._probe(channel, payload)
                await arrived
        except (TimeoutError, psycopg.Error, StoreError):  # the probe is a store method
            return False
        finally:
            del self._probes[payload]
        return True

    def _connected(self) -> None:
        self.connected.set()
        if self._on_connect is not None:
            self._on_connect()
