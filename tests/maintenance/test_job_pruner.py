"""The job pruner: old terminal jobs go, in bounded batches; recent and live ones stay."""

from __future__ import annotations

import pytest
from tests.maintenance.conftest import rows
from tests.store.helpers import new_job

from tenure import PolicyError
from tenure._maintenance._pruner import JobPruner, JobPrunerConfig
from tenure._store._store import Store

pytestmark = pytest.mark.storage

DAY = 24 * 3600.0


async def test_old_terminal_jobs_are_deleted_in_batches(store: Store, tenure_dsn: str) -> None:
    await store.enqueue_many([new_job(f"j{n}") for n in range(40)])
    # Ages and states by hand: 8 days old terminal (doomed), 6 days old terminal (kept),
    # and old rows that are still queued or running (kept whatever their age).
    rows(
        tenure_dsn,
        """UPDATE tenure_jobs SET
             state = (ARRAY['succeeded', 'failed', 'cancelled'])[mod(id, 3) + 1],
             finished_at = clock_timestamp() - interval '8 days'
           WHERE id <= 23""",
    )
    rows(
        tenure_dsn,
        """UPDATE tenure_jobs SET state = 'succeeded', finished_at = clock_timestamp()
             - interval '6 days' WHERE id BETWEEN 24 AND 30""",
    )
    rows(
        tenure_dsn,
        """UPDATE tenure_jobs SET state = 'running', owner = 'w', token = 1,
             lease_until = clock_timestamp() + interval '1 minute',
             created_at = clock_timestamp() - interval '30 days' WHERE id BETWEEN 31 AND 35""",
    )
    batches: list[int] = []
    prune = store.prune_jobs

    async def counted(retention_ms: int, limit: int, timeout_ms: int) -> int:
        batches.append(await prune(retention_ms, limit, timeout_ms))
        return batches[-1]

    store.prune_jobs = counted  # type: ignore[method-assign]
    pruner = JobPruner(store, JobPrunerConfig(retention=7 * DAY, batch=10))
    assert await pruner.run_once() == 23
    assert batches == [10, 10, 3]
    left = rows(tenure_dsn, "SELECT id, state FROM tenure_jobs ORDER BY id")
    assert [job_id for job_id, _ in left] == list(range(24, 41))
    assert await pruner.run_once() == 0  # nothing left to do; and no log line for it


async def test_disabled_and_invalid_configs(store: Store) -> None:
    off = JobPruner(store, JobPrunerConfig(retention=None))
    assert await off.run_once() == 0
    off.start()
    await off.stop()  # never started a task; stopping twice is fine
    await off.stop()
    on = JobPruner(store, JobPrunerConfig(interval=3600))
    on.start()
    on.start()
    await on.stop()
    for options, message in [
        ({"retention": 0}, "retention=0 is outside"),
        ({"interval": 0}, "interval=0 is outside"),
        ({"batch": 0}, "batch=0 is outside"),
        ({"batch": 2.5}, "batch must be an integer"),
        ({"statement_timeout": "10"}, "statement_timeout must be a number"),
    ]:
        with pytest.raises(PolicyError, match=message):
            JobPrunerConfig(**options)  # type: ignore[arg-type]
