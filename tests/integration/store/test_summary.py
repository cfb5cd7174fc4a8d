"""The summary an operator (and `tenure demo`'s report) starts from counts owners as well as
events: one stopped owner may journal heartbeat_lost twice (withheld, then ended), and the
demo read 4 stale owners in one run and 8 in the next for the same 4 jobs."""

from __future__ import annotations

from tests.integration.store.helpers import new_job

from tenure._store import Store


async def test_owners_are_distinct_job_and_token_pairs_not_events(store: Store) -> None:
    first = await store.enqueue(new_job("a"))
    second = await store.enqueue(new_job("b"))
    for job_id, token, reason in (
        (first.id, 7, "executor_unobservable"),  # the same owner, twice
        (first.id, 7, "deadline_passed"),
        (first.id, 9, "zero_rows"),  # the same job under a later token: another owner
        (second.id, 8, "deadline_passed"),
    ):
        await store.record_event(
            "heartbeat_lost", job_id=job_id, token=token, detail={"reason": reason}
        )
    await store.record_event("result_rejected", job_id=second.id, token=8)
    summary = await store.summary()
    assert summary["events_heartbeat_lost"] == 4
    assert summary["owners_heartbeat_lost"] == 3
    assert summary["events_result_rejected"] == summary["owners_result_rejected"] == 1
