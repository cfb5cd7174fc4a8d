"""The pipelines guide's example (docs/guides/pipelines.md) runs as written: with the
stages' other tools declared beside it, as a reader's module would, a patch without a test
goes back to ``correct``, comes back to the same gate in round 2, passes ``secops``, and
each of the gate's decisions reaches the outbox's tool once."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.docs import example, run_fragment
from tests.support.waiting import wait_until_async

import tenure
from tenure import Context, Verdict

pytestmark = pytest.mark.storage


async def test_the_review_example_sends_an_untested_patch_back_and_then_succeeds(
    tenure_dsn: str,
) -> None:
    app = tenure.App(tenure_dsn)
    recorded: list[tuple[int, str]] = []

    @app.tool(lease=60, heartbeat=15, jitter=10)
    async def develop(ctx: Context, task: str) -> dict[str, Any]:
        return {"patch": f"fix for {task}", "tested": False}

    @app.tool(lease=60, heartbeat=15, jitter=10)
    async def correct(ctx: Context, patch: str, feedback: dict[str, Any]) -> dict[str, Any]:
        return {"patch": f"{patch}, {feedback['diagnosis']}", "tested": True}

    @app.tool(lease=60, heartbeat=15, jitter=10)
    async def secops(ctx: Context, patch: str) -> Verdict:
        return Verdict("approve")

    @app.tool(lease=60, heartbeat=15, jitter=10)
    async def record_gate_status(ctx: Context, round: int, decision: str) -> None:
        recorded.append((round, decision))

    try:
        names = await run_fragment(example("pipeline"), app)
        done = names["done"]
        assert done.state == "succeeded", done
        path = [(s.name, s.round, s.decision) for s in done.stages if s.kind == "stage"]
        assert path == [
            ("develop", 1, None),
            ("qa", 1, "reject"),
            ("correct", 1, None),
            ("qa", 2, "approve"),
            ("secops", 1, "approve"),
        ], path
        deliveries = [s.name for s in done.stages if s.kind == "outbox"]
        assert deliveries == ["qa>record_gate_status"] * 2, deliveries
        await wait_until_async(lambda: len(recorded) == 2, timeout=30, message=str(recorded))
        assert sorted(recorded) == [(1, "reject"), (2, "approve")]
    finally:
        await app.aclose()
