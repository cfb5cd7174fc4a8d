"""One supervisor per worker: every background loop is a component of one list, started in
order and stopped in reverse, and each component's signal is what a test awaits."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tenure import App, Context
from tenure._log import Event, attach
from tenure._maintenance._rescuer import RescuerConfig
from tenure._maintenance._supervisor import Signal, Supervisor, Task


async def test_a_worker_runs_every_loop_under_one_supervisor_and_signals_rounds(
    tenure_dsn: str,
) -> None:
    app = App(tenure_dsn)

    @app.tool(lease=30, heartbeat=5, jitter=1)
    async def t(ctx: Context) -> int:
        return 1

    worker = app.worker(poll_interval=0.05, rescuer=RescuerConfig(interval=0.05))
    rounds: list[Event] = []
    detach = attach(rounds.append, kinds={"component_round"})
    # Asked for before the worker starts: the supervisor hands the rescuer this signal.
    three = worker.signals["rescuer"].next(3)
    committed = worker.signals["completer"].next()
    task = asyncio.create_task(worker.run(handle_signals=False))
    try:
        async with asyncio.timeout(20):
            await three
        job = await app.enqueue("t", {})
        assert await app.wait(job.id, timeout=20) == 1
        async with asyncio.timeout(20):
            await committed  # the completer's batch with that commit
        assert worker.supervisor is not None
        assert [c.name for c in worker.supervisor] == [
            "journal_writer", "journal_pruner", "heartbeat", "completer", "rescuer",
            "scheduler", "job_pruner", "statistics", "worker_pruner", "listener", "pulse",
        ]  # fmt: skip
    finally:
        worker.stop()
        await task
        detach()
        await app.aclose()
    rescues = [e for e in rounds if e.fields["component"] == "rescuer"]
    assert len(rescues) >= 3 and rescues[0].level == logging.DEBUG
    assert {e.fields["outcome"] for e in rescues} == {"ok"}
    assert all(isinstance(e.fields["duration"], float) for e in rescues)
    assert "acted" in rescues[0].fields


class Recorded:
    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name = name
        self._log = log
        self._fail = fail

    async def start(self) -> None:
        if self._fail:
            raise RuntimeError(f"{self.name} cannot start")
        self._log.append(f"start {self.name}")

    async def stop(self) -> None:
        self._log.append(f"stop {self.name}")


async def test_the_supervisor_stops_in_reverse_and_undoes_a_failed_start() -> None:
    log: list[str] = []
    async with Supervisor([Recorded("a", log), Recorded("b", log)]):
        assert log == ["start a", "start b"]
    assert log[2:] == ["stop b", "stop a"]
    log.clear()
    failing = Supervisor([Recorded("a", log), Recorded("b", log, fail=True), Recorded("c", log)])
    with pytest.raises(RuntimeError, match="b cannot start"):
        await failing.start()
    assert log == ["start a", "stop b", "stop a"]  # every started one (b's stop is idempotent)
    with pytest.raises(ValueError, match="share a name"):
        Supervisor([Recorded("a", log), Recorded("a", log)])


async def test_a_signal_wakes_its_waiters_only_once_enough_have_fired() -> None:
    signal = Signal()
    two = signal.next(2)
    signal.fire()
    await asyncio.sleep(0)
    assert not two.done()
    signal.fire()
    async with asyncio.timeout(5):
        await two
    ticks: list[int] = []

    async def tick() -> None:
        ticks.append(1)
        await asyncio.Event().wait()

    pulse = Task("pulse", tick)
    pulse.start()
    pulse.start()  # idempotent
    await asyncio.sleep(0)
    await pulse.stop()
    await pulse.stop()
    assert ticks == [1]
