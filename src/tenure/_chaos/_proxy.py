"""A TCP fault-injection proxy: ``tenure chaos``'s network nemesis, and the test suite's.

Lease and fencing code is only worth trusting if it survives the network failing
underneath it: a worker whose connection is reset, partitioned, or slow. Mocks
cannot show that, so :class:`FaultProxy` sits between one client (a worker
process, a psycopg connection, a tool's HTTP client) and the real server
(PostgreSQL over TCP or a Unix socket, a receiver) and misbehaves on demand.

Modes apply to every open connection *and* every future one:

``pass``
    Forward bytes both ways.
``reset``
    Abort every open connection with a TCP RST (``SO_LINGER`` = (1, 0) on the
    client-side socket, then close) and reset new ones as soon as they connect.
``blackhole``
    A network partition: sockets stay open, every byte in both directions is
    read and discarded. New connections are accepted and treated the same way.
``drop_responses``
    Client-to-server bytes are forwarded, server-to-client bytes discarded.
``delay``
    Forward both ways, holding each chunk for ``delay`` seconds after it
    arrived; order is preserved.
``hold``
    Client-to-server bytes are read and kept, in order, until :meth:`FaultProxy.release`
    (or a switch to any forwarding mode) sends them on; server-to-client bytes
    pass. A request can thus be "on the wire" for as long as a test likes and
    arrive exactly when the test says (``bytes_held`` shows it is there).

Partition semantics are deliberate: while a direction is dropping, an EOF or a
reset arriving on it is swallowed too (a partitioned server does not learn that
the client went away), and upstream is still dialled for new connections so
that healing has something to forward to.

**Healing does not replay.** Switching from ``blackhole`` or ``drop_responses``
back to ``pass`` only affects bytes read from then on; bytes dropped are gone,
so the protocol stream is now desynchronised. A psycopg connection that lived
through that will error or hang afterwards, which is exactly what a real
partition does to it; use a fresh connection after healing.

The proxy runs its own event loop in a daemon thread, so it works the same from
sync tests and from async tests (whose loop it never blocks for more than a
mode switch). Counters (``bytes_dropped``, ``bytes_forwarded``, ``resets``) let a
run prove that a fault fired; ``record`` keeps every connection's bytes
(``transcripts``), and ``on_first_request`` lets ``tenure chaos`` cut another link
the moment a request is in flight.
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
from typing import Any, Final, Literal, TypeVar

from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = ["MODES", "FaultProxy", "rewrite_dsn"]

MODES: Final[frozenset[str]] = frozenset(
    {"pass", "reset", "blackhole", "drop_responses", "delay", "hold"}
)

_CHUNK: Final = 64 * 1024
_QUEUE_DEPTH: Final = 64  # chunks held per direction before reading pauses (back-pressure)
_CALL_TIMEOUT: Final = 10.0  # seconds a caller waits on the proxy's loop before giving up
_LINGER_RST: Final = struct.pack("ii", 1, 0)

_T = TypeVar("_T")
# A queued item: (release time on the proxy loop's clock, payload). The payload is
# a chunk of bytes, or a terminal marker telling the writer how the source ended.
_End = Literal["eof", "error"]
_Item = tuple[float, bytes | _End]


def server_address(dsn: str) -> tuple[str, int]:
    """Where ``dsn`` connects: (host or Unix socket dir, port), asked from a live connection
    (the store's, through the App's package: a failure is a StoreError, never psycopg's own)."""
    from .._app import server_address as asked

    return asked(dsn)


def rewrite_dsn(dsn: str, host: str, port: int) -> str:
    """Return *dsn* (conninfo string or URL) pointed at TCP ``host:port``.

    Everything else (user, dbname, sslmode, options...) is kept, so a test can
    route an existing DSN through a :class:`FaultProxy`. ``hostaddr`` is dropped
    because libpq would otherwise connect there and bypass the proxy.
    """
    params = conninfo_to_dict(dsn)
    params.pop("hostaddr", None)
    params["host"] = host
    params["port"] = str(port)
    return make_conninfo("", **params)


def _set_rst_on_close(writer: asyncio.StreamWriter) -> None:
    """Make closing this socket send RST instead of FIN (what a crashed peer looks like)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)


class _Connection:
    """One client connection and its upstream twin; owned by the proxy loop."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.aborted = False
        self.pending_to_server = 0  # client bytes read but not yet written upstream (or dropped)
        self.sent = bytearray()  # client -> server, when the proxy records
        self.received = bytearray()  # server -> client

    def abort(self, *, rst: bool) -> None:
        """Tear both sides down now, discarding anything unsent or still held."""
        self.aborted = True
        if rst:
            _set_rst_on_close(self.client)
        self.client.transport.abort()
        if self.upstream is not None:
            self.upstream.transport.abort()
        for task in self.tasks:  # a pump may be parked on a full queue or a delay
            task.cancel()

    def close(self) -> None:
        """Release both sockets once the pumps are done (abortively if aborted)."""
        for writer in (self.client, self.upstream):
            if writer is None:
                continue
            if self.aborted:
                writer.transport.abort()
            else:
                writer.close()


class FaultProxy:
    """Forward TCP connections to an upstream server, injecting faults on demand.

    Use as a context manager or call :meth:`start` / :meth:`stop`. See the module
    docstring for what each mode does.
    """

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        name: str = "",
        record: bool = False,
        on_first_request: Callable[[], None] | None = None,
    ) -> None:
        """``record`` keeps every connection's bytes (`transcripts`); ``on_first_request``
        runs on the proxy's thread when the first client bytes arrive, *before* they
        are forwarded (so a caller can cut another link while a request is in flight)."""
        self.name = name
        self._record = record
        self._on_first_request = on_first_request
        self.transcripts: list[tuple[bytearray, bytearray]] = []  # (sent, received) per link
        self.bytes_forwarded = 0
        self.resets = 0
        self._upstream_host = upstream_host
        self._upstream_port = upstream_port
        self._upstream_path: str | None = None
        self._listen_host = listen_host
        self._listen_port = listen_port
        self._mode = "pass"
        self._delay = 0.0
        self._bytes_dropped = 0
        self._port: int | None = None
        self._conns: set[_Connection] = set()
        # Every accepted socket until its handler has run to its end (see _main).
        self._accepted: dict[socket.socket, asyncio.Task[None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop_event: asyncio.Event | None = None
        self._flowing: asyncio.Event | None = None  # set unless the mode is "hold"
        self._stopped = False

    @classmethod
    def unix(cls, upstream_socket_path: str, **options: Any) -> FaultProxy:
        """A proxy whose upstream is a Unix socket (e. g. an embedded PostgreSQL).

        *upstream_socket_path* is the socket file itself (``<dir>/.s.PGSQL.<port>``
        for PostgreSQL). The proxy still listens on TCP, so clients can be
        pointed at it with :func:`rewrite_dsn`. *options* are the constructor's.
        """
        proxy = cls("", 0, **options)
        proxy._upstream_path = upstream_socket_path
        return proxy

    @classmethod
    def for_dsn(cls, dsn: str, **options: Any) -> FaultProxy:
        """A proxy in front of the PostgreSQL server ``dsn`` names (TCP or Unix socket)."""
        host, port = server_address(dsn)
        if not host or host.startswith("/"):
            return cls.unix(f"{host}/.s.PGSQL.{port}", **options)
        return cls(host, port, **options)

    # -- public API (any thread but the proxy's own) ---------------------------------------

    def start(self) -> FaultProxy:
        """Bind the listening socket and start serving; returns self."""
        if self._thread is not None:
            raise RuntimeError("FaultProxy already started")
        ready: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run,
            args=(ready,),
            name=f"FaultProxy-{self.name or f'{id(self):x}'}",
            daemon=True,
        )
        self._thread.start()
        try:
            self._port = ready.result(timeout=_CALL_TIMEOUT)
        except BaseException:
            self._thread.join(timeout=_CALL_TIMEOUT)
            self._stopped = True
            raise
        return self

    @property
    def port(self) -> int:
        """The TCP port the proxy actually listens on."""
        if self._port is None:
            raise RuntimeError("FaultProxy not started")
        return self._port

    @property
    def host(self) -> str:
        """The host the proxy listens on."""
        return self._listen_host

    def dsn(self, dsn: str) -> str:
        """``dsn`` routed through this proxy."""
        return rewrite_dsn(dsn, self.host, self.port)

    def set_mode(self, mode: str, *, delay: float = 0.0) -> None:
        """Switch mode for all open and future connections; returns once applied.

        For ``reset`` that means every open connection has been aborted. *delay*
        (seconds) is only used by the ``delay`` mode.
        """
        if mode not in MODES:
            raise ValueError(f"unknown FaultProxy mode {mode!r}; expected one of {sorted(MODES)}")
        if delay < 0:
            raise ValueError(f"delay must be >= 0, got {delay!r}")
        if self._loop is None or self._stopped:
            self._apply_mode(mode, delay)
            return
        self._call(self._apply_mode_async(mode, delay))

    def release(self) -> None:
        """Leave ``hold``: forward every held byte, in order, and switch to ``pass``."""
        if self._mode != "hold":
            raise RuntimeError(f"release() needs the hold mode, the proxy is in {self._mode!r}")
        self.set_mode("pass")

    @property
    def mode(self) -> str:
        """The current mode."""
        return self._mode

    @property
    def bytes_held(self) -> int:
        """Client-to-server bytes read but not yet forwarded: in ``hold``, what is held."""
        if self._loop is None or self._stopped:
            return 0
        return self._call(self._pending_async())

    async def _pending_async(self) -> int:
        return sum(conn.pending_to_server for conn in self._conns)

    @property
    def delay(self) -> float:
        """The per-chunk delay (seconds) used in ``delay`` mode."""
        return self._delay

    @property
    def connections(self) -> int:
        """Client connections currently open through the proxy."""
        return len(self._conns)

    @property
    def bytes_dropped(self) -> int:
        """Bytes discarded so far, so a test can prove a fault actually fired."""
        return self._bytes_dropped

    def stop(self) -> None:
        """Stop listening and close every connection; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        loop, stop_event, thread = self._loop, self._stop_event, self._thread
        if loop is None or stop_event is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # loop already gone
            loop.call_soon_threadsafe(stop_event.set)
        thread.join(timeout=_CALL_TIMEOUT)
        if thread.is_alive():
            raise RuntimeError("FaultProxy thread did not stop")

    def __enter__(self) -> FaultProxy:
        if self._thread is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        upstream = self._upstream_path or f"{self._upstream_host}:{self._upstream_port}"
        return (
            f"<FaultProxy {self._listen_host}:{self._port} -> {upstream} mode={self._mode}"
            f" connections={self.connections} bytes_dropped={self._bytes_dropped}>"
        )

    # -- plumbing --------------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run *coro* on the proxy loop and wait for it (never from that loop)."""
        assert self._loop is not None
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("FaultProxy methods must not be called from its own loop")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=_CALL_TIMEOUT)

    def _run(self, ready: concurrent.futures.Future[int]) -> None:
        """Thread body: own an event loop for the proxy's whole life."""
        try:
            asyncio.run(self._main(ready))
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                raise

    async def _main(self, ready: concurrent.futures.Future[int]) -> None:
        """Accept and serve until stopped, then close every socket accepted.

        The proxy accepts with a reader callback of its own, not asyncio's server: a
        connection asyncio had accepted but not yet handed to a handler when its server
        closed was never closed (its task cancelled before it ran, or its transport
        refused by the closed server), and its socket, collected later, raised
        ResourceWarning in whatever test happened to run then. Here every socket is in
        `_accepted` from the moment accept() returns it, and shutdown closes what is left.
        """
        loop = self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._flowing = asyncio.Event()
        if self._mode != "hold":
            self._flowing.set()
        family = socket.AF_INET6 if ":" in self._listen_host else socket.AF_INET
        listener = socket.create_server((self._listen_host, self._listen_port), family=family)
        listener.setblocking(False)
        loop.add_reader(listener.fileno(), self._accept, listener)
        try:
            ready.set_result(listener.getsockname()[1])
            await self._stop_event.wait()
        finally:
            loop.remove_reader(listener.fileno())
            listener.close()
            for conn in list(self._conns):
                conn.abort(rst=False)
            # Let the connection handlers notice and finish cleanly, then cancel the rest;
            # a socket whose handler never got to run is closed here.
            tasks = list(self._accepted.values())
            if tasks:
                await asyncio.wait(tasks, timeout=1.0)
                for task in tasks:
                    task.cancel()
                await asyncio.wait(tasks)
            for sock in list(self._accepted):
                sock.close()
            self._accepted.clear()
            await asyncio.sleep(0)  # transports aborted above close their sockets now

    def _accept(self, listener: socket.socket) -> None:
        """The listener is readable: take every waiting connection, each with its handler."""
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:  # none left (BlockingIOError), or one reset before it was taken
                return
            sock.setblocking(False)
            self._accepted[sock] = asyncio.create_task(self._serve(sock))

    async def _serve(self, sock: socket.socket) -> None:
        """One accepted socket, wrapped in streams and handled; closed whatever happens."""
        try:
            try:
                reader, writer = await asyncio.open_connection(sock=sock)
            except BaseException:
                sock.close()
                raise
            try:
                await self._handle(reader, writer)
                with contextlib.suppress(OSError):
                    await writer.wait_closed()  # a graceful close flushes what is buffered
            except Exception as exc:  # what asyncio's server did with a handler's error
                asyncio.get_running_loop().call_exception_handler(
                    {"message": "FaultProxy connection handler failed", "exception": exc}
                )
            finally:
                writer.transport.abort()  # stopped before its close completed; else a no-op
        finally:
            self._accepted.pop(sock, None)

    def _apply_mode(self, mode: str, delay: float) -> None:
        self._mode = mode
        self._delay = delay
        if self._flowing is not None:  # only ever touched on the proxy loop once it runs
            if mode == "hold":
                self._flowing.clear()
            else:
                self._flowing.set()
        if mode == "reset":
            for conn in list(self._conns):
                self.resets += 1
                conn.abort(rst=True)

    async def _apply_mode_async(self, mode: str, delay: float) -> None:
        self._apply_mode(mode, delay)

    def _drops(self, to_client: bool) -> bool:
        """Whether bytes travelling this way are currently discarded."""
        return self._mode == "blackhole" or (self._mode == "drop_responses" and to_client)

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._upstream_path is not None:
            return await asyncio.open_unix_connection(self._upstream_path)
        return await asyncio.open_connection(self._upstream_host, self._upstream_port)

    async def _handle(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        """Serve one client connection until both directions end or it is aborted."""
        if self._mode == "reset" or self._stopped:
            if not self._stopped:
                self.resets += 1
            _set_rst_on_close(client)
            client.transport.abort()
            return
        conn = _Connection(client)
        self._conns.add(conn)
        try:
            try:
                upstream_reader, upstream = await self._open_upstream()
            except OSError:
                conn.abort(rst=True)  # what the client would see from a dead server: a reset
                return
            conn.upstream = upstream
            if conn.aborted:  # reset while we were dialling
                return
            if self._record:
                self.transcripts.append((conn.sent, conn.received))
            to_server: asyncio.Queue[_Item] = asyncio.Queue(_QUEUE_DEPTH)
            to_client: asyncio.Queue[_Item] = asyncio.Queue(_QUEUE_DEPTH)
            conn.tasks = [
                asyncio.create_task(
                    self._read_side(client_reader, to_server, to_client=False, conn=conn)
                ),
                asyncio.create_task(self._write_side(conn, to_server, upstream, to_client=False)),
                asyncio.create_task(
                    self._read_side(upstream_reader, to_client, to_client=True, conn=conn)
                ),
                asyncio.create_task(self._write_side(conn, to_client, client, to_client=True)),
            ]
            await asyncio.wait(conn.tasks)
        finally:
            for task in conn.tasks:
                task.cancel()
            if conn.tasks:
                await asyncio.wait(conn.tasks)
            self._conns.discard(conn)
            conn.close()

    async def _read_side(
        self,
        src: asyncio.StreamReader,
        queue: asyncio.Queue[_Item],
        *,
        to_client: bool,
        conn: _Connection,
    ) -> None:
        """Read one direction, dropping or queueing each chunk per the current mode."""
        loop = asyncio.get_running_loop()
        end: _End = "eof"
        try:
            while data := await src.read(_CHUNK):
                if not to_client and self._on_first_request is not None:
                    hook, self._on_first_request = self._on_first_request, None
                    hook()
                if self._record:
                    (conn.received if to_client else conn.sent).extend(data)
                if self._drops(to_client):
                    self._bytes_dropped += len(data)
                    continue
                held = self._delay if self._mode == "delay" else 0.0
                if not to_client:
                    conn.pending_to_server += len(data)
                await queue.put((loop.time() + held, data))
        except OSError:
            end = "error"
        held = self._delay if self._mode == "delay" else 0.0
        await queue.put((loop.time() + held, end))

    async def _write_side(
        self,
        conn: _Connection,
        queue: asyncio.Queue[_Item],
        dst: asyncio.StreamWriter,
        *,
        to_client: bool,
    ) -> None:
        """Deliver queued chunks in order once they are due, re-checking the mode."""
        loop = asyncio.get_running_loop()
        assert self._flowing is not None
        while True:
            release, payload = await queue.get()
            if (wait := release - loop.time()) > 0:
                await asyncio.sleep(wait)
            if not to_client:
                while self._mode == "hold":  # an EOF is held too: order is preserved
                    await self._flowing.wait()
                if isinstance(payload, bytes):
                    conn.pending_to_server -= len(payload)
            if self._drops(to_client):  # the mode changed while the chunk was held
                if isinstance(payload, bytes):
                    self._bytes_dropped += len(payload)
                    continue
                return  # a partitioned peer never hears about the close
            if payload == "eof":
                if dst.can_write_eof() and not dst.is_closing():
                    with contextlib.suppress(OSError):
                        dst.write_eof()
                return
            if payload == "error":
                # The source died abruptly: pass the abruptness on.
                if to_client:
                    _set_rst_on_close(dst)
                dst.transport.abort()
                return
            try:
                self.bytes_forwarded += len(payload)  # counted first: seen, it is counted
                dst.write(payload)
                await dst.drain()
            except OSError:
                conn.abort(rst=True)
                return
