"""Planner statistics after a burst: a bulk enqueue analyzes in its own transaction, the
keeper analyzes after many small ones, and the claim then walks the queued index in order
instead of sorting the whole queue."""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.maintenance.conftest import rows
from tests.integration.store.helpers import new_job
from tests.support.waiting import wait_until_async

from tenure import PolicyError
from tenure._maintenance._statistics import StatisticsConfig, StatisticsKeeper
from tenure._store import Store
from tenure._store._connection import BULK_ANALYZE_MIN

CLAIM = {"owner": "w", "tools": ["t"], "lease_ms": [60_000], "limit": 100}


def analyzed_rows(dsn: str) -> float:
    [row] = rows(dsn, "SELECT reltuples FROM pg_class WHERE oid = 'tenure_jobs'::regclass")
    return float(row[0])  # type: ignore[arg-type]


def nodes(plan: Any) -> list[dict[str, Any]]:
    """Every node of a JSON plan, depth first."""
    found = [plan]
    for child in plan.get("Plans", []):
        found += nodes(child)
    return found


async def queued_scan(store: Store) -> list[str]:
    """The node types under the claim's `queued` CTE."""
    [top] = await store.explain("claim", CLAIM)
    [cte] = [n for n in nodes(top["Plan"]) if n.get("Subplan Name") == "CTE queued"]
    return [n["Node Type"] for n in nodes(cte)]


async def test_a_bulk_enqueue_commits_statistics_that_count_its_jobs(
    store: Store, tenure_dsn: str
) -> None:
    assert analyzed_rows(tenure_dsn) < 0  # never analyzed: the planner guesses
    n = 3 * BULK_ANALYZE_MIN
    assert (
        sum(e.created for e in await store.enqueue_many([new_job(f"j{i}") for i in range(n)])) == n
    )
    assert analyzed_rows(tenure_dsn) == pytest.approx(n, rel=0.1)
    scan = await queued_scan(store)
    assert "Sort" not in scan and "Bitmap Heap Scan" not in scan, scan
    assert "Index Scan" in scan


async def test_small_batches_leave_the_statistics_alone(store: Store, tenure_dsn: str) -> None:
    small = BULK_ANALYZE_MIN - 1
    assert (
        sum(e.created for e in await store.enqueue_many([new_job(f"j{i}") for i in range(small)]))
        == small
    )
    assert analyzed_rows(tenure_dsn) < 0


async def test_a_bulk_enqueue_into_a_table_that_knows_more_rows_does_not_analyze(
    store: Store, tenure_dsn: str
) -> None:
    first = 4 * BULK_ANALYZE_MIN
    await store.enqueue_many([new_job(f"a{i}") for i in range(first)])
    assert analyzed_rows(tenure_dsn) == first
    await store.enqueue_many([new_job(f"b{i}") for i in range(BULK_ANALYZE_MIN)])
    assert analyzed_rows(tenure_dsn) == first  # a quarter more is no news


async def test_the_keeper_analyzes_after_many_small_enqueues_and_then_rests(
    store: Store, tenure_dsn: str
) -> None:
    # Many small producers: no batch is big enough to analyze by itself. Their own
    # connections close afterwards, which flushes their counts into pgstat.
    producers = Store(tenure_dsn, max_size=4)
    await producers.open()
    batch = BULK_ANALYZE_MIN // 2
    for b in range(5):
        await producers.enqueue_many([new_job(f"b{b}-{i}") for i in range(batch)])
    await producers.close()
    keeper = StatisticsKeeper(store, StatisticsConfig(min_rows=1000))

    async def counted() -> bool:
        return bool((await store.jobs_statistics())["live_rows"] >= 5 * batch)

    await wait_until_async(
        counted, timeout=30, interval=0.1, message="pgstat never counted the rows"
    )
    assert await keeper.run_once() is True
    assert analyzed_rows(tenure_dsn) == pytest.approx(5 * batch, rel=0.1)
    assert await keeper.run_once() is False  # fresh now: nothing to do


async def test_the_keeper_leaves_small_tables_to_autovacuum(store: Store, tenure_dsn: str) -> None:
    await store.enqueue_many([new_job(f"j{i}") for i in range(50)])
    assert await StatisticsKeeper(store, StatisticsConfig(min_rows=1000)).run_once() is False
    assert analyzed_rows(tenure_dsn) < 0


@pytest.mark.parametrize(
    "options",
    [
        {"interval": 0.0},
        {"min_rows": 0},
        {"growth": 1.0},
        {"statement_timeout": "soon"},
        {"growth": True},
    ],
)
def test_bad_statistics_settings_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(PolicyError):
        StatisticsConfig(**options)


def test_staleness_rules() -> None:
    config = StatisticsConfig(min_rows=1000, growth=2.0)
    assert not config.stale({"analyzed_rows": -1, "live_rows": 999})
    assert config.stale({"analyzed_rows": -1, "live_rows": 1000})
    assert not config.stale({"analyzed_rows": 0, "live_rows": 1999})
    assert config.stale({"analyzed_rows": 0, "live_rows": 2000})
    assert not config.stale({"analyzed_rows": 50_000, "live_rows": 99_999})
    assert config.stale({"analyzed_rows": 50_000, "live_rows": 100_000})
