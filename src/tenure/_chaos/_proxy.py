"""A TCP proxy that breaks one link on demand: the chaos runner's network nemesis.

It sits between one client (a worker process) and its server (PostgreSQL over
TCP or a Unix socket, or an HTTP receiver) and applies a mode to every open
and future connection:

``pass``            forward both ways;
``reset``           abort every connection with an RST, and each new one at once;
``blackhole``       keep sockets open, read and discard every byte both ways (a partition);
``drop_responses``  forward requests, discard every answer (the request lands, the
                    reply is lost);
``delay``           forward both ways, each chunk held ``delay`` seconds, in order.

Healing does not replay: bytes discarded are gone, so a connection that lived
through a partition is desynchronised and its client must give it up. The
counters (``bytes_dropped``, ``resets``) let a run prove that a fault fired.

The proxy runs its own event loop on a daemon thread, so any caller, sync or
async, can switch modes without blocking for more than the switch.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Final, TypeVar

from psycopg.conninfo import conninfo_to_dict, make_conninfo

MODES: Final = frozenset({"pass", "reset", "blackhole", "drop_responses", "delay"})
_CHUNK: Final = 64 * 1024
_CALL_TIMEOUT: Final = 10.0
_LINGER_RST: Final = struct.pack("ii", 1, 0)
T = TypeVar("T")


def proxied_dsn(dsn: str, host: str, port: int) -> str:
    """``dsn`` pointed at TCP ``host:port`` (everything else kept; ``hostaddr`` dropped)."""
    params = conninfo_to_dict(dsn)
    params.pop("hostaddr", None)
    params["host"] = host
    params["port"] = str(port)
    return make_conninfo("", **params)


def server_address(dsn: str) -> tuple[str, int]:
    """Where ``dsn`` connects: (host or Unix socket dir, port), asked from a live connection."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        return conn.info.host, conn.info.port


class _Link:
    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.sent = bytearray()  # client -> server, when the proxy records
        self.received = bytearray()  # server -> client

    def abort(self) -> None:
        sock = self.client.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
        self.client.transport.abort()
        if self.upstream is not None:
            self.upstream.transport.abort()
        for task in self.tasks:
            task.cancel()


class ChaosProxy:
    """Forward connections to ``host:port`` (or the Unix socket ``unix_path``), faultily."""

    def __init__(
        self,
        host: str = "",
        port: int = 0,
        *,
        unix_path: str | None = None,
        name: str = "",
        record: bool = False,
        on_first_request: Callable[[], None] | None = None,
    ) -> None:
        """``record`` keeps every connection's bytes (`transcripts`); ``on_first_request``
        runs on the proxy's thread when the first client bytes arrive, *before* they
        are forwarded (so a test can cut another link while a request is in flight)."""
        if unix_path is None and not host:
            raise ValueError("a proxy needs an upstream host:port or a Unix socket path")
        self.name = name
        self._record = record
        self._on_first_request = on_first_request
        self.transcripts: list[tuple[bytearray, bytearray]] = []
        self._upstream = (host, port)
        self._unix_path = unix_path
        self._mode = "pass"
        self._delay = 0.0
        self._links: set[_Link] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._port = 0
        self.bytes_dropped = 0
        self.bytes_forwarded = 0
        self.resets = 0
        self.connections_total = 0

    @classmethod
    def for_dsn(cls, dsn: str, *, name: str = "") -> ChaosProxy:
        """A proxy in front of the PostgreSQL server ``dsn`` names (TCP or Unix socket)."""
        host, port = server_address(dsn)
        if not host or host.startswith("/"):
            return cls(unix_path=f"{host}/.s.PGSQL.{port}", name=name)
        return cls(host, port, name=name)

    # -- control (any thread but the proxy's) --------------------------------------------

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("the proxy is not started")
        return self._port

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def connections(self) -> int:
        return len(self._links)

    def dsn(self, dsn: str) -> str:
        """``dsn`` routed through this proxy."""
        return proxied_dsn(dsn, self.host, self.port)

    def start(self) -> ChaosProxy:
        ready: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name=f"chaos-proxy-{self.name}", daemon=True
        )
        self._thread.start()
        self._port = ready.result(timeout=_CALL_TIMEOUT)
        return self

    def set_mode(self, mode: str, *, delay: float = 0.0) -> None:
        """Switch every open and future connection to ``mode``; returns once applied."""
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}; expected one of {sorted(MODES)}")
        if delay < 0:
            raise ValueError("delay must be >= 0")
        self._call(self._apply(mode, delay))

    def stop(self) -> None:
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is None or stop is None or thread is None:
            return
        self._loop = None
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(stop.set)
        thread.join(_CALL_TIMEOUT)

    def __enter__(self) -> ChaosProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the proxy's loop ----------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._loop
        if loop is None:
            coro.close()
            raise RuntimeError("the proxy is not running")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(_CALL_TIMEOUT)

    async def _apply(self, mode: str, delay: float) -> None:
        self._mode, self._delay = mode, delay
        if mode == "reset":
            for link in list(self._links):
                self.resets += 1
                link.abort()

    def _run(self, ready: concurrent.futures.Future[int]) -> None:
        try:
            asyncio.run(self._main(ready))
        except BaseException as exc:  # pragma: no cover - surfaced to start()
            if not ready.done():
                ready.set_exception(exc)

    async def _main(self, ready: concurrent.futures.Future[int]) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        ready.set_result(server.sockets[0].getsockname()[1])
        async with server:
            await self._stop.wait()
            server.close()
            for link in list(self._links):
                link.abort()

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._unix_path is not None:
            return await asyncio.open_unix_connection(self._unix_path)
        return await asyncio.open_connection(*self._upstream)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(writer)
        self.connections_total += 1
        if self._mode == "reset":
            self.resets += 1
            link.abort()
            return
        self._links.add(link)
        try:
            await self._forward(link, reader)
        except asyncio.CancelledError:
            pass  # the proxy is stopping; the sockets are aborted below
        finally:
            self._links.discard(link)
            for task in link.tasks:
                task.cancel()
            for side in (writer, link.upstream):
                if side is not None:
                    side.transport.abort()

    async def _forward(self, link: _Link, reader: asyncio.StreamReader) -> None:
        try:
            up_reader, up_writer = await self._open_upstream()
        except OSError:
            link.abort()
            return
        link.upstream = up_writer
        if self._record:
            self.transcripts.append((link.sent, link.received))
        link.tasks = [
            asyncio.create_task(self._pump(reader, up_writer, to_client=False, link=link)),
            asyncio.create_task(self._pump(up_reader, link.client, to_client=True, link=link)),
        ]
        await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)

    def _drops(self, to_client: bool) -> bool:
        return self._mode == "blackhole" or (self._mode == "drop_responses" and to_client)

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, to_client: bool, link: _Link
    ) -> None:
        """One direction; order is kept, delayed chunks go out in arrival order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(64)

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                if not data:
                    return
                if self._drops(to_client):
                    self.bytes_dropped += len(data)
                    continue
                dst.write(data)
                self.bytes_forwarded += len(data)
                await dst.drain()

        sender = asyncio.create_task(deliver())
        try:
            while True:
                try:
                    data = await src.read(_CHUNK)
                except OSError:
                    data = b""
                if not data and self._drops(to_client):
                    # A partitioned peer never hears that the other side went away.
                    await asyncio.Event().wait()
                if data and not to_client and self._on_first_request is not None:
                    hook, self._on_first_request = self._on_first_request, None
                    hook()
                if data and self._record:
                    (link.received if to_client else link.sent).extend(data)
                if data and self._drops(to_client):
                    self.bytes_dropped += len(data)
                    continue
                held = self._delay if self._mode == "delay" else 0.0
                await queue.put((loop.time() + held, data))
                if not data:
                    await sender
                    return
        finally:
            sender.cancel()
