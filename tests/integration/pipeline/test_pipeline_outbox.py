"""External systems of record: the next step's intent is an outbox job, delivered once.

A review engine's gates recorded their verdict in a remote API and then, in a separate
step, dispatched the next call; a crash in between lost it. Here a gate's outcome writes its
outbox job in the same transaction, and the delivery carries the job's idempotency key
and fencing token to the receiver (the example case service, a real HTTP process). A
delivery whose every attempt failed is sent again by the rescuer — the same job, so the
same key — and the receiver replays the first answer instead of applying it twice.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.integration.fence.helpers import Receivers, count_rows
from tests.integration.pipeline.pipeline_support import Tables, serving
from tests.support.waiting import wait_until_async

import tenure
from tenure import Context, Stage, Verdict
from tenure.fence import raise_for_fence


def make_app(dsn: str) -> tenure.App:
    app = tenure.App(dsn)

    @app.tool(lease=5, heartbeat=1, jitter=1)
    async def judge(ctx: Context) -> Verdict:
        return Verdict("approve")

    @app.tool(lease=5, heartbeat=1, jitter=1, max_attempts=1)
    async def publish(
        ctx: Context, run_id: int, stage: str, decision: str, tracker: str, lose_answer: str
    ) -> dict[str, Any]:
        """Records the gate's decision at the tracker; loses the answer once if told to."""
        async with httpx.AsyncClient(base_url=tracker, timeout=5) as client:
            response = await client.post(
                "/cases",
                json={"title": f"run {run_id}: {stage} decided {decision}"},
                auth=ctx.http_auth("publish"),
            )
        raise_for_fence(response)
        response.raise_for_status()
        if os.path.exists(lose_answer):
            os.remove(lose_answer)
            raise tenure.PermanentError("the tracker's answer was lost on the way back")
        return {"case_id": response.json()["case_id"]}

    app.pipeline("gated", [Stage("qa", tool="judge", on={"approve": ()}, outbox=["publish"])])
    return app


@pytest.fixture
async def app(tenure_dsn: str) -> AsyncIterator[tenure.App]:
    async with serving(make_app(tenure_dsn)) as app:
        yield app


async def test_an_undelivered_intent_is_sent_again_and_applied_once(
    app: tenure.App, tenure_dsn: str, tables: Tables, tmp_path: Path
) -> None:
    receiver = Receivers(tenure_dsn, tmp_path).start()
    try:
        lose = tmp_path / "lose-answer"
        lose.touch()
        run = await app.start_run("gated", {"tracker": receiver.url, "lose_answer": str(lose)})
        done = await app.wait_run(run.id, timeout=30)
        assert done.state == "succeeded"  # the run does not wait for its deliveries
        (outbox,) = [s for s in done.stages if s.kind == "outbox"]
        assert (outbox.name, outbox.round) == ("qa>publish", 1)
        assert outbox.job is not None
        assert outbox.job.idempotency_key == f"run:{run.id}:qa>publish:1"

        def outbox_state() -> str:
            return str(
                tables.value(
                    "SELECT state FROM tenure_run_stages WHERE id = %(id)s", {"id": outbox.id}
                )
            )

        await wait_until_async(lambda: outbox_state() == "succeeded", timeout=20, interval=0.05)
        final = await app.get_run(run.id)
        (delivery,) = [s.job for s in final.stages if s.kind == "outbox"]
        assert delivery is not None and delivery.id == outbox.job.id  # the same job, re-sent
        assert delivery.attempt == 2 and delivery.state == "succeeded"
        outcomes = {"dispatched", "failed", "retry_requested", "succeeded"}
        kinds = [e["kind"] for e in await app.admin.events(delivery.id) if e["kind"] in outcomes]
        assert kinds == ["dispatched", "failed", "retry_requested", "succeeded"]
        key = f"tool-job:{delivery.id}:publish"
        assert count_rows(tenure_dsn, "example_cases", key) == 1  # applied once
        assert [d["decision"] for d in receiver.decisions(key)] == ["accepted", "replayed"]
    finally:
        receiver.kill()
