"""Small builders for store-level tests."""

from tests.support.waiting import wait_until_async

from tenure._payload import encode, fingerprint
from tenure._store import ClaimedJob, NewJob, Store


def new_job(key: str, tool: str = "t", payload: object = None, attempts: int = 3) -> NewJob:
    text = encode(payload if payload is not None else {"key": key})
    return NewJob(tool, key, text, fingerprint(tool + "\n" + text), attempts)


async def reclaim(store: Store, owner: str, leases: dict[str, int]) -> ClaimedJob:
    """Poll ``claim`` as ``owner`` until it takes a job (one whose lease ran out): that job."""
    taken: list[ClaimedJob] = []

    async def claimed() -> bool:
        taken.extend(await store.claim(owner, leases, 1))
        return bool(taken)

    await wait_until_async(claimed, message="no lease ran out to be reclaimed")
    return taken[0]
