"""Serving HTTP from a worker or the CLI: /metrics, the loopback rule, a server on a thread.

The worker serves /metrics from uvicorn on a thread of its own, with its own
event loop and its own one-connection store: a tool that blocks the worker's
loop must not also blind the metrics that would show it. Every statement these
servers send runs under a statement timeout, so a slow scrape stays bounded.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._errors import ConfigError
from .._store._store import Store
from ._metrics import DatabaseGauges, render

STATEMENT_TIMEOUT_MS = 2000
START_TIMEOUT = 15.0
GRACEFUL_SHUTDOWN = 1  # seconds


def is_loopback(host: str) -> bool:
    """True for names and addresses only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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
