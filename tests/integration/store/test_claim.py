import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from tests.integration.store.helpers import new_job, reclaim
from tests.support.waiting import wait_until_async

from tenure._store import MAX_CLAIM, QUERIES, Store


async def test_concurrent_claimers_take_each_job_exactly_once(store: Store) -> None:
    jobs = [new_job(f"k{i}") for i in range(2000)]
    assert sum(e.created for e in await store.enqueue_many(jobs)) == 2000
    claims: dict[str, list[tuple[int, int]]] = {}

    async def claimer(name: str) -> None:
        mine = claims.setdefault(name, [])
        while True:
            batch = await store.claim(name, {"t": 60_000}, 25)
            if not batch:
                return
            tokens = [j.token for j in batch]
            assert len(set(tokens)) == len(tokens)
            mine.extend((j.id, j.token) for j in batch)

    await asyncio.gather(*(claimer(f"w{i}") for i in range(8)))
    everything = [pair for pairs in claims.values() for pair in pairs]
    ids = [job_id for job_id, _ in everything]
    tokens = [token for _, token in everything]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 2000
    assert len(set(tokens)) == 2000
    for pairs in claims.values():  # each claimer saw its tokens rise
        seen = [token for _, token in pairs]
        assert seen == sorted(seen)
    assert sum(1 for pairs in claims.values() if pairs) > 1, "only one claimer got work"


async def test_claim_sets_lease_from_the_database_clock(store: Store) -> None:
    await store.enqueue(new_job("one"))
    [job] = await store.claim("w", {"t": 5_000}, 10)
    assert job.attempt == 1 and job.token > 0
    assert 4.9 <= job.lease_remaining <= 5.0
    assert job.previous_token is None


async def test_claim_only_takes_registered_tools_and_respects_run_after(store: Store) -> None:
    await store.enqueue(new_job("other", tool="elsewhere"))
    later = new_job("later")
    await store.enqueue(dataclasses.replace(later, delay_ms=60_000))
    assert await store.claim("w", {"t": 5_000}, 10) == []


async def test_expired_lease_is_reclaimed_with_a_higher_token(store: Store) -> None:
    await store.enqueue(new_job("x"))
    [first] = await store.claim("w1", {"t": 500}, 1)
    again = await reclaim(store, "w2", {"t": 5_000})
    assert again.id == first.id
    assert again.token > first.token
    assert again.attempt == 2
    assert (again.previous_owner, again.previous_token) == ("w1", first.token)
    events = await store.job_timeline(first.id)
    # The expired lease is journaled under its own token and attempt, then the reclaim.
    assert [e["kind"] for e in events] == ["job_claimed", "lease_expired", "job_claimed"]
    assert (events[1]["token"], events[1]["attempt"], events[1]["worker"]) == (first.token, 1, "w1")
    assert events[2]["detail"] == {"reclaimed_from": "w1", "previous_token": first.token}


async def test_exhausted_expired_lease_fails_with_a_reason(store: Store) -> None:
    await store.enqueue(new_job("x", attempts=1))
    [job] = await store.claim("w1", {"t": 500}, 1)
    failed: list[int] = []

    async def rescued() -> bool:
        assert await store.claim("w2", {"t": 500}, 1) == []  # never reclaimed past max
        failed.extend(await store.fail_exhausted_leases(100))
        return bool(failed)

    await wait_until_async(rescued, message="the exhausted lease was never failed")
    assert failed == [job.id]
    row = await store.get_job(job.id)
    assert row.state == "failed" and row.error == {
        "code": "lease_expired",
        "message": "the lease expired on the last allowed attempt",
    }


async def test_a_claim_outside_its_bounds_is_refused_and_takes_nothing(store: Store) -> None:
    await store.enqueue(new_job("k"))
    for limit in (0, MAX_CLAIM + 1):
        with pytest.raises(ValueError, match="a claim takes 1 to 1000 jobs"):
            await store.claim("w", {"t": 5_000}, limit)
    (job,) = await store.claim("w", {"t": 5_000}, MAX_CLAIM)
    assert job.attempt == 1


def test_the_claim_settles_on_one_generic_plan_however_long_the_queue(tenure_dsn: str) -> None:
    """A generic plan sized by a tenth of a long queue looked dearer than every custom plan,
    so each claim was planned afresh (about a millisecond a call, the claim's largest cost
    at four processes). After the custom plans PostgreSQL tries first, it keeps one."""
    with psycopg.connect(tenure_dsn, autocommit=True, prepare_threshold=0) as conn:
        conn.execute(
            "INSERT INTO tenure_jobs (tool, idempotency_key, payload, payload_hash,"
            " max_attempts, position)"
            " SELECT 't', 'q' || g, '{}', 'h', 3, g FROM generate_series(1, 100000) g"
        )
        conn.execute("ANALYZE tenure_jobs")
        params = {"owner": "w", "tools": ["t"], "lease_ms": [30_000], "limit": 100}
        for _ in range(10):
            assert len(conn.execute(QUERIES["claim"], params).fetchall()) == 100
        row = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE 'WITH policy AS%'"
        ).fetchone()
    assert row is not None
    generic, custom = row
    assert generic >= 4 and custom <= 6, (generic, custom)


@pytest.mark.parametrize(("limit", "statement"), [(3, "claim"), (150, "claim_large")])
def test_a_claim_locks_no_more_queued_jobs_than_it_takes(
    tenure_dsn: str, limit: int, statement: str
) -> None:
    """The queued branch is bounded by a constant (100, or 1,000 for claim_large), not by the
    limit: the limit still decides how many rows it locks, since a WITH query runs only as
    far as it is read."""
    with psycopg.connect(tenure_dsn) as conn:
        conn.execute(
            "INSERT INTO tenure_jobs (tool, idempotency_key, payload, payload_hash,"
            " max_attempts, position)"
            " SELECT 't', 'q' || g, '{}', 'h', 3, g FROM generate_series(1, 2000) g"
        )
        params = {"owner": "w", "tools": ["t"], "lease_ms": [30_000], "limit": limit}
        row = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + QUERIES[statement], params
        ).fetchone()
        conn.rollback()
    assert row is not None
    (cte,) = [n for n in _nodes(row[0][0]["Plan"]) if n.get("Subplan Name") == "CTE queued"]
    (lock,) = [n for n in _nodes(cte) if n["Node Type"] == "LockRows"]
    assert lock["Actual Rows"] == limit


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


async def test_a_claim_larger_than_the_default_batch_takes_all_it_asks(store: Store) -> None:
    assert sum(e.created for e in await store.enqueue_many([new_job(f"k{i}") for i in range(700)]))
    taken = await store.claim("w", {"t": 60_000}, 600)
    assert len(taken) == 600 and len({j.id for j in taken}) == 600
    assert len(await store.claim("w", {"t": 60_000}, MAX_CLAIM)) == 100
