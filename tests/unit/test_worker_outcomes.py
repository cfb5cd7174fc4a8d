"""Decisions the worker makes without asking the database: a threaded call that returns
after its job was cancelled is discarded whichever news reaches the loop first, and a
pool that lost its server reconnects promptly."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from tenure import Context
from tenure._policy import ToolPolicy
from tenure._registry import make_spec
from tenure._store import MAX_RECONNECT_DELAY, ClaimedJob, PromptReconnect
from tenure._worker._executor import Abandoned, Executor
from tenure._worker._ownership import Ownership


def claimed(job_id: int, token: int) -> ClaimedJob:
    now = datetime.now(UTC)
    return ClaimedJob(
        id=job_id,
        tool="t",
        token=token,
        attempt=1,
        max_attempts=3,
        payload={},
        payload_hash="h",
        idempotency_key="k",
        lease_until=now + timedelta(seconds=30),
        db_now=now,
        previous_owner=None,
        previous_token=None,
        sent_at=time.monotonic(),
    )


async def test_a_threaded_result_after_a_cancel_is_discarded_whatever_arrives_first() -> None:
    """The tool thread sees ``ctx.cancelled`` and returns before the worker's interrupt
    reaches the loop: its result must still be discarded, not sent to a commit."""
    job = claimed(1, 7)
    ownership = Ownership(job.sent_at, job.lease_remaining)
    ctx = Context(
        job_id=job.id,
        tool=job.tool,
        token=job.token,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        worker="w",
        ownership=ownership,
        safety_margin=1.0,
    )
    returned = threading.Event()

    def tool(ctx: Context) -> str:
        ownership.mark_cancelled()  # what the heartbeat thread does on a cancel
        returned.set()
        return "done anyway"

    outcome = await Executor().run(make_spec("t", tool, ToolPolicy()), ctx, job, {})
    assert returned.is_set()
    assert outcome == Abandoned("cancelled", "succeeded")
    # And the same call, still owned, commits its result as usual.
    owned = Context(
        job_id=2,
        tool="t",
        token=8,
        attempt=1,
        max_attempts=3,
        worker="w",
        ownership=Ownership(time.monotonic(), 30),
        safety_margin=1.0,
    )
    plain = await Executor().run(
        make_spec("t", lambda ctx: "fine", ToolPolicy()), owned, claimed(2, 8), {}
    )
    assert not isinstance(plain, Abandoned)
    assert (plain.state, plain.result_json) == ("succeeded", '"fine"')


def test_a_pool_reconnects_within_a_fraction_of_a_second() -> None:
    """The pool's reconnection schedule after an outage: prompt, and never a backoff that
    grew to seconds while the server was away."""
    attempt = PromptReconnect(timeout=300)
    delays = []
    now = 0.0
    for _ in range(30):
        attempt.update_delay(now)
        delays.append(attempt.delay)
        now += attempt.delay
    assert delays[0] <= 0.06
    assert max(delays) == MAX_RECONNECT_DELAY <= 0.25
