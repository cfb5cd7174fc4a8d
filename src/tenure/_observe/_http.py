"""Serving HTTP from a worker or the CLI: /metrics, the loopback and Host rules, a thread.

The worker serves /metrics from uvicorn on a thread of its own, with its own
event loop and its own one-connection store: a tool that blocks the worker's
loop must not also blind the metrics that would show it. Every statement these
servers send runs under a statement timeout, so a slow scrape stays bounded.
"""

from __future__ import annotations

import ipaddress
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .._errors import ConfigError
from .._store import Store
from ._metrics import DatabaseGauges, render

STATEMENT_TIMEOUT_MS = 2000
START_TIMEOUT = 15.0
GRACEFUL_SHUTDOWN = 1  # seconds
MAX_TARGET = 4096  # bytes of path and query string; our URLs are short
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_HOST = re.compile(r"(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+))(?::([0-9]{1,5}))?")


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)  # a dual-stack socket's view of IPv4
    return mapped if mapped is not None else address


def is_loopback(host: str) -> bool:
    """True for names and addresses only this machine can reach."""
    if host == "localhost":
        return True
    address = _address(host)
    return address is not None and address.is_loopback


def parse_host(value: str, default_port: int | None) -> tuple[str, int | None] | None:
    """``(name, port)`` of a Host header or an allowed-host entry; None when malformed.

    Names are lower-cased and addresses written one way (``[::1]`` and ``::1`` alike);
    a missing port is ``default_port``.
    """
    found = _HOST.fullmatch(value)
    if found is None:
        return None
    bracketed, name, port = found.groups()
    if bracketed is not None:
        try:
            name = str(ipaddress.IPv6Address(bracketed))
        except ValueError:
            return None
    number = default_port if port is None else int(port)
    if number is not None and not 0 < number < 65536:
        return None
    return name.lower(), number


def allowed_names(entries: Iterable[str]) -> list[tuple[str, int | None]]:
    """Allowed-host entries (``name`` or ``name:port``) parsed; ConfigError names a bad one."""
    parsed = [(entry, parse_host(entry, None)) for entry in entries]
    for entry, names in parsed:
        if names is None:
            raise ConfigError(f"allowed host {entry!r} is not a host name or host:port")
    return [names for _, names in parsed if names is not None]


class HostCheck:
    """ASGI middleware: answer only requests addressed to a name this server is bound to.

    DNS rebinding lets a page on attacker.example read a loopback server: the name
    is re-pointed at 127.0.0.1 and the browser treats the answers as the attacker's
    own origin. What the browser cannot forge is the Host header, which still says
    attacker.example; so a request is served only when its Host names the address it
    arrived on (for a loopback address also ``127.0.0.1``, ``localhost`` and
    ``[::1]``, at that port) or a name in ``allowed_hosts`` (``name`` for any port,
    ``name:port`` for one). Anything else gets 421 (400 when malformed, 414 for an
    overlong target) before any route runs.
    """

    def __init__(
        self,
        app: ASGIApp,
        allowed_hosts: Iterable[str] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.app = app
        self._headers = dict(headers or {})
        allowed = allowed_names(allowed_hosts)
        self._any_port = {name for name, port in allowed if port is None}
        self._exact = {(name, port) for name, port in allowed if port is not None}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        status, reason = self._verdict(scope)
        if status == 200:
            await self.app(scope, receive, send)
            return
        response = Response(reason, status_code=status, media_type="text/plain")
        response.headers.update(self._headers)
        await response(scope, receive, send)

    def _verdict(self, scope: Scope) -> tuple[int, str]:
        target = len(scope.get("raw_path") or scope["path"].encode()) + len(
            scope.get("query_string", b"")
        )
        if target > MAX_TARGET:
            return 414, "request target too long"
        hosts = [value for name, value in scope["headers"] if name == b"host"]
        default = DEFAULT_PORTS.get(scope.get("scheme", "http"), 80)
        given = parse_host(hosts[0].decode("latin-1"), default) if len(hosts) == 1 else None
        if given is None:
            return 400, "one well-formed Host header is required"
        if given[0] in self._any_port or given in self._exact or given in _local_names(scope):
            return 200, ""
        return 421, "this server does not answer to that Host"


class OriginCheck:
    """ASGI middleware: refuse (403) a request a browser sent from another origin.

    A browser names the page that made a request in its ``Origin`` header and cannot
    forge it. A request without one (curl, an SDK, a webhook sender, a browser's own
    navigation) passes, and so does one whose Origin is this server as the request's
    Host names it (``http://127.0.0.1:8321`` for ``Host: 127.0.0.1:8321``; any scheme,
    as a proxy may end TLS). Any other Origin, ``null`` and malformed ones included, is
    refused on every bind, loopback or not, whatever the route: a page elsewhere can
    neither act through a visitor's browser nor read what it gets back. (`HostCheck`
    answers DNS rebinding, where the Origin looks like this server's but the Host does not.)
    """

    def __init__(self, app: ASGIApp, headers: Mapping[str, str] | None = None) -> None:
        self.app = app
        self._headers = dict(headers or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or same_origin(scope):
            await self.app(scope, receive, send)
            return
        response = Response("cross-origin requests are refused", 403, media_type="text/plain")
        response.headers.update(self._headers)
        await response(scope, receive, send)


def same_origin(scope: Scope) -> bool:
    """True when the request names no Origin, or names the server its Host names."""
    origins = [value for name, value in scope["headers"] if name == b"origin"]
    if not origins:
        return True
    hosts = [value for name, value in scope["headers"] if name == b"host"]
    if len(origins) != 1 or len(hosts) != 1:
        return False
    scheme, separator, authority = origins[0].decode("latin-1").partition("://")
    if not separator or scheme not in ("http", "https"):
        return False
    origin = parse_host(authority, None)
    return origin is not None and origin == parse_host(hosts[0].decode("latin-1"), None)


def _local_names(scope: Scope) -> set[tuple[str, int | None]]:
    """The (name, port) pairs of the address a request arrived on (ASGI's ``server``)."""
    server = scope.get("server")
    if not server or server[0] is None:
        return set()
    host, port = str(server[0]), server[1]
    if port is None:
        port = DEFAULT_PORTS.get(scope.get("scheme", "http"), 80)
    address = _address(host)
    if address is not None:
        host = f"[{address}]" if address.version == 6 else str(address)
    parsed = parse_host(host, port)
    names = {parsed} if parsed is not None else set()
    if is_loopback(host):
        names.update((name, port) for name in LOOPBACK_NAMES)
    return names


def bounded_dsn(dsn: str, statement_timeout_ms: int = STATEMENT_TIMEOUT_MS) -> str:
    """``dsn`` with a statement timeout added to its options (search_path and others kept)."""
    params = conninfo_to_dict(dsn)
    options = str(params.get("options") or "")
    params["options"] = f"{options} -c statement_timeout={statement_timeout_ms}".strip()
    return make_conninfo("", **params)


class MetricsState:
    """What /metrics renders: registries fed by events, and gauges read on scrape."""

    def __init__(self, registries: Sequence[CollectorRegistry], gauges: DatabaseGauges) -> None:
        self.gauges = gauges
        gauge_registry = CollectorRegistry(auto_describe=False)
        gauge_registry.register(gauges)
        self.registries = [*registries, gauge_registry]
        self.scrapes = 0
        self.last_seconds = 0.0

    async def render(self, store: Store) -> bytes:
        started = time.monotonic()
        await self.gauges.refresh(store)
        body = render(self.registries)
        self.scrapes += 1
        self.last_seconds = time.monotonic() - started
        return body


async def metrics_endpoint(request: Request) -> Response:
    state: MetricsState = request.app.state.metrics
    body = await state.render(request.app.state.store)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def store_lifespan(
    dsn: str, max_size: int
) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    """A lifespan that keeps ``app.state.store`` open, every statement under a timeout."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        store = Store(bounded_dsn(dsn), min_size=1, max_size=max_size)
        await store.open()
        app.state.store = store
        try:
            yield
        finally:
            await store.close()

    return lifespan


def metrics_app(dsn: str, state: MetricsState) -> Starlette:
    """A Starlette app serving only /metrics, with a one-connection store of its own."""
    app = Starlette(routes=[Route("/metrics", metrics_endpoint)], lifespan=store_lifespan(dsn, 1))
    app.state.metrics = state
    return app


class ServerThread:
    """uvicorn on a daemon thread with its own event loop; `start()` returns its URL."""

    def __init__(self, app: Any, host: str, port: int, *, name: str = "tenure-http") -> None:
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            log_config=None,  # its lines go through the process's logging, timestamped
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,  # a polling browser must not hold it
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=name, daemon=True)
        self.url = ""

    def start(self, timeout: float = START_TIMEOUT) -> str:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._server.should_exit = True
                raise ConfigError(
                    f"the HTTP server on {self._server.config.host}:{self._server.config.port} "
                    "did not start (is the port taken?)"
                )
            time.sleep(0.01)
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
        return self.url

    def stop(self, timeout: float = 5.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
