"""Periodic schedules on a real PostgreSQL: each slot once, across workers and restarts.

The scheduler decides slots by the database's clock. To cross minute boundaries without
waiting for them, tests move the scheduler's clock only (``tenure.schedule_shift``, see
conftest.shifted): lease statements never read it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

from tests.integration.maintenance.conftest import rows, shifted
from tests.integration.maintenance.maintenance_app import build_app
from tests.support.schemas import db_now
from tests.support.waiting import wait_until
from tests.support.workers import WorkerGroup

from tenure import App
from tenure._maintenance._scheduler import Scheduler
from tenure._store import Store

MINUTE = timedelta(minutes=1)


def next_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0) + MINUTE


def slot_jobs(dsn: str, schedule: str) -> dict[str, tuple[int, str, int]]:
    """Slot → (job id, state, attempt) for every job the schedule queued."""
    found = rows(
        dsn,
        "SELECT idempotency_key, id, state, attempt FROM tenure_jobs"
        " WHERE idempotency_key LIKE %(prefix)s ORDER BY id",
        {"prefix": f"periodic:{schedule}:%"},
    )
    return {str(k).split(":", 2)[2]: (i, s, a) for k, i, s, a in found}  # type: ignore[misc]


def runs_per_job(marks: Path) -> Counter[int]:
    lines = marks.read_text().splitlines() if marks.exists() else []
    return Counter(int(line.split()[1]) for line in lines)


class Clock:
    """Schedulers over their own stores, each seeing the database's clock moved by a shift."""

    def __init__(self, app: App, dsn: str) -> None:
        self.app = app
        self.dsn = dsn
        self.stores: list[Store] = []

    async def scheduler(self, at: datetime) -> Scheduler:
        """A scheduler whose clock reads ``at`` now (and runs on from there)."""
        store = Store(shifted(self.dsn, (at - db_now(self.dsn)).total_seconds()), max_size=2)
        await store.open()
        self.stores.append(store)
        schedules = list(self.app.registry.schedules.values())
        return Scheduler(store, schedules, self.app.registry.schedule_job)

    async def close(self) -> None:
        for store in self.stores:
            await store.close()


async def test_catch_up_once_or_skip_after_downtime(tenure_dsn: str, tmp_path: Path) -> None:
    app = build_app(tenure_dsn)
    app.schedule("tick", cron="0 * * * *", name="hourly_once")
    app.schedule("tick", cron="0 * * * *", name="hourly_skip", catch_up="skip")
    clock = Clock(app, tenure_dsn)
    base = next_minute(db_now(tenure_dsn)).replace(minute=0) + timedelta(hours=1)
    hour = timedelta(hours=1)

    async def look(at: datetime) -> dict[str, list[datetime]]:
        decided = await (await clock.scheduler(at)).run_once()
        return {d.schedule: [d.slot] for d in decided if d.job_id is not None} | {
            f"{d.schedule}/skipped": [d.slot] for d in decided if d.job_id is None
        }

    try:
        # A new schedule that first looks late starts with its next slot.
        assert await look(base + timedelta(minutes=5)) == {
            "hourly_once/skipped": [base],
            "hourly_skip/skipped": [base],
        }
        # On time (within the grace): both run.
        assert await look(base + hour + timedelta(seconds=20)) == {
            "hourly_once": [base + hour],
            "hourly_skip": [base + hour],
        }
        # Down for three slots: "once" runs the latest of them once, "skip" records it only.
        assert await look(base + 4 * hour + timedelta(minutes=10)) == {
            "hourly_once": [base + 4 * hour],
            "hourly_skip/skipped": [base + 4 * hour],
        }
        # Looking again, from any worker, decides nothing twice.
        assert await look(base + 4 * hour + timedelta(minutes=11)) == {}
        once, skip = slot_jobs(tenure_dsn, "hourly_once"), slot_jobs(tenure_dsn, "hourly_skip")
        iso = [(base + n * hour).strftime("%Y-%m-%dT%H:%M:%SZ") for n in range(5)]
        assert sorted(once) == [iso[1], iso[4]]
        assert sorted(skip) == [iso[1]]
        # The slot stays decided after its job was pruned: it is not queued again.
        rows(tenure_dsn, "DELETE FROM tenure_jobs")
        assert await look(base + 4 * hour + timedelta(minutes=12)) == {}
    finally:
        await clock.close()


async def test_concurrent_schedulers_queue_each_slot_once(tenure_dsn: str) -> None:
    app = build_app(tenure_dsn)
    app.schedule("tick", cron="*/5 * * * *", name="five")
    clock = Clock(app, tenure_dsn)
    start = next_minute(db_now(tenure_dsn)).replace(minute=0) + timedelta(hours=1)
    try:
        decided = []
        for n in range(4):  # four slots, each seen by eight schedulers at once
            at = start + n * timedelta(minutes=5) + timedelta(seconds=1)
            schedulers = [await clock.scheduler(at) for _ in range(8)]
            looks = await asyncio.gather(*(s.run_once() for s in schedulers))
            decided += [d for look in looks for d in look]
        assert len(decided) == 4
        jobs = slot_jobs(tenure_dsn, "five")
        assert len(jobs) == 4 and {d.job_id for d in decided} == {j[0] for j in jobs.values()}
    finally:
        await clock.close()


def test_every_slot_runs_once_on_three_workers(
    workers: WorkerGroup, tenure_dsn: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    env = {"TENURE_TEST_SCHEDULES": "every", "TENURE_TEST_MARKS": str(marks)}
    for n in range(3):
        workers.spawn(f"w{n}", concurrency=2, env=env)
    for worker in workers:
        worker.wait_started()

    def done() -> list[tuple[int, str, int]]:
        return [j for j in slot_jobs(tenure_dsn, "every_second").values() if j[1] == "succeeded"]

    wait_until(
        lambda: len(done()) >= 4, timeout=30, interval=0.2, message=f"four slots\n{workers.logs()}"
    )
    for worker in workers:
        worker.kill()
    jobs = slot_jobs(tenure_dsn, "every_second")
    seconds = sorted(datetime.fromisoformat(slot.replace("Z", "+00:00")) for slot in jobs)
    assert seconds == [seconds[0] + timedelta(seconds=n) for n in range(len(seconds))], "a gap"
    ran = runs_per_job(marks)
    finished = [job_id for job_id, state, attempt in jobs.values() if state == "succeeded"]
    assert all(ran[job_id] == 1 for job_id in finished), ran
    assert sum(ran.values()) <= len(jobs)
    logged = [e["slot"] for w in workers for e in w.events("slot_enqueued")]
    assert logged and len(logged) == len(set(logged)), "a slot was decided twice"


def test_restart_across_a_slot_boundary(
    workers: WorkerGroup, tenure_dsn: str, tmp_path: Path
) -> None:
    """Minute schedules: a quick restart across a boundary runs the slot once whatever the
    catch-up; a restart after a long outage runs the missed slot once ("once") or not
    ("skip"). Each phase's workers see the clock placed just where the phase needs it."""
    marks = tmp_path / "marks"
    env = {"TENURE_TEST_SCHEDULES": "minute", "TENURE_TEST_MARKS": str(marks)}
    first = next_minute(db_now(tenure_dsn) + timedelta(minutes=5))
    phases = [  # (where the workers' clock stands when they are started, the slot expected)
        (first - timedelta(seconds=2), first),  # start, then the first slot comes
        (first + MINUTE - timedelta(seconds=1), first + MINUTE),  # killed and back across it
        (first + 2 * MINUTE + timedelta(seconds=40), first + 2 * MINUTE),  # back 40 s late
    ]
    for phase, (clock_at, slot) in enumerate(phases):
        dsn = shifted(tenure_dsn, (clock_at - db_now(tenure_dsn)).total_seconds())
        group = [workers.spawn(f"p{phase}w{n}", concurrency=2, dsn=dsn, env=env) for n in range(2)]
        key = slot.strftime("%Y-%m-%dT%H:%M:%SZ")
        expect_skip = phase == 2

        def settled(key: str = key, slot: datetime = slot, expect_skip: bool = expect_skip) -> bool:
            once = slot_jobs(tenure_dsn, "minute_once").get(key)
            skip = slot_jobs(tenure_dsn, "minute_skip").get(key)
            [(skip_mark,)] = rows(
                tenure_dsn, "SELECT max(last_slot) FROM tenure_schedules WHERE name = 'minute_skip'"
            )
            skipped = skip is None and skip_mark == slot
            ran = skip is not None and skip[1] == "succeeded"
            return once is not None and once[1] == "succeeded" and (skipped if expect_skip else ran)

        wait_until(
            settled,
            timeout=30,
            interval=0.2,
            message=f"phase {phase}: slot {key}\n{workers.logs()}",
        )
        for worker in group:
            worker.kill()
    once, skip = slot_jobs(tenure_dsn, "minute_once"), slot_jobs(tenure_dsn, "minute_skip")
    iso = [slot.strftime("%Y-%m-%dT%H:%M:%SZ") for _, slot in phases]
    assert sorted(once) == iso, once
    assert sorted(skip) == iso[:2], skip
    ran = runs_per_job(marks)
    assert sorted(ran.values()) == [1] * 5, ran  # every queued slot ran exactly once
    assert all(attempt == 1 for _, _, attempt in [*once.values(), *skip.values()])
