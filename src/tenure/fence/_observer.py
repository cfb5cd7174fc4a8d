"""FenceObserver: the receiver's side of the telemetry contract.

A stale owner that slipped past its own ``ensure_owned()`` is stopped only at
the receiver, so that is the only place a stale_fence_rejected can be seen.
Hand the observer to the middleware and it counts every decision, emits each
stale rejection as an event (log line, attached handlers) and, given tenure's
DSN, writes it to tenure's journal next to the job's other events::

    observer = FenceObserver(journal_dsn=os.environ.get("TENURE_DSN"), receiver="cases")
    app.add_middleware(FenceMiddleware, guard=guard, on_decision=observer)
    app.add_route("/metrics", observer.metrics_endpoint)
    # in the app's lifespan:  async with observer: yield

Only tenure-shaped scopes and keys (``tool-job:{job}[:{operation}]``) are
recorded; anything else a sender put there stays out of logs and journal.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from types import TracebackType

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter
from starlette.requests import Request
from starlette.responses import Response

from .._log import Event, emit
from .._observe._journal import JournalWriter
from .._observe._metrics import render
from .._store import Store
from ._asgi import FenceDecision

_log = logging.getLogger("tenure.fence")
_SCOPE = re.compile(r"^tool-job:(\d+)$")
_KEY = re.compile(r"^tool-job:(\d+):([^:\s]{1,100})$")


def _tenure_ids(decision: FenceDecision) -> tuple[int | None, str | None, str | None]:
    """(job id, operation, key) when the scope and key are tenure's own; else Nones."""
    scope = _SCOPE.match(decision.scope or "")
    key = _KEY.match(decision.key or "")
    job = int(scope.group(1)) if scope else None
    if key is None or (job is not None and int(key.group(1)) != job):
        return job, None, None
    return int(key.group(1)), key.group(2), decision.key


class FenceObserver:
    """``on_decision`` hook: counts decisions and reports stale fences.

    ``journal_dsn`` (tenure's database) also journals each stale rejection; then
    run the observer in the receiver's lifespan (``async with observer``).
    ``receiver`` names this service in the journal's detail. ``then`` is called
    with every decision afterwards (a receiver's own decision log).
    """

    def __init__(
        self,
        *,
        journal_dsn: str | None = None,
        receiver: str | None = None,
        then: Callable[[FenceDecision], None] | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.decisions = Counter(
            "tenure_fence_decisions",
            "Fence decisions of this receiver, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.stale = Counter(
            "tenure_stale_fences_rejected",
            "Requests refused because a higher fencing token was already accepted",
            registry=self.registry,
        )
        self._journal_dsn = journal_dsn
        self._receiver = receiver
        self._then = then
        self._store: Store | None = None
        self._writer: JournalWriter | None = None

    def __call__(self, decision: FenceDecision) -> None:
        self.decisions.labels(decision.outcome).inc()
        if decision.outcome == "stale":
            self.stale.inc()
            job, operation, key = _tenure_ids(decision)
            fields = {"operation": operation, "key": key, "receiver": self._receiver}
            event = Event(
                "stale_fence_rejected",
                job=job,
                token=decision.token,
                fields={"status": decision.status, **{k: v for k, v in fields.items() if v}},
                level=logging.WARNING,
                monotonic=decision.arrived_monotonic,
            )
            emit(_log, event)
            if self._writer is not None:
                self._writer(event)
        if self._then is not None:
            self._then(decision)

    async def start(self) -> None:
        """Open the journal connection (only with a journal DSN) and start writing."""
        if self._journal_dsn is None or self._store is not None:
            return
        store = Store(self._journal_dsn, min_size=1, max_size=1)
        await store.open()
        self._store = store
        self._writer = JournalWriter(store, kinds={"stale_fence_rejected"})
        self._writer.start()

    async def stop(self) -> None:
        writer, store = self._writer, self._store
        self._writer = self._store = None
        if writer is not None:
            await writer.stop()
        if store is not None:
            await store.close()

    async def __aenter__(self) -> FenceObserver:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def metrics_endpoint(self, request: Request) -> Response:
        """A Starlette endpoint for this receiver's /metrics."""
        return Response(render([self.registry]), media_type=CONTENT_TYPE_LATEST)
