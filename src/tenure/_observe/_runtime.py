"""What a worker runs for observability, as components of its supervisor: the journal
writer, the journal pruner and /metrics."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._log import attach, log_event
from .._maintenance._journal_pruner import JournalPruner, JournalPrunerConfig
from .._maintenance._supervisor import Component, Signal
from .._store import Store
from ._events import WRITER_KINDS
from ._journal import JournalWriter

if TYPE_CHECKING:
    from .._registry import ToolRegistry
    from ._http import ServerThread

logger = logging.getLogger("tenure.worker")


@dataclass(frozen=True, slots=True)
class TelemetryOptions:
    """A worker's observability options.

    ``metrics_port`` None serves no /metrics (and feeds no metrics); 0 picks a free
    port (the ``metrics_listening`` event says which). ``journal_heartbeats`` also
    journals every heartbeat_ok (a row per lease per beat: for debugging, not for
    10,000 held leases). ``pruner`` sets the journal's retention.
    """

    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    journal_heartbeats: bool = False
    pruner: JournalPrunerConfig | None = None


class JournalFeed:
    """The ``journal_writer`` component: the writer, attached to the process's events
    while it runs (only this worker's, only the kinds it journals)."""

    name = "journal_writer"

    def __init__(self, writer: JournalWriter) -> None:
        self.writer = writer
        self._detach: Callable[[], None] | None = None

    @property
    def signal(self) -> Signal:
        return self.writer.signal

    @signal.setter
    def signal(self, signal: Signal) -> None:
        self.writer.signal = signal

    def start(self) -> None:
        if self._detach is None:
            self._detach = attach(self.writer, self.writer.kinds)
        self.writer.start()

    async def stop(self) -> None:
        await self.writer.stop()
        detach, self._detach = self._detach, None
        if detach is not None:
            detach()


class MetricsServer:
    """The ``metrics`` component: /metrics on a thread of its own (uvicorn), fed by events
    and, for claims and calls, by its interceptor (tenure._observe._metrics)."""

    name = "metrics"

    def __init__(self, registry: ToolRegistry, worker: str, host: str, port: int) -> None:
        self._registry = registry
        self._worker = worker
        self._host = host
        self._port = port
        self._server: ServerThread | None = None
        self.url: str | None = None

    async def start(self) -> None:
        if self._server is not None:
            return
        # Imported here: a worker without /metrics never loads uvicorn or prometheus-client.
        from ._http import MetricsState, ServerThread, metrics_app
        from ._metrics import DatabaseGauges, process_metrics

        metrics = process_metrics()
        metrics.labels.register_specs(self._registry.tools.values())
        metrics.prime(self._registry.tools)  # every counter at zero before the first incident
        state = MetricsState([metrics.registry], DatabaseGauges(metrics.labels))
        server = ServerThread(
            metrics_app(self._registry.dsn, state), self._host, self._port, name="tenure-metrics"
        )
        self.url = await asyncio.to_thread(server.start)
        self._server = server
        log_event(logger, "metrics_listening", worker=self._worker, url=self.url + "/metrics")

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await asyncio.to_thread(server.stop)


class WorkerTelemetry:
    """A worker's observability as components of its supervisor: the journal writer, the
    journal pruner and /metrics; everything here is off the claim/commit path."""

    def __init__(
        self, registry: ToolRegistry, worker: str, store: Store, options: TelemetryOptions
    ) -> None:
        kinds = WRITER_KINDS | ({"heartbeat_ok"} if options.journal_heartbeats else set())
        self.writer = JournalWriter(store, kinds=kinds, worker=worker)
        self.pruner = JournalPruner(store, options.pruner)
        self._metrics = (
            None
            if options.metrics_port is None
            else MetricsServer(registry, worker, options.metrics_host, options.metrics_port)
        )

    @property
    def components(self) -> list[Component]:
        """In the order the supervisor starts them (and stops them in reverse)."""
        feed: list[Component] = [JournalFeed(self.writer), self.pruner]
        return feed if self._metrics is None else [*feed, self._metrics]

    @property
    def metrics_url(self) -> str | None:
        return None if self._metrics is None else self._metrics.url
