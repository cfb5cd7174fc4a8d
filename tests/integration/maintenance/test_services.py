"""Every background service of a worker follows one contract: start/stop (also as
``async with``), ``run_once`` callable directly, and one error policy: a round that fails,
whether the database refused it or the code has a bug, is logged as a failed
``component_round`` and the service lives on. Tests await a service's signal, not time."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tenure import App, Context
from tenure._maintenance._service import Service
from tenure._store import Store


def worker_services(store: Store, dsn: str) -> list[Service]:
    app = App(dsn)

    @app.tool(lease=30, heartbeat=5, jitter=1)
    async def t(ctx: Context) -> None: ...

    app.schedule("t", every=3600)
    return app.worker()._services(store)


@pytest.mark.parametrize("failure", [RuntimeError("a bug"), TimeoutError()])
async def test_each_service_logs_a_failed_round_and_lives_on(
    store: Store, tenure_dsn: str, caplog: pytest.LogCaptureFixture, failure: Exception
) -> None:
    services = worker_services(store, tenure_dsn)
    assert {type(s).__name__ for s in services} == {
        "Rescuer", "Scheduler", "JobPruner", "StatisticsKeeper", "WorkerPruner",
    }  # fmt: skip
    for service in services:
        real = service.run_once
        calls: list[int] = []

        async def flaky(real: Any = real, calls: list[int] = calls) -> Any:
            calls.append(1)
            if len(calls) == 1:
                raise failure
            return await real()

        service.run_once = flaky  # type: ignore[method-assign]
        service.pause = lambda: 0.01  # type: ignore[method-assign]
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            rounds = service.signal.next(3)
            async with service:
                async with service:  # entering twice starts one loop
                    async with asyncio.timeout(20):
                        await rounds
        assert service.failures == 1 and len(calls) >= 3, type(service).__name__
        failed = ("component_round", f"component={service.name} ", "outcome=failed")
        logged = [r for r in caplog.records if all(f in r.getMessage() for f in failed)]
        assert logged, type(service).__name__
        # A database's refusal is routine (WARNING); anything else is a bug (ERROR).
        expected = logging.WARNING if isinstance(failure, TimeoutError) else logging.ERROR
        assert logged[0].levelno == expected
    await services[0].stop()  # stopping a stopped service is fine
