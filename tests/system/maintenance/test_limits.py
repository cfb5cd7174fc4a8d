"""Concurrency limits per key, enforced by the claim across every claimer at once.

Two measures of "never more than N": a sampler that reads running rows with live leases
from the database while the jobs run, and an exact sweep over the journal afterwards
(+1 at each claim, -1 at each commit; a claim journaled after a commit saw that commit,
because the key's lock is only granted once the previous claimer has committed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import threading
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from tests.integration.maintenance.conftest import rows
from tests.integration.maintenance.maintenance_app import build_app
from tests.integration.store.helpers import new_job
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import WorkerGroup

from tenure import PayloadError, PolicyError
from tenure._store import QUERIES, ClaimedJob, Finish, NewJob, Store

LIVE_BY_KEY = (
    "SELECT concurrency_key, count(*) FROM tenure_jobs"
    " WHERE state = 'running' AND lease_until > clock_timestamp()"
    " AND concurrency_key IS NOT NULL GROUP BY concurrency_key"
)


def keyed(key: str, concurrency_key: str | None, limit: int = 2) -> NewJob:
    job = new_job(key)
    if concurrency_key is None:
        return job
    return dataclasses.replace(job, concurrency_key=concurrency_key, concurrency_limit=limit)


class Sampler:
    """Counts live running jobs per key from the database, continuously, on its own thread."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.peak: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                for key, n in conn.execute(LIVE_BY_KEY).fetchall():
                    self.peak[key] = max(self.peak[key], n)
                self.samples += 1
                self._stop.wait(0.002)  # leave the two CPUs to the workers

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def journal_peaks(dsn: str) -> Counter[str]:
    """The most jobs of each key that were ever running at once, swept from the journal."""
    events = rows(
        dsn,
        "SELECT e.at, e.kind, j.concurrency_key FROM tenure_events e"
        " JOIN tenure_jobs j ON j.id = e.job_id"
        " WHERE j.concurrency_key IS NOT NULL"
        " AND e.kind IN ('job_claimed', 'succeeded', 'failed', 'retried', 'released')"
        " ORDER BY e.at, e.kind = 'job_claimed', e.id",
    )
    running: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    for _, kind, key in events:
        running[str(key)] += 1 if kind == "job_claimed" else -1
        peak[str(key)] = max(peak[str(key)], running[str(key)])
    return peak


async def test_many_claimers_never_exceed_a_key_limit(store: Store, tenure_dsn: str) -> None:
    jobs = [keyed(f"k{key}-{n}", f"user:{key}") for key in range(4) for n in range(25)]
    jobs += [keyed(f"free-{n}", None) for n in range(40)]
    assert sum(e.created for e in await store.enqueue_many(jobs)) == len(jobs)
    done: list[int] = []

    async def claimer(name: str) -> None:
        rng = random.Random(name)
        while len(done) < len(jobs):
            claimed = await store.claim(name, {"t": 60_000}, 3, limited=True)
            if not claimed:
                await asyncio.sleep(0.002)
                continue
            await asyncio.sleep(rng.uniform(0, 0.02))
            outcomes = [Finish(job.id, job.token, "succeeded", "null") for job in claimed]
            accepted = await store.finish_many(name, outcomes)
            assert all(accepted.values())
            done.extend(job.id for job in claimed)

    with Sampler(tenure_dsn) as sampler:
        await asyncio.wait_for(asyncio.gather(*(claimer(f"c{n}") for n in range(12))), 60)
    assert sorted(done) == sorted(set(done)) and len(done) == len(jobs)
    assert sampler.samples > 10 and max(sampler.peak.values()) <= 2, sampler.peak
    peaks = journal_peaks(tenure_dsn)
    assert peaks == {f"user:{key}": 2 for key in range(4)}, peaks  # the limit, and reached
    [(unheld,)] = rows(
        tenure_dsn,
        "SELECT count(*) FROM tenure_jobs WHERE concurrency_key IS NOT NULL AND NOT held",
    )
    assert unheld == 0  # no committed state lets the ordinary claim take a keyed job


async def test_a_key_being_decided_is_passed_over_until_its_claim_commits(
    store: Store, tenure_dsn: str
) -> None:
    """Two claimers that would each count N-1: the second never decides the key meanwhile."""
    await store.enqueue_many([keyed(f"j{n}", "user:1") for n in range(4)])
    params = {"owner": "a", "tools": ["t"], "lease_ms": [60_000], "limit": 1, "idle_ms": 5000}
    with psycopg.connect(tenure_dsn, autocommit=True) as first:
        with first.transaction():
            first.execute(QUERIES["admit_held"], params)
            [claimed] = first.execute(QUERIES["claim"], params).fetchall()
            # First has taken one of two slots and not committed: the key stays its to decide.
            assert await store.claim("b", {"t": 60_000}, 5, limited=True) == []
            first.execute(QUERIES["hold_again"], {"ids": [claimed[0]]})
        second = await store.claim("b", {"t": 60_000}, 5, limited=True)
    assert len(second) == 1  # it saw the first claim: one slot was left
    assert await store.claim("c", {"t": 60_000}, 5, limited=True) == []
    assert await store.claim("d", {"t": 60_000}, 5) == []  # the ordinary claim never takes them


async def test_an_expired_lease_frees_its_slot(store: Store) -> None:
    first, second = keyed("first", "user:7", limit=1), keyed("second", "user:7", limit=1)
    await store.enqueue(first)
    await store.enqueue(second)
    [held] = await store.claim("w1", {"t": 300}, 5, limited=True)
    assert held.idempotency_key == "first"
    assert await store.claim("w2", {"t": 60_000}, 5, limited=True) == []
    reclaimed: list[ClaimedJob] = []

    async def after_expiry() -> bool:
        reclaimed.extend(await store.claim("w2", {"t": 60_000}, 5, limited=True))
        return bool(reclaimed)

    await wait_until_async(after_expiry, interval=0.05, message="the expired lease never freed")
    [again] = reclaimed
    assert again.id == held.id and again.previous_token == held.token  # expired first
    assert again.token > held.token and again.attempt == 2
    assert await store.claim("w3", {"t": 60_000}, 5, limited=True) == []  # one slot: taken


async def test_limits_come_from_the_app(tenure_dsn: str) -> None:
    app = build_app(tenure_dsn)
    app.limit("provider:openai", 3)
    app.limit("user:vip:*", 5)

    @app.tool(concurrency=4)
    async def export(ctx: object) -> None:
        """A tool with its own global limit."""

    @app.tool(concurrency_key=lambda p: f"user:{p['user']}")
    async def per_user(ctx: object, user: int = 0) -> None:
        """A key from the payload, which may lack it."""

    try:
        job = await app.enqueue("hold", {"seconds": 0, "user": 9})
        assert (job.state, job.idempotency_key.startswith("auto:")) == ("queued", True)
        [(key, limit, held)] = rows(
            tenure_dsn,
            "SELECT concurrency_key, concurrency_limit, held FROM tenure_jobs WHERE id = %(id)s",
            {"id": job.id},
        )
        assert (key, limit, held) == ("user:9", 2, True)
        free = await app.enqueue("hold", {"seconds": 0})
        assert rows(
            tenure_dsn,
            "SELECT concurrency_key, held FROM tenure_jobs WHERE id = %(id)s",
            {"id": free.id},
        ) == [(None, False)]
        tick = await app.enqueue("tick", concurrency_key="user:vip:1")  # longest prefix wins
        exported = await app.enqueue("export")
        by_id = {
            r[0]: r[1] for r in rows(tenure_dsn, "SELECT id, concurrency_limit FROM tenure_jobs")
        }
        assert (by_id[tick.id], by_id[exported.id]) == (5, 4)
        with pytest.raises(PolicyError, match="matches no declared limit"):
            await app.enqueue("tick", concurrency_key="tenant:1")
        with pytest.raises(PolicyError, match="sets its own concurrency key"):
            await app.enqueue("hold", {"seconds": 0, "user": 1}, concurrency_key="user:2")
        with pytest.raises(PayloadError, match="could not be computed from the payload"):
            await app.enqueue("per_user", {})
    finally:
        await app.aclose()
    for pattern, limit, message in [
        ("user:*", 3, "already declared as 2"),
        ("a*b", 1, "may only end"),
        ("x", 0, "must be in"),
        ("x", True, "must be an integer"),
        ("", 1, "1-500 printable"),
    ]:
        with pytest.raises(PolicyError, match=message):
            app.limit(pattern, limit)
    with pytest.raises(PolicyError, match="not both"):
        app.tool(concurrency=1, concurrency_key="x")


def test_two_per_user_across_three_worker_processes(
    workers: WorkerGroup, tenure_dsn: str, tmp_path: Path
) -> None:
    app = build_app(tenure_dsn)
    try:
        for _ in range(10):
            app.sync.enqueue("hold", {"seconds": 0.25, "user": 1})
        for _ in range(4):
            app.sync.enqueue("hold", {"seconds": 0.25, "user": 2})
            app.sync.enqueue("hold", {"seconds": 0.25})
    finally:
        app.close()
    with Sampler(tenure_dsn) as sampler:
        for n in range(3):
            workers.spawn(f"w{n}", concurrency=1, poll_interval=0.1)  # two at once: two processes

        def finished() -> bool:
            return rows(
                tenure_dsn, "SELECT count(*) FROM tenure_jobs WHERE state <> 'succeeded'"
            ) == [(0,)]

        wait_until(finished, timeout=60, interval=0.2, message=f"not all done\n{workers.logs()}")
    assert sampler.samples > 10 and max(sampler.peak.values()) <= 2, sampler.peak
    assert sampler.peak["user:1"] == 2, sampler.peak  # the limit was reached, not just kept
    peaks = journal_peaks(tenure_dsn)
    assert peaks["user:1"] == 2 and max(peaks.values()) <= 2, peaks
    claimers = rows(
        tenure_dsn, "SELECT DISTINCT owner FROM tenure_jobs WHERE concurrency_key = 'user:1'"
    )
    assert len(claimers) >= 2, claimers  # the limit held across processes, not inside one
