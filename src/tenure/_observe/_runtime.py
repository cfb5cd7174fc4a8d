"""What a worker runs for observability: the journal writer, the pruner and /metrics."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from .._log import attach, log_event
from .._maintenance._journal_pruner import JournalPruner, JournalPrunerConfig
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


class WorkerTelemetry:
    """Started and stopped with a worker; everything here is off the claim/commit path."""

    def __init__(
        self, registry: ToolRegistry, worker: str, store: Store, options: TelemetryOptions
    ) -> None:
        self._registry = registry
        self._worker = worker
        kinds = WRITER_KINDS | ({"heartbeat_ok"} if options.journal_heartbeats else set())
        self.writer = JournalWriter(store, kinds=kinds, worker=worker)
        self.pruner = JournalPruner(store, options.pruner)
        self._metrics_port = options.metrics_port
        self._metrics_host = options.metrics_host
        self._server: ServerThread | None = None
        self._detach = attach(self.writer, self.writer.kinds)
        self.metrics_url: str | None = None

    async def start(self) -> None:
        self.writer.start()
        self.pruner.start()
        if self._metrics_port is None:
            return
        # Imported here: a worker without /metrics never loads uvicorn or prometheus-client.
        from ._http import MetricsState, ServerThread, metrics_app
        from ._metrics import DatabaseGauges, process_metrics

        metrics = process_metrics()
        metrics.labels.register_specs(self._registry.tools.values())
        metrics.prime(self._registry.tools)  # every counter at zero before the first incident
        state = MetricsState([metrics.registry], DatabaseGauges(metrics.labels))
        server = ServerThread(
            metrics_app(self._registry.dsn, state),
            self._metrics_host,
            self._metrics_port,
            name="tenure-metrics",
        )
        self.metrics_url = await asyncio.to_thread(server.start)
        self._server = server
        log_event(
            logger, "metrics_listening", worker=self._worker, url=self.metrics_url + "/metrics"
        )

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        if self._server is not None:
            await asyncio.to_thread(self._server.stop)
            self._server = None
        await self.pruner.stop()
        await self.writer.stop()
        self._detach()
