"""The job pruner: a job goes once its own retention has passed, and only the jobs of the
tools the pruner is responsible for; queued and running jobs stay whatever their age."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from tests.integration.maintenance.conftest import rows
from tests.integration.store.helpers import new_job

from tenure import App, PolicyError
from tenure._maintenance._job_pruner import JobPruner, JobPrunerConfig
from tenure._observe._doctor import query_plan_scans
from tenure._states import FinishState
from tenure._store import Finish, NewJob, Store

DAY = 24 * 3600.0


def kept(job: NewJob, days: float) -> NewJob:
    return NewJob(
        job.tool, job.key, job.payload_json, job.payload_hash, job.max_attempts,
        retain_ms=round(days * DAY * 1000),
    )  # fmt: skip


async def finish_all(store: Store, tools: list[str], state: FinishState = "succeeded") -> list[int]:
    """Claim every queued job of ``tools`` and commit ``state`` for each, fenced."""
    claimed = await store.claim("w", dict.fromkeys(tools, 60_000), 1000)
    verdicts = await store.finish_many(
        "w", [Finish(j.id, j.token, state, result_json="null") for j in claimed]
    )
    assert all(verdicts.values())
    return [j.id for j in claimed]


def age(dsn: str, days: float) -> None:
    """Move every ended job's finish (and with it, its prune_after) ``days`` into the past."""
    rows(
        dsn,
        "UPDATE tenure_jobs SET finished_at = finished_at - %(d)s * interval '1 day',"
        " prune_after = prune_after - %(d)s * interval '1 day' WHERE finished_at IS NOT NULL",
        {"d": days},
    )


async def test_each_job_is_kept_for_its_own_retention(store: Store, tenure_dsn: str) -> None:
    await store.enqueue_many([kept(new_job(f"short{n}"), 1) for n in range(25)])
    await store.enqueue_many([kept(new_job(f"long{n}"), 30) for n in range(5)])
    await finish_all(store, ["t"])
    await store.enqueue_many([kept(new_job(f"queued{n}"), 1) for n in range(3)])
    # The ending statement stamps prune_after from the job's own retention.
    stamped = rows(
        tenure_dsn,
        "SELECT count(*) FROM tenure_jobs WHERE state = 'succeeded'"
        " AND abs(extract(epoch FROM prune_after - finished_at) * 1000 - retain_ms) < 50",
    )
    assert stamped == [(30,)]
    age(tenure_dsn, 2)
    rows(
        tenure_dsn,  # queued long ago: never the pruner's business
        "UPDATE tenure_jobs SET created_at = created_at - interval '90 days'"
        " WHERE state = 'queued'",
    )

    batches: list[int] = []
    prune = store.prune_jobs

    async def counted(tools: Sequence[str] | None, limit: int, timeout_ms: int) -> int:
        batches.append(await prune(tools, limit, timeout_ms))
        return batches[-1]

    store.prune_jobs = counted  # type: ignore[method-assign]
    pruner = JobPruner(store, ["t"], JobPrunerConfig(batch=10))
    assert await pruner.run_once() == 25
    assert batches == [10, 10, 5]
    left = rows(tenure_dsn, "SELECT idempotency_key FROM tenure_jobs ORDER BY id")
    assert [key for (key,) in left] == [f"long{n}" for n in range(5)] + [
        f"queued{n}" for n in range(3)
    ]
    assert await pruner.run_once() == 0  # nothing left to do; and no log line for it


async def test_a_pruner_leaves_other_applications_jobs_alone(store: Store, tenure_dsn: str) -> None:
    await store.enqueue_many([kept(new_job(f"mine{n}", tool="mine"), 1) for n in range(4)])
    await store.enqueue_many([kept(new_job(f"theirs{n}", tool="theirs"), 1) for n in range(3)])
    await finish_all(store, ["mine", "theirs"])
    age(tenure_dsn, 2)

    assert await JobPruner(store, ["mine"]).run_once() == 4
    left = rows(tenure_dsn, "SELECT tool, count(*) FROM tenure_jobs GROUP BY tool")
    assert left == [("theirs", 3)]
    # Only when told, a pruner takes care of every application's jobs.
    assert await JobPruner(store, ["mine"], JobPrunerConfig(scope="all")).run_once() == 3
    assert rows(tenure_dsn, "SELECT count(*) FROM tenure_jobs") == [(0,)]


async def test_a_pruned_key_runs_again_and_a_kept_one_does_not(tenure_dsn: str) -> None:
    """Retention is the idempotency window: the README says so, this proves it."""
    app = App(tenure_dsn, retain=3600)

    @app.tool(retain=2 * DAY)
    async def report(ctx: object, n: int) -> int:
        return n

    @app.tool()
    async def ping(ctx: object) -> None:
        return None

    try:
        first = await app.enqueue("report", {"n": 1}, idempotency_key="k")
        brief = await app.enqueue("report", {"n": 2}, idempotency_key="b", retain=60)
        other = await app.enqueue("ping", idempotency_key="p")
        kept_ms = rows(tenure_dsn, "SELECT id, retain_ms FROM tenure_jobs ORDER BY id")
        assert kept_ms == [(first.id, 2 * DAY * 1000), (brief.id, 60_000), (other.id, 3_600_000)]

        store = await app._connection.store()
        await finish_all(store, ["report", "ping"])
        age(tenure_dsn, 1)  # one day later: "b" and "p" are past their windows, "k" is not
        assert await JobPruner(store, ["report", "ping"]).run_once() == 2

        again = await app.enqueue("report", {"n": 1}, idempotency_key="k")
        assert (again.id, again.created) == (first.id, False)
        fresh = await app.enqueue("report", {"n": 2}, idempotency_key="b")
        assert fresh.created and fresh.id != brief.id
    finally:
        await app.aclose()


async def test_disabled_and_invalid_configs(store: Store) -> None:
    off = JobPruner(store, ["t"], JobPrunerConfig(enabled=False))
    assert await off.run_once() == 0
    off.start()
    await off.stop()  # never started a task; stopping twice is fine
    await off.stop()
    on = JobPruner(store, ["t"], JobPrunerConfig(interval=3600))
    on.start()
    on.start()
    await on.stop()
    for options, message in [
        ({"enabled": "yes"}, "enabled must be True or False"),
        ({"scope": "everything"}, "scope must be 'tools' or 'all'"),
        ({"interval": 0}, "interval=0 is outside"),
        ({"batch": 0}, "batch=0 is outside"),
        ({"batch": 2.5}, "batch must be an integer"),
        ({"statement_timeout": "10"}, "statement_timeout must be a number"),
    ]:
        with pytest.raises(PolicyError, match=message):
            JobPrunerConfig(**options)  # type: ignore[arg-type]
    app = App("dbname=x")
    for bad in (0, -1, 0.5, float("nan"), True, "7d", 3651 * DAY):
        with pytest.raises(PolicyError, match="retain must be"):
            App("dbname=x", retain=bad)  # type: ignore[arg-type]
        with pytest.raises(PolicyError, match="retain must be"):
            app.tool(f"t{id(bad)}", retain=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("tools", [["t0", "t1", "t2", "t3"], None], ids=["tools", "all"])
async def test_a_round_reads_expired_jobs_only_however_many_are_running(
    store: Store, tenure_dsn: str, tools: list[str] | None
) -> None:
    """70,000 running jobs and 7,000 retained ones, analyzed: the pruner's statement goes by
    tenure_jobs_prune, never a walk of the table. Its cutoff is opaque to the planner (a
    third of the table, it guesses), and a plain LIMIT over that guess had chosen a
    sequential scan: 1.4 s a round, in every worker, at 660,000 running jobs."""
    rows(
        tenure_dsn,
        "INSERT INTO tenure_jobs (tool, state, max_attempts, idempotency_key, payload, "
        "payload_hash, position, owner, token, attempt, lease_until, lease_ms, prune_after) "
        "SELECT 't' || (i %% 7), CASE WHEN i %% 11 = 0 THEN 'succeeded' ELSE 'running' END, 3, "
        "'k' || i, '{}', 'h', i, 'w', i, 1, clock_timestamp() + interval '1 hour', "
        "CASE WHEN i %% 11 = 0 THEN NULL ELSE 60000 END, "
        "CASE WHEN i %% 11 = 0 THEN clock_timestamp() + interval '1 day' END "
        "FROM generate_series(1, 77000) AS i",
    )
    rows(tenure_dsn, "ANALYZE tenure_jobs")
    used, scanned = query_plan_scans(
        await store.explain("prune_jobs", {"tools": tools, "limit": 1000})
    )
    assert "tenure_jobs_prune" in used and "tenure_jobs" not in scanned, (used, scanned)
    assert await JobPruner(store, tools or ["t0"], JobPrunerConfig(
        scope="all" if tools is None else "tools"
    )).run_once() == 0  # fmt: skip
