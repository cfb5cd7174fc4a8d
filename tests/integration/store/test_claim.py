import asyncio
import dataclasses

from tests.integration.store.helpers import new_job, reclaim
from tests.support.waiting import wait_until_async

from tenure._store import Store


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
