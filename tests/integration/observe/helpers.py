"""Helpers of the observability tests: waiting on rows, scraping /metrics, a fenced receiver."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from tests.support.waiting import wait_until
from tests.support.workers import Journal, WorkerGroup, WorkerProcess, wait_job

from tenure._observe._http import ServerThread
from tenure.fence import FenceGuard, FenceMiddleware, migrate_fence
from tenure.fence._observer import FenceObserver

TERMINAL = ("succeeded", "failed", "cancelled")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def wait_done(journal: Journal, job_id: int, workers: WorkerGroup) -> dict[str, Any]:
    return wait_job(journal, job_id, lambda r: r["state"] in TERMINAL, "never ended", workers)


def wait_events(
    journal: Journal, job_id: int, kind: str, n: int = 1, workers: WorkerGroup | None = None
) -> list[dict[str, Any]]:
    """Poll until ``n`` journal rows of ``kind``; on failure the workers' logs say why."""
    try:
        wait_until(lambda: len(journal.events(job_id, kind)) >= n, timeout=15, interval=0.02)
    except AssertionError:
        logs = f"\n{workers.logs()}" if workers is not None else ""
        raise AssertionError(
            f"job {job_id}: fewer than {n} {kind} rows in {journal.kinds(job_id)}{logs}"
        ) from None
    return journal.events(job_id, kind)


def spawn_with_metrics(
    workers: WorkerGroup, name: str, **options: Any
) -> tuple[WorkerProcess, str]:
    """A worker serving /metrics on a free loopback port; returns it and the URL."""
    env = {"TENURE_METRICS_PORT": "0", **options.pop("env", {})}
    worker = workers.spawn(name, env=env, **options)
    return worker, worker.wait_event("metrics_listening", timeout=20)["url"]


def scrape(url: str, headers: dict[str, str] | None = None, timeout: float = 10) -> Samples:
    """Every sample of a /metrics page: (name, sorted labels) → value."""
    response = httpx.get(url, headers=headers, timeout=timeout)
    response.raise_for_status()
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels`` (0 if none)."""
    return sum(
        v
        for (n, have), v in samples.items()
        if n == name and all((k, w) in have for k, w in labels.items())
    )


class Receiver:
    """A fenced receiver (FenceMiddleware + FenceObserver journaling to tenure) on a thread."""

    def __init__(self, dsn: str) -> None:
        migrate_fence(dsn)
        self.observer = FenceObserver(journal_dsn=dsn, receiver="test-receiver")
        guard = FenceGuard(dsn, insecure=True)  # a test receiver on loopback
        observer = self.observer

        async def notify(request: Request) -> JSONResponse:
            await request.body()
            return JSONResponse({"ok": True}, status_code=201)

        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            async with guard, observer:
                yield

        app = Starlette(
            routes=[
                Route("/notify", notify, methods=["POST"]),
                Route("/metrics", observer.metrics_endpoint),
            ],
            lifespan=lifespan,
        )
        app.add_middleware(FenceMiddleware, guard=guard, on_decision=observer)
        self.server = ServerThread(app, "127.0.0.1", 0, name="test-receiver")
        self.url = self.server.start()

    def close(self) -> None:
        self.server.stop()
